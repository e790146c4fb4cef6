package schedule

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// The exhaustive test builds every list of a few items over two keys and, for
// each, explores every state the applier can drive the Scheduler into: every
// order of Add, Next, Executed, Committed and Requeue events, with as many
// workers as there are items. Each distinct state (how many items were added,
// where each is) is expanded once; every transition out of it is applied and
// the state it leads to checked against the reference model, and every misuse
// from it too.

// kind is one shape of item.
type kind struct {
	name    string
	keys    []uint64
	barrier bool
}

var (
	kindNil     = kind{name: "-"}
	kindEmpty   = kind{name: "{}", keys: []uint64{}}
	kindA       = kind{name: "a", keys: []uint64{1}}
	kindB       = kind{name: "b", keys: []uint64{2}}
	kindAB      = kind{name: "ab", keys: []uint64{1, 2}}
	kindAA      = kind{name: "aa", keys: []uint64{1, 1}}
	kindBarrier = kind{name: "B", barrier: true}
)

// exploration is the search over one list of items.
type exploration struct {
	outOfOrder bool
	kinds      []kind
	// misuse also checks, in every state, that every call the state forbids
	// panics and changes nothing.
	misuse  bool
	visited map[string]bool
	edges   int
}

// stateKey names a state by what the model knows: the Scheduler must behave
// the same whichever history led there.
func stateKey(m *refModel) string {
	b := make([]byte, len(m.items))
	for i, it := range m.items {
		switch {
		case it.committed:
			b[i] = 'c'
		case it.executed:
			b[i] = 'e'
		case it.running:
			b[i] = 'r'
		case it.requeued:
			b[i] = 'q'
		default:
			b[i] = 'w'
		}
	}
	return string(b)
}

// cloneScheduler deep-copies s, so that each transition from a state starts
// from that state. The copy's ring is as small as the window allows, which is
// faster to copy and makes later Adds exercise grow.
func cloneScheduler(s *Scheduler) *Scheduler {
	c := *s
	size := 1
	for Seq(size) < s.last-s.low {
		size *= 2
	}
	c.items, c.mask = make([]item, size), Seq(size-1)
	for q := s.low + 1; q <= s.last; q++ {
		it := s.at(q)
		c.items[q&c.mask] = item{keys: slices.Clone(it.keys), dependents: slices.Clone(it.dependents), deps: it.deps, phase: it.phase}
	}
	c.owner = maps.Clone(s.owner)
	c.readyHeap = slices.Clone(s.readyHeap)
	return &c
}

// panics reports whether f panics.
func panics(f func()) (did bool) {
	defer func() {
		if recover() != nil {
			did = true
		}
	}()
	f()
	return false
}

func (e *exploration) explore(s *Scheduler, m *refModel, history []string) error {
	where := func(err error) error {
		return fmt.Errorf("outOfOrder=%v items %v after %v: %w", e.outOfOrder, e.names(), history, err)
	}
	// Check on every arrival, not only the first: another history may have
	// left the Scheduler's internals different.
	if err := check(s, m); err != nil {
		return where(err)
	}
	key := stateKey(m)
	if e.visited[key] {
		return nil
	}
	e.visited[key] = true
	if e.misuse {
		if err := e.misuses(s, m); err != nil {
			return where(err)
		}
	}

	type move struct {
		name  string
		apply func(*Scheduler, *refModel) error
	}
	var moves []move
	if len(m.items) < len(e.kinds) {
		k := e.kinds[len(m.items)]
		moves = append(moves, move{"add " + k.name, func(s *Scheduler, m *refModel) error {
			if got, want := s.Add(k.keys, k.barrier), m.add(k.keys, k.barrier); got != want {
				return fmt.Errorf("Add = %d, want %d", got, want)
			}
			return nil
		}})
	}
	moves = append(moves, move{"next", func(s *Scheduler, m *refModel) error {
		want := m.startable()
		seq, ok := s.Next()
		switch {
		case !ok && len(want) > 0:
			return fmt.Errorf("Next() = none, want %d", want[0])
		case ok && (len(want) == 0 || seq != want[0]):
			return fmt.Errorf("Next() = %d, want the lowest of %v", seq, want)
		case ok:
			m.start(seq)
		}
		return nil
	}})
	// A worker that may start only the items within a window of 1 or 2
	// items after the low watermark (Window's limit).
	for _, window := range []int{1, 2} {
		moves = append(moves, move{fmt.Sprint("next within ", window), func(s *Scheduler, m *refModel) error {
			var want []Seq
			for _, q := range m.startable() {
				if q <= m.low()+Seq(window) {
					want = append(want, q)
				}
			}
			seq, ok := s.NextWithin(window)
			switch {
			case !ok && len(want) > 0:
				return fmt.Errorf("NextWithin(%d) = none, want %d", window, want[0])
			case ok && (len(want) == 0 || seq != want[0]):
				return fmt.Errorf("NextWithin(%d) = %d, want the lowest of %v", window, seq, want)
			case ok:
				m.start(seq)
			}
			return nil
		}})
	}
	for q := Seq(1); q <= Seq(len(m.items)); q++ {
		it := m.item(q)
		if it.running {
			moves = append(moves, move{fmt.Sprint("execute ", q), func(s *Scheduler, m *refModel) error {
				s.Executed(q)
				m.execute(q)
				return nil
			}})
		}
		if m.mayCommit(q) {
			moves = append(moves, move{fmt.Sprint("commit ", q), func(s *Scheduler, m *refModel) error {
				s.Committed(q)
				m.commit(q)
				return nil
			}})
		}
		if it.running || it.executed {
			moves = append(moves, move{fmt.Sprint("requeue ", q), func(s *Scheduler, m *refModel) error {
				s.Requeue(q)
				m.requeue(q)
				return nil
			}})
		}
	}
	for _, mv := range moves {
		e.edges++
		cs, cm := cloneScheduler(s), m.clone()
		h := append(slices.Clip(history), mv.name)
		if err := mv.apply(cs, cm); err != nil {
			return fmt.Errorf("outOfOrder=%v items %v after %v: %w", e.outOfOrder, e.names(), h, err)
		}
		if err := e.explore(cs, cm, h); err != nil {
			return err
		}
	}
	return nil
}

// misuses calls, in state (s, m), every Executed, Committed, Requeue and
// MayCommit the state forbids: each must panic and leave the state unchanged.
func (e *exploration) misuses(s *Scheduler, m *refModel) error {
	for q := Seq(0); q <= Seq(len(m.items))+1; q++ {
		inRange := q >= 1 && q <= Seq(len(m.items))
		if (!inRange || !m.item(q).running) && !panics(func() { s.Executed(q) }) {
			return fmt.Errorf("Executed(%d) did not panic", q)
		}
		if (!inRange || !m.mayCommit(q)) && !panics(func() { s.Committed(q) }) {
			return fmt.Errorf("Committed(%d) did not panic", q)
		}
		if (!inRange || !(m.item(q).running || m.item(q).executed)) && !panics(func() { s.Requeue(q) }) {
			return fmt.Errorf("Requeue(%d) did not panic", q)
		}
		if !inRange && !panics(func() { s.MayCommit(q) }) {
			return fmt.Errorf("MayCommit(%d) did not panic", q)
		}
	}
	if err := check(s, m); err != nil {
		return fmt.Errorf("after misuse: %w", err)
	}
	return nil
}

func (e *exploration) names() []string {
	var n []string
	for _, k := range e.kinds {
		n = append(n, k.name)
	}
	return n
}

// lists returns every list of n items drawn from kinds.
func lists(kinds []kind, n int) [][]kind {
	if n == 0 {
		return [][]kind{nil}
	}
	var out [][]kind
	for _, l := range lists(kinds, n-1) {
		for _, k := range kinds {
			out = append(out, append(slices.Clip(l), k))
		}
	}
	return out
}

func TestExhaustive(t *testing.T) {
	all := []kind{kindNil, kindEmpty, kindA, kindB, kindAB, kindAA, kindBarrier}
	cases := []struct {
		name  string
		kinds []kind
		n     int
		// misuse: also check every forbidden call in every state.
		misuse bool
	}{
		{"every kind, 1 item", all, 1, true},
		{"every kind, 2 items", all, 2, true},
		{"every kind, 3 items", all, 3, true},
		{"4 items", []kind{kindNil, kindA, kindB, kindAB, kindBarrier}, 4, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var lists_, states, edges int
			for _, outOfOrder := range []bool{false, true} {
				for _, l := range lists(c.kinds, c.n) {
					e := &exploration{outOfOrder: outOfOrder, kinds: l, misuse: c.misuse, visited: map[string]bool{}}
					require.NoError(t, e.explore(New(outOfOrder), &refModel{outOfOrder: outOfOrder}, nil))
					// Every run can end with every item committed.
					require.True(t, e.visited[string(slices.Repeat([]byte("c"), c.n))], "items %v never all committed", e.names())
					lists_++
					states += len(e.visited)
					edges += e.edges
				}
			}
			t.Logf("%d item lists, %d states, %d transitions", lists_, states, edges)
		})
	}
}
