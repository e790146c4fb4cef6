// Package schedule decides which source transactions the applier may replay in
// parallel, and when each may commit.
//
// The applier receives items in source order: a group of source transactions
// with its writeset (one hash per (table, key) it touches, before and after
// images), or a barrier (DDL, tables with foreign keys, writesets too large to
// track) that conflicts with everything. Two items conflict when they share a
// hash or either is a barrier. An item may start once every earlier item it
// conflicts with has committed, so two items that could touch the same row never
// run at the same time and rows end up as the source left them.
//
// The Scheduler is a pure state machine: no I/O, no goroutines, no clock, and it
// is not safe for concurrent use. The caller (the applier's workers) tells it
// what happened (Add, Executed, Committed, Requeue) and asks what may happen
// next (Next, MayCommit), under its own lock. That is what lets the decisions
// be tested exhaustively and deterministically, without a server.
//
// Commit order. In the default in-order mode an item commits only after every
// earlier item has committed, so the target is a consistent prefix of the source
// at every instant. In out-of-order mode an item commits as soon as it has
// executed; the target is then consistent only up to the low watermark (every
// item up to it committed), which the caller persists: after a crash replay
// restarts after it, so items after the watermark that had committed are
// replayed again.
//
// Commit-order deadlock (in-order mode). A later item L that has executed holds
// its row locks while it waits for its turn to commit. An earlier item E that
// does not share a hash with L can still wait on L's locks (gap and next-key
// locks, unique secondary keys the writeset does not cover): E waits for L's
// locks, L waits for E's commit. The worker layer detects E stuck, rolls back
// the executed items ExecutedAfter(E) and calls Requeue for each. A requeued
// item starts again only once every item before it has committed, so it cannot
// block an earlier item a second time.
package schedule

import "fmt"

// Seq numbers items 1, 2, 3... in the order they were added, which is source
// order. 0 is "no item".
type Seq uint64

// phase is where an item is in its life.
type phase uint8

const (
	// waiting: some earlier conflicting item has not committed yet.
	waiting phase = iota
	// ready: may start; it is in the ready heap until Next returns it.
	ready
	// running: returned by Next, its statements are being executed.
	running
	// executed: all its statements ran; it holds its locks until it commits.
	executed
	// committed: done. Its dependents no longer wait for it.
	committed
	// requeued: rolled back after it started; it starts again once every
	// earlier item has committed.
	requeued
)

func (p phase) String() string {
	switch p {
	case waiting:
		return "waiting"
	case ready:
		return "ready"
	case running:
		return "running"
	case executed:
		return "executed"
	case committed:
		return "committed"
	case requeued:
		return "requeued"
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

// item is the state of one uncommitted item (or of a committed one after the
// low watermark, in out-of-order mode).
type item struct {
	// keys are the distinct keys the item owns in Scheduler.owner: released when
	// it commits.
	keys []uint64
	// dependents are the later items whose deps count this item: they are
	// released when it commits, not when it is rolled back.
	dependents []Seq
	// deps is the number of earlier items this one waits for.
	deps  int32
	phase phase
}

// maxRetained is the largest keys or dependents capacity kept in a ring slot
// for the next item: a barrier may gather thousands of dependents, and one such
// item should not pin that memory for as long as the scheduler lives.
const maxRetained = 256

// Scheduler tracks items from Add to Committed. Its zero value is not usable:
// call New.
//
// Dependencies are found per key: owner maps each key to the last uncommitted
// item that touched it, and a new item depends only on those owners (and on the
// last uncommitted barrier). That is enough: an item starts only after the
// earlier toucher of each of its keys has committed, so once the last toucher of
// a key has committed every earlier one has too. Add costs O(keys), apart from
// a barrier's, which costs O(items after the low watermark); Committed costs
// O(keys + dependents); Next O(log ready items); the rest O(1) except
// ExecutedAfter.
type Scheduler struct {
	outOfOrder bool
	// items is a ring holding the items after the low watermark: item seq is at
	// items[seq&mask]. Its length is a power of two.
	items []item
	mask  Seq
	// last is the last item added, low the low watermark.
	last, low Seq
	// pending counts the items added and not committed.
	pending int
	// owner maps a key to the last uncommitted item that touched it. An entry is
	// deleted when its owner commits, so the map holds only the keys of
	// uncommitted items.
	owner map[uint64]Seq
	// barrier is the last uncommitted barrier, 0 if none. Every item added after
	// it depends on it.
	barrier Seq
	// readyHeap is a min-heap of the items that may start.
	readyHeap []Seq
}

// New returns an empty scheduler. outOfOrder lets an item commit as soon as it
// has executed instead of in source order; see the package comment.
func New(outOfOrder bool) *Scheduler {
	const initial = 64
	return &Scheduler{
		outOfOrder: outOfOrder,
		items:      make([]item, initial),
		mask:       initial - 1,
		owner:      map[uint64]Seq{},
	}
}

func (s *Scheduler) at(seq Seq) *item { return &s.items[seq&s.mask] }

// Add appends the next item in source order and returns its Seq. keys is its
// writeset; keys may repeat, and the scheduler keeps no reference to the slice.
// An item with no keys that is not a barrier conflicts with nothing (it still
// waits for an earlier barrier). A barrier conflicts with everything: it starts
// once every earlier item has committed and every later item waits for its
// commit; its keys are ignored.
func (s *Scheduler) Add(keys []uint64, barrier bool) Seq {
	if s.last-s.low == Seq(len(s.items)) {
		s.grow()
	}
	s.last++
	s.pending++
	seq := s.last
	it := s.at(seq)
	it.keys, it.dependents, it.deps, it.phase = it.keys[:0], it.dependents[:0], 0, waiting

	if s.barrier != 0 {
		s.dependOn(it, seq, s.barrier)
	}
	if barrier {
		for q := s.low + 1; q < seq; q++ {
			if s.at(q).phase != committed {
				s.dependOn(it, seq, q)
			}
		}
		s.barrier = seq
	} else {
		for _, k := range keys {
			o, held := s.owner[k]
			if o == seq {
				continue // a repeated key
			}
			if held {
				s.dependOn(it, seq, o)
			}
			s.owner[k] = seq
			it.keys = append(it.keys, k)
		}
	}
	if it.deps == 0 {
		s.makeReady(seq)
	}
	return seq
}

// dependOn makes it (item seq, being added) wait for the uncommitted item on,
// once however many keys they share.
func (s *Scheduler) dependOn(it *item, seq, on Seq) {
	o := s.at(on)
	// seq is the newest item and gets all its dependencies during its Add, so if
	// on already has it as a dependent, it is the last one.
	if n := len(o.dependents); n > 0 && o.dependents[n-1] == seq {
		return
	}
	o.dependents = append(o.dependents, seq)
	it.deps++
}

// grow doubles the ring.
func (s *Scheduler) grow() {
	items := make([]item, 2*len(s.items))
	mask := Seq(len(items) - 1)
	for q := s.low + 1; q <= s.last; q++ {
		items[q&mask] = s.items[q&s.mask]
	}
	s.items, s.mask = items, mask
}

// Next returns an item that may start now and marks it running; ok is false if
// there is none. It returns the lowest such seq: the oldest items hold up the
// commit order (in-order mode) and the low watermark (out-of-order mode), and a
// worker that frees up must never prefer a later item to the oldest
// uncommitted one, or every worker could end up holding a later executed item
// waiting for a commit turn that never comes. Each item is returned once per
// start: again only after a Requeue.
func (s *Scheduler) Next() (Seq, bool) {
	return s.NextWithin(0)
}

// NextWithin is Next restricted to the window items after the low watermark
// (0: no limit), which Window sets: the oldest uncommitted item is always
// within, so a window never starves it.
func (s *Scheduler) NextWithin(window int) (Seq, bool) {
	if len(s.readyHeap) == 0 || (window > 0 && s.readyHeap[0] > s.low+Seq(window)) {
		return 0, false
	}
	seq := s.popReady()
	s.at(seq).phase = running
	return seq, true
}

// Executed records that seq, returned by Next, ran all its statements and now
// waits to commit, holding its locks.
func (s *Scheduler) Executed(seq Seq) {
	it := s.uncommitted("Executed", seq)
	if it.phase != running {
		panic(fmt.Sprintf("schedule: Executed(%d): item is %s, not running", seq, it.phase))
	}
	it.phase = executed
}

// MayCommit reports whether seq may commit now: in out-of-order mode once it
// has executed; in in-order mode once it has executed and every earlier item
// has committed. It is false for an item already committed.
func (s *Scheduler) MayCommit(seq Seq) bool {
	s.added("MayCommit", seq)
	if seq <= s.low {
		return false
	}
	return s.at(seq).phase == executed && (s.outOfOrder || seq == s.low+1)
}

// Committed records that seq committed on the target. It must have been
// allowed by MayCommit. Items that waited only for it become ready, and the low
// watermark moves past it if every earlier item has committed.
func (s *Scheduler) Committed(seq Seq) {
	it := s.uncommitted("Committed", seq)
	if !s.MayCommit(seq) {
		if it.phase == executed {
			panic(fmt.Sprintf("schedule: Committed(%d): an earlier item has not committed (low watermark %d)", seq, s.low))
		}
		panic(fmt.Sprintf("schedule: Committed(%d): item is %s, not executed", seq, it.phase))
	}
	it.phase = committed
	s.pending--
	for _, k := range it.keys {
		if s.owner[k] == seq {
			delete(s.owner, k)
		}
	}
	if s.barrier == seq {
		s.barrier = 0
	}
	for _, d := range it.dependents {
		dep := s.at(d)
		dep.deps--
		if dep.deps == 0 {
			if dep.phase != waiting {
				panic(fmt.Sprintf("schedule: internal error: item %d released by %d is %s", d, seq, dep.phase))
			}
			s.makeReady(d)
		}
	}
	it.keys, it.dependents = trim(it.keys), trim(it.dependents)

	for s.low < s.last && s.at(s.low+1).phase == committed {
		s.low++
	}
	// The new oldest uncommitted item may be a requeued one whose turn it is.
	if s.low < s.last && s.at(s.low+1).phase == requeued {
		s.makeReady(s.low + 1)
	}
}

// Requeue records that seq, started (returned by Next) and not committed, was
// rolled back. It starts again (Next returns it) only once every earlier item
// has committed, immediately if that is already so. Until it commits it keeps
// its keys, and the items that depend on it keep waiting.
func (s *Scheduler) Requeue(seq Seq) {
	it := s.uncommitted("Requeue", seq)
	if it.phase != running && it.phase != executed {
		panic(fmt.Sprintf("schedule: Requeue(%d): item is %s, not started", seq, it.phase))
	}
	it.phase = requeued
	if seq == s.low+1 {
		s.makeReady(seq)
	}
}

// ExecutedAfter returns, in order, the items after seq that executed and have
// not committed. When seq is stuck, these are the items whose locks it may be
// waiting on: the candidates to roll back and Requeue. It costs O(items after
// the low watermark).
func (s *Scheduler) ExecutedAfter(seq Seq) []Seq {
	var out []Seq
	for q := max(seq, s.low) + 1; q <= s.last; q++ {
		if s.at(q).phase == executed {
			out = append(out, q)
		}
	}
	return out
}

// LowWatermark returns the highest seq such that it and every earlier item
// have committed, 0 if item 1 has not. Replay after a crash restarts after it.
func (s *Scheduler) LowWatermark() Seq { return s.low }

// Pending returns the number of items added and not committed. The scheduler's
// memory grows with the items after the low watermark: the caller bounds it by
// not adding while Pending is high.
func (s *Scheduler) Pending() int { return s.pending }

// added panics unless seq was returned by Add.
func (s *Scheduler) added(op string, seq Seq) {
	if seq == 0 || seq > s.last {
		panic(fmt.Sprintf("schedule: %s(%d): no such item (last added %d)", op, seq, s.last))
	}
}

// uncommitted returns the item seq, panicking unless it was added and is not
// committed.
func (s *Scheduler) uncommitted(op string, seq Seq) *item {
	s.added(op, seq)
	if seq <= s.low || s.at(seq).phase == committed {
		panic(fmt.Sprintf("schedule: %s(%d): item already committed", op, seq))
	}
	return s.at(seq)
}

func (s *Scheduler) makeReady(seq Seq) {
	s.at(seq).phase = ready
	// Push onto the min-heap.
	h := append(s.readyHeap, seq)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h[p] <= h[i] {
			break
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
	s.readyHeap = h
}

func (s *Scheduler) popReady() Seq {
	h := s.readyHeap
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		if r := l + 1; r < n && h[r] < h[l] {
			l = r
		}
		if h[i] <= h[l] {
			break
		}
		h[i], h[l] = h[l], h[i]
		i = l
	}
	s.readyHeap = h
	return top
}

// trim empties a slice for reuse by the next item in the same ring slot, unless
// it grew too large to keep.
func trim[T any](s []T) []T {
	if cap(s) > maxRetained {
		return nil
	}
	return s[:0]
}
