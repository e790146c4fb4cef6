package schedule

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// The simulation drives a Scheduler the way the applier does: items arrive in
// source order while a pool of workers takes what Next offers, executes it,
// commits it when MayCommit allows (a worker holding an executed item that may
// not commit yet is blocked), and sometimes rolls items back. Every step is
// checked against the reference model and the invariants below, and the run
// must end with every item committed: a state where nothing can progress is a
// failure. Keys come from small universes so that conflicts are frequent. No
// goroutines and no clock: a seed replays a run exactly.

// simSeeds is the number of random runs TestSimulation makes.
const simSeeds = 4000

type simItem struct {
	keys    []uint64
	barrier bool
}

// randomItems returns n items over a universe of keys: some barriers, some
// with no keys, the others with 1 to 4 keys, repeats allowed.
func randomItems(rng *rand.Rand, n, universe int) []simItem {
	items := make([]simItem, n)
	for i := range items {
		switch r := rng.IntN(20); {
		case r == 0:
			items[i].barrier = true
			if rng.IntN(2) == 0 {
				items[i].keys = []uint64{rng.Uint64N(uint64(universe))} // ignored
			}
		case r <= 2:
			if rng.IntN(2) == 0 {
				items[i].keys = []uint64{} // empty, not nil
			}
		default:
			for range 1 + rng.IntN(4) {
				// Spread the keys over the whole range, as hashes are.
				items[i].keys = append(items[i].keys, rng.Uint64N(uint64(universe))*0x9e3779b97f4a7c15)
			}
		}
	}
	return items
}

// simulate runs one random scenario; the error says what went wrong and when.
func simulate(seed uint64) (err error) {
	rng := rand.New(rand.NewPCG(seed, 0x5c4ed))
	outOfOrder := rng.IntN(2) == 0
	workers := 1 + rng.IntN(16)
	n := 1 + rng.IntN(30)
	universe := 1 + rng.IntN(8)
	items := randomItems(rng, n, universe)
	// Each run rolls back a bounded number of items, so it terminates.
	requeues := rng.IntN(n + 1)

	s, m := New(outOfOrder), &refModel{outOfOrder: outOfOrder}
	var held []Seq // the items the workers hold, running or executed
	var lastCommitted Seq
	step := 0
	defer func() {
		if err != nil {
			err = fmt.Errorf("seed %d (outOfOrder=%v workers=%d items=%d universe=%d) step %d: %w",
				seed, outOfOrder, workers, n, universe, step, err)
		}
	}()
	release := func(seq Seq) { held = slices.DeleteFunc(held, func(q Seq) bool { return q == seq }) }
	pick := func(pred func(Seq) bool) (Seq, bool) {
		var c []Seq
		for _, q := range held {
			if pred(q) {
				c = append(c, q)
			}
		}
		if len(c) == 0 {
			return 0, false
		}
		return c[rng.IntN(len(c))], true
	}
	isRunning := func(q Seq) bool { return m.item(q).running }

	const (
		actAdd = iota
		actNext
		actExecute
		actCommit
		actRequeue
		actUnstick
		numActs
	)
	for ; ; step++ {
		if step > 100_000 {
			return fmt.Errorf("no end after %d steps", step)
		}
		if len(m.items) == n && m.pending() == 0 {
			break
		}
		// Liveness: something must be able to progress.
		canStart := len(held) < workers && len(m.startable()) > 0
		_, canExecute := pick(isRunning)
		_, canCommit := pick(m.mayCommit)
		if len(m.items) == n && !canStart && !canExecute && !canCommit {
			return fmt.Errorf("stuck: workers hold %v, startable %v, low watermark %d", held, m.startable(), m.low())
		}

		switch rng.IntN(numActs) {
		case actAdd:
			if len(m.items) == n {
				continue
			}
			it := items[len(m.items)]
			got, want := s.Add(it.keys, it.barrier), m.add(it.keys, it.barrier)
			if got != want {
				return fmt.Errorf("Add = %d, want %d", got, want)
			}
		case actNext:
			if len(held) == workers {
				continue
			}
			want := m.startable()
			seq, ok := s.Next()
			if !ok {
				if len(want) > 0 {
					return fmt.Errorf("Next() = none, want %d", want[0])
				}
				continue
			}
			if len(want) == 0 || seq != want[0] {
				return fmt.Errorf("Next() = %d, want the lowest of %v", seq, want)
			}
			if q := m.blockedBy(seq); q != 0 {
				return fmt.Errorf("item %d started while conflicting item %d is not committed", seq, q)
			}
			if m.item(seq).requeued && !m.allCommittedBefore(seq) {
				return fmt.Errorf("requeued item %d restarted before every earlier item committed", seq)
			}
			m.start(seq)
			held = append(held, seq)
		case actExecute:
			seq, ok := pick(isRunning)
			if !ok {
				continue
			}
			s.Executed(seq)
			m.execute(seq)
		case actCommit:
			seq, ok := pick(func(q Seq) bool { return m.item(q).executed })
			if !ok {
				continue
			}
			may := s.MayCommit(seq)
			if may != m.mayCommit(seq) {
				return fmt.Errorf("MayCommit(%d) = %v, want %v", seq, may, !may)
			}
			if !may {
				continue
			}
			if !outOfOrder && seq != lastCommitted+1 {
				return fmt.Errorf("in-order mode committed %d after %d", seq, lastCommitted)
			}
			s.Committed(seq)
			m.commit(seq)
			release(seq)
			lastCommitted = seq
		case actRequeue:
			// A worker rolls back the item it holds (a deadlock victim, or in
			// in-order mode an executed item an earlier one is stuck behind).
			if requeues == 0 {
				continue
			}
			seq, ok := pick(func(Seq) bool { return true })
			if !ok {
				continue
			}
			requeues--
			s.Requeue(seq)
			m.requeue(seq)
			release(seq)
		case actUnstick:
			// The worker layer's response to a running item it finds stuck: roll
			// back every executed item after it.
			if requeues == 0 {
				continue
			}
			stuck, ok := pick(isRunning)
			if !ok {
				continue
			}
			requeues--
			for _, seq := range s.ExecutedAfter(stuck) {
				if !slices.Contains(held, seq) {
					return fmt.Errorf("ExecutedAfter(%d) returned %d, which no worker holds", stuck, seq)
				}
				s.Requeue(seq)
				m.requeue(seq)
				release(seq)
			}
		}
		if err := check(s, m); err != nil {
			return err
		}
	}
	if s.LowWatermark() != Seq(n) || s.Pending() != 0 || len(s.owner) != 0 || s.barrier != 0 {
		return fmt.Errorf("finished with low watermark %d, pending %d, owners %v, barrier %d",
			s.LowWatermark(), s.Pending(), s.owner, s.barrier)
	}
	return nil
}

func TestSimulation(t *testing.T) {
	for seed := range uint64(simSeeds) {
		if err := simulate(seed); err != nil {
			t.Fatal(err)
		}
	}
}

// FuzzSimulation explores seeds beyond TestSimulation's: go test -fuzz=FuzzSimulation.
func FuzzSimulation(f *testing.F) {
	f.Add(uint64(simSeeds))
	f.Fuzz(func(t *testing.T, seed uint64) {
		require.NoError(t, simulate(seed))
	})
}
