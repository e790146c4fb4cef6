package cutover

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// world is what a cutover's actions change: the two sides and the workflows.
type world struct {
	frozen, gainingWritable, parked, lockHeld bool
	// renamed: the lock freeze was turned into a rename (its tables renamed
	// while the lock held, then unlocked); released: the lock was released
	// without renaming the tables, leaving them writable (a rollback).
	renamed, released bool
	// hookedLocked: the routing hook ran while the lock held (a lock freeze's
	// runs in Follow, before the rename).
	hookedLocked bool
	// early: parked or followed before the freeze position was applied.
	early                              bool
	follows, hooks, rollbacks, freezes int
	// appliedAt is when the stopping workflow has applied the freeze position
	// (-1: never); stuckAt when it fails (-1: never).
	appliedAt, stuckAt int64
	// frozenAt is when the freeze happened: the stopping workflow can only have
	// applied a position that exists.
	frozenAt int64
}

// run drives a cutover the way the coordinator does, dying at the crash
// points listed (a counter of driver operations: performing an action and
// recording a step each count as one), and resuming from the journal after
// each death. It returns the final world and step.
func run(t *testing.T, next func(Step, Facts) (Action, Step, string), w *world, deadline int64, crashes map[int]bool) (*world, Step) {
	t.Helper()
	journal := Freezing
	now, op := int64(0), 0
	for iter := 0; iter < 1000; iter++ {
		now++
		applied := w.appliedAt >= 0 && w.frozenAt > 0 && now >= max(w.appliedAt, w.frozenAt+1)
		stuck := ""
		if w.stuckAt >= 0 && now >= w.stuckAt && !applied {
			stuck = "stopping workflow failed"
		}
		a, step, _ := next(journal, Facts{NowUS: now, DeadlineUS: deadline, Applied: applied, Stuck: stuck})
		if a == None {
			return w, journal
		}
		op++
		if crashes[op] { // died before the action
			continue
		}
		switch a {
		case Freeze:
			if !w.frozen {
				w.frozen, w.frozenAt = true, now
			}
			w.lockHeld = true
			w.freezes++
		case Wait:
		case Park:
			w.parked = true
			w.early = w.early || !applied
		case UnfreezeGaining:
			w.gainingWritable = true
		case Follow:
			w.early = w.early || !applied
			w.hookedLocked = w.hookedLocked || w.lockHeld
			w.hooks++
			w.renamed = true // idempotent: renamed tables stay renamed
			w.lockHeld = false
			if w.follows == 0 {
				w.follows = 1 // Follow is idempotent: a started workflow is left alone
			}
		case Finish:
			w.hooks++
		case Rollback:
			w.frozen, w.lockHeld = false, false
			w.released = true
			w.rollbacks++
		}
		op++
		if crashes[op] { // died after the action, before recording it
			continue
		}
		journal = step
	}
	t.Fatalf("cutover did not end: step %s", journal)
	return nil, ""
}

// check asserts the invariants of the package comment on an ended cutover.
func check(w *world, end Step, deadline int64) error {
	switch end {
	case Done:
		if !w.frozen || !w.parked || !w.gainingWritable || w.follows != 1 || w.hooks == 0 || w.lockHeld || !w.renamed || !w.hookedLocked || w.released ||
			w.rollbacks > 0 || w.early {
			return fmt.Errorf("done in a partial state: %+v", *w)
		}
	case RolledBack:
		if w.frozen || w.lockHeld || w.renamed || w.parked || w.gainingWritable || w.follows > 0 {
			return fmt.Errorf("rolled back in a partial state: %+v", *w)
		}
		if w.appliedAt >= 0 && w.appliedAt <= deadline/2 && w.stuckAt < 0 {
			return fmt.Errorf("rolled back though the streams applied well before the deadline: %+v", *w)
		}
	default:
		return fmt.Errorf("ended at step %s", end)
	}
	return nil
}

// TestEveryCrashPointEndsConsistent runs every combination of up to two
// crashes at every driver operation, for streams that apply early, late,
// never, or fail, and checks the invariants.
func TestEveryCrashPointEndsConsistent(t *testing.T) {
	const deadline = 40
	scenarios := []struct {
		name               string
		appliedAt, stuckAt int64
	}{
		{"applies at once", 0, -1},
		{"applies after a while", 12, -1},
		{"applies after the deadline", 60, -1},
		{"never applies", -1, -1},
		{"stopping workflow fails", -1, 8},
	}
	runs := 0
	for _, sc := range scenarios {
		for a := 0; a <= 24; a++ {
			for b := a; b <= 24; b++ {
				crashes := map[int]bool{a: a > 0, b: b > 0}
				w, end := run(t, Next, &world{appliedAt: sc.appliedAt, stuckAt: sc.stuckAt}, deadline, crashes)
				require.NoError(t, check(w, end, deadline), "%s, crashes at %d and %d", sc.name, a, b)
				if sc.appliedAt == 0 && a == 0 {
					require.Equal(t, Done, end, sc.name)
				}
				if sc.appliedAt < 0 {
					require.Equal(t, RolledBack, end, sc.name)
				}
				runs++
			}
		}
	}
	t.Logf("%d crash schedules", runs)
}

// TestBrokenVariantsAreCaught: the checks above notice a step function that
// waits past the deadline, rolls back after parking, or starts the following
// workflow before the stopping one applied.
func TestBrokenVariantsAreCaught(t *testing.T) {
	variants := map[string]func(Step, Facts) (Action, Step, string){
		"waits forever": func(s Step, f Facts) (Action, Step, string) {
			f.DeadlineUS = 1 << 60
			return Next(s, f)
		},
		"rolls back after parking": func(s Step, f Facts) (Action, Step, string) {
			if s == Applied || s == Writable {
				return Rollback, RolledBack, "late"
			}
			return Next(s, f)
		},
		"skips following (and the lock's rename)": func(s Step, f Facts) (Action, Step, string) {
			if s == Writable {
				return Finish, Done, ""
			}
			return Next(s, f)
		},
		"follows before applied": func(s Step, f Facts) (Action, Step, string) {
			if s == Frozen {
				return Park, Applied, ""
			}
			return Next(s, f)
		},
	}
	for name, next := range variants {
		caught := false
		for _, sc := range []struct{ appliedAt, stuckAt int64 }{{-1, -1}, {3, -1}, {-1, 2}} {
			w, end := runQuiet(next, &world{appliedAt: sc.appliedAt, stuckAt: sc.stuckAt}, 20)
			if end == "" || check(w, end, 20) != nil {
				caught = true
			}
		}
		require.True(t, caught, "broken variant %q passed the checks", name)
	}
}

// runQuiet is run without crashes, reporting a cutover that never ends as an
// empty step instead of failing the test.
func runQuiet(next func(Step, Facts) (Action, Step, string), w *world, deadline int64) (*world, Step) {
	journal := Freezing
	for now := int64(1); now < 1000; now++ {
		applied := w.appliedAt >= 0 && w.frozenAt > 0 && now >= max(w.appliedAt, w.frozenAt+1)
		stuck := ""
		if w.stuckAt >= 0 && now >= w.stuckAt && !applied {
			stuck = "failed"
		}
		a, step, _ := next(journal, Facts{NowUS: now, DeadlineUS: deadline, Applied: applied, Stuck: stuck})
		switch a {
		case None:
			return w, journal
		case Freeze:
			w.frozen, w.frozenAt, w.lockHeld = true, now, true
		case Park:
			w.parked = true
			w.early = w.early || !applied
		case UnfreezeGaining:
			w.gainingWritable = true
		case Follow:
			w.early = w.early || !applied
			w.hookedLocked = w.hookedLocked || w.lockHeld
			w.hooks++
			w.renamed, w.lockHeld = true, false
			w.follows++
		case Finish:
			w.hooks++
		case Rollback:
			w.frozen, w.lockHeld = false, false
			w.released = true
			w.rollbacks++
		}
		journal = step
	}
	return w, ""
}

func TestNextTable(t *testing.T) {
	for _, tc := range []struct {
		step Step
		f    Facts
		a    Action
		next Step
	}{
		{Freezing, Facts{NowUS: 1, DeadlineUS: 2}, Freeze, Frozen},
		{Freezing, Facts{NowUS: 3, DeadlineUS: 2}, Rollback, RolledBack},
		{Frozen, Facts{NowUS: 1, DeadlineUS: 2}, Wait, Frozen},
		{Frozen, Facts{NowUS: 3, DeadlineUS: 2, Applied: true}, Park, Applied},
		{Frozen, Facts{NowUS: 3, DeadlineUS: 2}, Abandon, RollingBack},
		{Frozen, Facts{NowUS: 1, DeadlineUS: 2, Stuck: "error"}, Abandon, RollingBack},
		{RollingBack, Facts{NowUS: 1, DeadlineUS: 2, Applied: true}, Rollback, RolledBack},
		{Applied, Facts{NowUS: 9, DeadlineUS: 2}, UnfreezeGaining, Writable},
		{Writable, Facts{}, Follow, Started},
		{Started, Facts{}, Finish, Done},
		{Done, Facts{}, None, Done},
		{RolledBack, Facts{}, None, RolledBack},
	} {
		a, next, _ := Next(tc.step, tc.f)
		require.Equal(t, tc.a, a, "%s %+v", tc.step, tc.f)
		require.Equal(t, tc.next, next, "%s %+v", tc.step, tc.f)
	}
	require.True(t, Finished(Done) && Finished(RolledBack) && !Finished(Frozen))
}
