package schedule

import (
	"fmt"
	"maps"
	"slices"
)

// refModel is the reference the Scheduler is checked against: it keeps every
// item ever added and derives what may start and commit from the rules
// themselves, by brute force over all pairs of items, with none of the
// Scheduler's bookkeeping (owners, dependency counts, ring, heap).
type refModel struct {
	outOfOrder bool
	items      []refItem // item seq is items[seq-1]
}

type refItem struct {
	keys    []uint64
	barrier bool
	// running: started and not executed; executed: executed and not committed.
	running, executed, committed bool
	// requeued: rolled back and not started since.
	requeued bool
}

func (m *refModel) add(keys []uint64, barrier bool) Seq {
	m.items = append(m.items, refItem{keys: slices.Clone(keys), barrier: barrier})
	return Seq(len(m.items))
}

func (m *refModel) item(seq Seq) *refItem { return &m.items[seq-1] }

// conflict: the two items share a key, or either is a barrier.
func (m *refModel) conflict(a, b Seq) bool {
	x, y := m.item(a), m.item(b)
	if x.barrier || y.barrier {
		return true
	}
	for _, k := range x.keys {
		if slices.Contains(y.keys, k) {
			return true
		}
	}
	return false
}

func (m *refModel) allCommittedBefore(seq Seq) bool {
	for q := Seq(1); q < seq; q++ {
		if !m.item(q).committed {
			return false
		}
	}
	return true
}

// blockedBy returns an earlier uncommitted item that conflicts with seq, 0 if none.
func (m *refModel) blockedBy(seq Seq) Seq {
	for q := Seq(1); q < seq; q++ {
		if !m.item(q).committed && m.conflict(q, seq) {
			return q
		}
	}
	return 0
}

// notStarted: added and neither running, executed nor committed.
func (m *refModel) notStarted(seq Seq) bool {
	it := m.item(seq)
	return !it.running && !it.executed && !it.committed
}

func (m *refModel) mayStart(seq Seq) bool {
	return m.notStarted(seq) && m.blockedBy(seq) == 0 && (!m.item(seq).requeued || m.allCommittedBefore(seq))
}

func (m *refModel) startable() []Seq {
	var out []Seq
	for q := Seq(1); q <= Seq(len(m.items)); q++ {
		if m.mayStart(q) {
			out = append(out, q)
		}
	}
	return out
}

func (m *refModel) mayCommit(seq Seq) bool {
	it := m.item(seq)
	return it.executed && (m.outOfOrder || m.allCommittedBefore(seq))
}

func (m *refModel) low() Seq {
	q := Seq(0)
	for q < Seq(len(m.items)) && m.item(q+1).committed {
		q++
	}
	return q
}

func (m *refModel) pending() int {
	n := 0
	for _, it := range m.items {
		if !it.committed {
			n++
		}
	}
	return n
}

func (m *refModel) executedAfter(seq Seq) []Seq {
	var out []Seq
	for q := seq + 1; q <= Seq(len(m.items)); q++ {
		if m.item(q).executed {
			out = append(out, q)
		}
	}
	return out
}

func (m *refModel) start(seq Seq) {
	it := m.item(seq)
	it.running, it.requeued = true, false
}

func (m *refModel) execute(seq Seq) {
	it := m.item(seq)
	it.running, it.executed = false, true
}

func (m *refModel) commit(seq Seq) {
	it := m.item(seq)
	it.executed, it.committed = false, true
}

func (m *refModel) requeue(seq Seq) {
	it := m.item(seq)
	it.running, it.executed, it.requeued = false, false, true
}

func (m *refModel) clone() *refModel {
	return &refModel{outOfOrder: m.outOfOrder, items: slices.Clone(m.items)}
}

// check compares everything the Scheduler exposes, and the internal state it
// must not leak (the owner map, the last barrier), with the model.
func check(s *Scheduler, m *refModel) error {
	if got, want := s.LowWatermark(), m.low(); got != want {
		return fmt.Errorf("LowWatermark() = %d, want %d", got, want)
	}
	if got, want := s.Pending(), m.pending(); got != want {
		return fmt.Errorf("Pending() = %d, want %d", got, want)
	}
	inHeap := slices.Sorted(slices.Values(s.readyHeap))
	if want := m.startable(); !slices.Equal(inHeap, want) {
		return fmt.Errorf("items ready to start = %v, want %v", inHeap, want)
	}
	for q := Seq(1); q <= Seq(len(m.items)); q++ {
		if got, want := s.MayCommit(q), m.mayCommit(q); got != want {
			return fmt.Errorf("MayCommit(%d) = %v, want %v", q, got, want)
		}
		if q <= s.low {
			continue
		}
		it := m.item(q)
		want := waiting
		switch {
		case it.committed:
			want = committed
		case it.executed:
			want = executed
		case it.running:
			want = running
		case m.mayStart(q):
			want = ready
		case it.requeued:
			want = requeued
		}
		if got := s.at(q).phase; got != want {
			return fmt.Errorf("item %d is %s, want %s", q, got, want)
		}
	}
	for _, q := range []Seq{0, m.low(), m.low() + 1, Seq(len(m.items)) / 2} {
		if got, want := s.ExecutedAfter(q), m.executedAfter(q); !slices.Equal(got, want) {
			return fmt.Errorf("ExecutedAfter(%d) = %v, want %v", q, got, want)
		}
	}
	// The owner map holds exactly the keys of uncommitted items, each owned by
	// the last such item that touched it: nothing leaks as items commit.
	owners := map[uint64]Seq{}
	var barrier Seq
	for q := Seq(1); q <= Seq(len(m.items)); q++ {
		it := m.item(q)
		if it.committed {
			continue
		}
		if it.barrier {
			barrier = q
			continue
		}
		for _, k := range it.keys {
			owners[k] = q
		}
	}
	if !maps.Equal(s.owner, owners) {
		return fmt.Errorf("key owners = %v, want %v", s.owner, owners)
	}
	if s.barrier != barrier {
		return fmt.Errorf("last uncommitted barrier = %d, want %d", s.barrier, barrier)
	}
	return nil
}
