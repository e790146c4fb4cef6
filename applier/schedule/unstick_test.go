package schedule

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The stuck-group rule is checked exhaustively over small worlds: up to three
// workers holding any of items 1..3 (item 1 the head), running or executed;
// the server's evidence unknown, or known with every way each connection
// (the workers' and another client's) can wait for one other or for an
// unnamed holder, taken while the workers held the same items, or while one
// held another attempt; and the head within or past its patience. Each
// verdict is compared with a reference written from the rule's statement, and
// checked against properties that do not depend on how it is computed:
// safety (only executed items after the head are rolled back), no rollback on a
// slow but healthy target, and liveness (a real deadlock is always broken,
// and what is rolled back breaks it).

const outsider = 99 // another client's connection on the target

// world enumerates the observations.
func worlds(visit func(Observation)) {
	type slot struct {
		seq      Seq
		executed bool
	}
	choices := []slot{{}}
	for q := Seq(1); q <= 3; q++ {
		choices = append(choices, slot{q, false}, slot{q, true})
	}
	for workers := 1; workers <= 3; workers++ {
		var fill func(i int, held []Held)
		fill = func(i int, held []Held) {
			if i == workers {
				evidence(workers, held, visit)
				return
			}
			for _, c := range choices {
				if c.seq != 0 && slices.ContainsFunc(held, func(h Held) bool { return h.Seq == c.seq }) {
					continue
				}
				next := slices.Clip(held)
				if c.seq != 0 {
					next = append(next, Held{Seq: c.seq, Attempt: 1, Conn: uint64(10 + i), Executed: c.executed})
				}
				fill(i+1, next)
			}
		}
		fill(0, nil)
	}
}

// evidence visits every observation of one holding: unknown evidence, and
// known evidence with every wait graph and every Before.
func evidence(workers int, held []Held, visit func(Observation)) {
	for _, late := range []bool{false, true} {
		o := Observation{Workers: workers, Head: 1, Held: held, Patience: 100 * time.Millisecond, HeadFor: 50 * time.Millisecond}
		if late {
			o.HeadFor = 150 * time.Millisecond
		}
		visit(o)
	}
	conns := []uint64{outsider}
	for _, h := range held {
		conns = append(conns, h.Conn)
	}
	// Befores: as now, or one worker on another attempt, or one worker idle.
	befores := [][]Held{held}
	for i := range held {
		other := slices.Clone(held)
		other[i].Attempt++
		befores = append(befores, other, slices.Delete(slices.Clone(held), i, i+1))
	}
	// Each connection waits for nothing (-1), for one other connection, or
	// for an unnamed holder (0).
	targets := append([]uint64{0}, conns...)
	pick := make([]int, len(conns))
	for {
		waits := map[uint64][]uint64{}
		for i, p := range pick {
			if p > 0 && targets[p-1] != conns[i] {
				waits[conns[i]] = []uint64{targets[p-1]}
			}
		}
		for _, before := range befores {
			visit(Observation{Workers: workers, Head: 1, Held: held, Waits: LockWaits{Known: true, Before: before, Waits: waits},
				Patience: 100 * time.Millisecond, HeadFor: 150 * time.Millisecond})
		}
		i := 0
		for i < len(pick) && pick[i] == len(targets) {
			pick[i] = 0
			i++
		}
		if i == len(pick) {
			return
		}
		pick[i]++
	}
}

// refUnstick is the rule as stated, computed another way: valid edges by
// filtering pairs, reachability by iterating to a fixed point.
func refUnstick(o Observation) Verdict {
	find := func(hs []Held, conn uint64) (Held, bool) {
		i := slices.IndexFunc(hs, func(h Held) bool { return h.Conn == conn })
		if i < 0 {
			return Held{}, false
		}
		return hs[i], true
	}
	stable := func(conn uint64) bool {
		b, okB := find(o.Waits.Before, conn)
		n, okN := find(o.Held, conn)
		return okB == okN && (!okN || (b.Seq == n.Seq && b.Attempt == n.Attempt))
	}
	type edge struct{ from, to uint64 }
	var edges []edge
	if o.Waits.Known {
		for w, hs := range o.Waits.Waits {
			for _, h := range hs {
				if stable(w) && (h == 0 || stable(h)) {
					edges = append(edges, edge{w, h})
				}
			}
		}
	}
	waiting := func(conn uint64) bool {
		return slices.ContainsFunc(edges, func(e edge) bool { return e.from == conn })
	}
	var later []Seq
	laterConn := map[uint64]Seq{}
	var head *Held
	for i, h := range o.Held {
		if h.Seq == o.Head {
			head = &o.Held[i]
		} else if h.Seq > o.Head && h.Executed {
			later = append(later, h.Seq)
			laterConn[h.Conn] = h.Seq
		}
	}
	slices.Sort(later)
	switch {
	case o.Head == 0 || len(later) == 0:
		return Verdict{}
	case head == nil:
		if len(o.Held) < o.Workers {
			return Verdict{}
		}
		for _, h := range o.Held {
			if !h.Executed && !waiting(h.Conn) {
				return Verdict{}
			}
		}
		return Verdict{Rollback: later[len(later)-1:], Reason: Starved}
	case head.Executed:
		return Verdict{}
	case !o.Waits.Known:
		if o.HeadFor > o.Patience {
			return Verdict{Rollback: later, Reason: Overdue}
		}
		return Verdict{}
	}
	reach := map[uint64]bool{head.Conn: true}
	for changed := true; changed; {
		changed = false
		for _, e := range edges {
			if reach[e.from] && !reach[e.to] {
				reach[e.to], changed = true, true
			}
		}
	}
	if reach[0] {
		return Verdict{Rollback: later, Reason: LockWaitUnnamed}
	}
	var out []Seq
	for _, q := range later {
		for c, s := range laterConn {
			if s == q && reach[c] && c != head.Conn {
				out = append(out, q)
			}
		}
	}
	if len(out) == 0 {
		return Verdict{}
	}
	return Verdict{Rollback: out, Reason: LockWait}
}

// properties checks what any right rule must do with o, whatever its method.
func properties(o Observation, v Verdict) error {
	var head *Held
	for i, h := range o.Held {
		if h.Seq == o.Head {
			head = &o.Held[i]
		}
	}
	// Safety: only executed items after the head, each once.
	for i, q := range v.Rollback {
		j := slices.IndexFunc(o.Held, func(h Held) bool { return h.Seq == q })
		if j < 0 || q <= o.Head || !o.Held[j].Executed || (i > 0 && v.Rollback[i-1] >= q) {
			return fmt.Errorf("rolls back %v: only executed items after the head, in order", v.Rollback)
		}
	}
	starved := head == nil && len(o.Held) == o.Workers
	// A slow target: the server shows the head waiting for nobody, or cannot
	// tell and the head is within its patience. Nothing is rolled back.
	headWaits := o.Waits.Known && head != nil && len(validWaits(o)[head.Conn]) > 0
	if !starved && !headWaits && (o.Waits.Known || o.HeadFor <= o.Patience) && len(v.Rollback) > 0 {
		return fmt.Errorf("a slow head that waits for no lock: rolled back %v (%s)", v.Rollback, v.Reason)
	}
	// Liveness: every worker holds a later executed item while the head has
	// no worker, or the server shows the head waiting for a later executed
	// item: something must be rolled back, and it must break the wait.
	if head == nil && starved && !slices.ContainsFunc(o.Held, func(h Held) bool { return !h.Executed }) && len(v.Rollback) == 0 {
		return fmt.Errorf("the head is starved of workers and nothing is rolled back")
	}
	if head != nil && !head.Executed && o.Waits.Known {
		waits := validWaits(o)
		for _, h := range waits[head.Conn] {
			i := slices.IndexFunc(o.Held, func(x Held) bool { return x.Conn == h })
			if i >= 0 && o.Held[i].Executed && o.Held[i].Seq > o.Head && !slices.Contains(v.Rollback, o.Held[i].Seq) {
				return fmt.Errorf("the head waits for executed item %d, which is not rolled back (%v)", o.Held[i].Seq, v.Rollback)
			}
		}
	}
	return nil
}

func TestUnstickExhaustive(t *testing.T) {
	n := 0
	reasons := map[Reason]int{}
	worlds(func(o Observation) {
		n++
		got := Unstick(o)
		want := refUnstick(o)
		if !slices.Equal(got.Rollback, want.Rollback) || got.Reason != want.Reason {
			t.Fatalf("Unstick(%+v) = %+v, want %+v", o, got, want)
		}
		if err := properties(o, got); err != nil {
			t.Fatalf("Unstick(%+v): %v", o, err)
		}
		reasons[got.Reason]++
	})
	t.Logf("%d observations, verdicts by reason: %v", n, reasons)
	for r := Healthy; r <= Overdue; r++ {
		require.Positive(t, reasons[r], "no observation led to %s: the worlds miss a case", r)
	}
}

// The old rule, roll back every later executed item once the head has run
// 100 ms, is what made a slow target thrash: the properties catch it.
func TestUnstickPropertiesCatchTheFixedTimeout(t *testing.T) {
	fixed := func(o Observation) Verdict {
		if o.HeadFor <= 100*time.Millisecond {
			return Verdict{}
		}
		var later []Seq
		for _, h := range o.Held {
			if h.Seq > o.Head && h.Executed {
				later = append(later, h.Seq)
			}
		}
		slices.Sort(later)
		return Verdict{Rollback: later, Reason: Overdue}
	}
	slowTargets := 0
	worlds(func(o Observation) {
		if err := properties(o, fixed(o)); err != nil && strings.Contains(err.Error(), "a slow head that waits for no lock") {
			slowTargets++
		}
	})
	require.Positive(t, slowTargets, "the fixed timeout rolls back behind a head that waits for no lock")
}

// A stale or unrelated wait does not count: the server saw the head's
// connection wait while it ran another attempt, or wait for another client.
func TestUnstickIgnoresStaleAndForeignWaits(t *testing.T) {
	held := []Held{{Seq: 1, Attempt: 2, Conn: 10}, {Seq: 2, Attempt: 1, Conn: 11, Executed: true}, {Seq: 3, Attempt: 1, Conn: 12, Executed: true}}
	o := Observation{Workers: 3, Head: 1, Held: held, HeadFor: time.Hour, Patience: time.Millisecond,
		Waits: LockWaits{Known: true, Waits: map[uint64][]uint64{10: {11}}}}
	o.Waits.Before = []Held{{Seq: 1, Attempt: 1, Conn: 10}, held[1], held[2]}
	require.Equal(t, Verdict{}, Unstick(o), "the wait was seen during the head's previous attempt")
	o.Waits.Before = held
	require.Equal(t, Verdict{Rollback: []Seq{2}, Reason: LockWait}, Unstick(o), "only the item holding the lock")
	o.Waits.Waits = map[uint64][]uint64{10: {outsider}}
	require.Equal(t, Verdict{}, Unstick(o), "another client's lock: the server times the wait out")
	o.Waits.Waits = map[uint64][]uint64{10: {outsider}, outsider: {12}}
	require.Equal(t, Verdict{Rollback: []Seq{3}, Reason: LockWait}, Unstick(o), "through another client that waits for item 3")
}

func TestWindow(t *testing.T) {
	w := NewWindow(8)
	require.Equal(t, 8, w.Limit())
	w.RolledBack()
	require.Equal(t, 8, w.Limit(), "a first rollback may be all it takes")
	for range 3 {
		w.Committed()
	}
	w.RolledBack()
	require.Equal(t, 4, w.Limit(), "a second one before 8 commits: the first did not help")
	w.RolledBack()
	w.RolledBack()
	w.RolledBack()
	require.Equal(t, 1, w.Limit(), "a run of rollbacks ends with one item at a time")
	w.RolledBack()
	require.Equal(t, 1, w.Limit())
	// Clean commits raise it by one per limit commits: 1, then 2 after 1
	// commit, 3 after 2 more...
	commits := 0
	for w.Limit() < 8 {
		w.Committed()
		commits++
	}
	require.Equal(t, 1+2+3+4+5+6+7, commits)
	for range 100 {
		w.Committed()
	}
	require.Equal(t, 8, w.Limit(), "never above the workers")
	w.RolledBack()
	for range 8 {
		w.Committed()
	}
	w.RolledBack()
	require.Equal(t, 8, w.Limit(), "rollbacks a full window of commits apart each helped")
	require.Equal(t, 1, NewWindow(0).Limit())
}

func TestLatencyPatience(t *testing.T) {
	var l Latency
	require.Equal(t, initialPatience, l.Patience(), "no samples yet")
	for range minSamples - 1 {
		l.Observe(time.Millisecond)
	}
	require.Equal(t, initialPatience, l.Patience())
	l.Observe(time.Millisecond)
	require.Equal(t, minPatience, l.Patience(), "a fast target: the floor")
	// A target slow for every item: patience grows with it, past every item.
	for i := range latencySamples {
		l.Observe(time.Duration(50+i%100) * time.Millisecond)
	}
	require.Equal(t, 4*148*time.Millisecond, l.Patience())
	// The window forgets: a target that became fast again.
	for range latencySamples {
		l.Observe(10 * time.Millisecond)
	}
	require.Equal(t, 40*time.Millisecond, l.Patience())
}
