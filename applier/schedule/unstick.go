package schedule

import (
	"slices"
	"time"
)

// The stuck-group rule (in-order mode). The oldest uncommitted item, the head,
// must always be able to commit; two things can stop it, and the worker layer
// must tell them from a target that is merely slow, where every item takes long
// and rolling later ones back only adds work:
//
//   - Lock wait: the head waits in the server for a lock held by a later item
//     that has executed and waits, in rowlift, for its commit turn. The server
//     cannot see this deadlock. Evidence: the server's lock waits (who waits
//     for whom), asked by the worker layer. Only the later executed items the
//     head waits for, directly or through other waiting transactions, are
//     rolled back; all later executed ones when a holder cannot be named.
//   - Starvation: the head has no worker, and every worker holds a later item
//     that cannot finish (executed, waiting for its turn, or, by the server's
//     evidence, waiting for a lock). The scheduler's own state shows it.
//
// When the server cannot tell (the target user lacks the PROCESS privilege, or
// its lock tables' snapshot is stale), the rule falls back to timing: the head
// is taken for stuck once it has run Patience, a multiple of a high percentile
// of recent execution times, so a target that is slow for every item is never
// taken for a stuck one.

// Held is an item a worker holds, as the stuck-group rule sees it.
type Held struct {
	Seq Seq
	// Attempt numbers the item's starts: what the server said during an earlier
	// attempt says nothing of this one, whose transaction is another.
	Attempt uint64
	// Conn is the worker's server connection id.
	Conn uint64
	// Executed is set once all its statements ran: it waits for its commit
	// turn, holding its locks.
	Executed bool
}

// LockWaits is the server's evidence of who waits for whose locks.
type LockWaits struct {
	// Known is false when the server could not be asked or could not tell.
	Known bool
	// Before is what the workers held when the server was asked: an edge from
	// or to a worker's connection counts only if it holds the same attempt now.
	Before []Held
	// Waits maps a connection waiting for a lock to the connections holding
	// it; 0 is a holder the server could not name.
	Waits map[uint64][]uint64
}

// Observation is what the worker layer observed, for Unstick.
type Observation struct {
	// Workers is the number of workers allowed to hold an item.
	Workers int
	// Head is the oldest uncommitted item, 0 if none.
	Head Seq
	// Held are the items the workers hold, one per busy worker.
	Held  []Held
	Waits LockWaits
	// HeadFor is how long the head has run in its current attempt, and
	// Patience how long it may before the timing fallback takes it for stuck.
	HeadFor, Patience time.Duration
}

// Reason says why Unstick rolls items back.
type Reason uint8

const (
	// Healthy: nothing is stuck; a slow head is just slow.
	Healthy Reason = iota
	// Starved: the head has no worker, and no worker's item can finish.
	Starved
	// LockWait: the server shows the head waiting for the locks of the items
	// rolled back.
	LockWait
	// LockWaitUnnamed: the server shows the head waiting for a lock whose
	// holder it cannot name; every later executed item is rolled back.
	LockWaitUnnamed
	// Overdue: the server could not tell, and the head ran past Patience.
	Overdue
)

func (r Reason) String() string {
	return [...]string{"healthy", "starved", "lock wait", "lock wait, holder unnamed", "overdue"}[r]
}

// Verdict is the items to roll back and Requeue, in order, and why.
type Verdict struct {
	Rollback []Seq
	Reason   Reason
}

// Unstick decides which items to roll back so that the head can commit. It
// rolls back only items that executed after the head and wait for their commit
// turn: those are the ones that can hold up the head forever, and a requeued
// item restarts only once every item before it has committed, so it cannot
// block the same head twice.
func Unstick(o Observation) Verdict {
	if o.Head == 0 {
		return Verdict{}
	}
	var later []Held // executed items after the head, by Seq
	var head *Held
	for i := range o.Held {
		h := &o.Held[i]
		switch {
		case h.Seq == o.Head:
			head = h
		case h.Seq > o.Head && h.Executed:
			later = append(later, *h)
		}
	}
	if len(later) == 0 {
		return Verdict{}
	}
	slices.SortFunc(later, func(a, b Held) int { return int(a.Seq) - int(b.Seq) })
	waits := validWaits(o)
	if head == nil {
		if len(o.Held) < o.Workers {
			return Verdict{} // a free worker takes the head
		}
		for _, h := range o.Held {
			if !h.Executed && len(waits[h.Conn]) == 0 {
				return Verdict{} // it can finish and free its worker
			}
		}
		// Rolling back the last one frees a worker, which takes the head.
		return Verdict{Rollback: []Seq{later[len(later)-1].Seq}, Reason: Starved}
	}
	if head.Executed {
		return Verdict{} // it is committing
	}
	if !o.Waits.Known {
		if o.HeadFor > o.Patience {
			return Verdict{Rollback: seqs(later), Reason: Overdue}
		}
		return Verdict{}
	}
	// Follow the waits from the head: it may wait for another transaction
	// that waits for a later item.
	byConn := map[uint64]Held{}
	for _, h := range later {
		byConn[h.Conn] = h
	}
	var blocking []Seq
	seen := map[uint64]bool{head.Conn: true}
	queue := []uint64{head.Conn}
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		for _, holder := range waits[c] {
			if holder == 0 {
				return Verdict{Rollback: seqs(later), Reason: LockWaitUnnamed}
			}
			if seen[holder] {
				continue
			}
			seen[holder] = true
			if h, ok := byConn[holder]; ok {
				blocking = append(blocking, h.Seq)
			}
			queue = append(queue, holder)
		}
	}
	if len(blocking) == 0 {
		return Verdict{}
	}
	slices.Sort(blocking)
	return Verdict{Rollback: blocking, Reason: LockWait}
}

// validWaits returns the waits that still hold: an edge whose waiter or holder
// is a worker's connection counts only if the worker holds the same attempt of
// the same item as when the server was asked; other connections are other
// clients of the target. Nil when the server could not tell.
func validWaits(o Observation) map[uint64][]uint64 {
	if !o.Waits.Known {
		return nil
	}
	now := map[uint64]Held{}
	for _, h := range o.Held {
		now[h.Conn] = h
	}
	before := map[uint64]Held{}
	for _, h := range o.Waits.Before {
		before[h.Conn] = h
	}
	// same reports whether conn is another client's, or holds the same
	// attempt as when the server was asked.
	same := func(conn uint64) bool {
		b, wasWorker := before[conn]
		n, isWorker := now[conn]
		if !wasWorker && !isWorker {
			return true
		}
		return wasWorker && isWorker && b.Seq == n.Seq && b.Attempt == n.Attempt
	}
	out := map[uint64][]uint64{}
	for waiter, holders := range o.Waits.Waits {
		if !same(waiter) {
			continue
		}
		for _, h := range holders {
			if h == 0 || same(h) {
				out[waiter] = append(out[waiter], h)
			}
		}
	}
	return out
}

func seqs(hs []Held) []Seq {
	out := make([]Seq, len(hs))
	for i, h := range hs {
		out[i] = h.Seq
	}
	return out
}
