package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/state"
)

// TestCutoverSoak sends random sequences of operator commands to a move
// under writers that follow the live side through a route file, which the
// cutovers' routing hook rewrites, as an application's routing layer would:
// verify (to its end, cancelled, or left running under a cutover, which must
// cancel it), switch, reverse (with the rename or the lock freeze), switches
// forced to roll back (the applier that must apply the freeze position is
// down and --timeout is short), commands that must be refused (the wrong
// direction, a switch of a stopped workflow), and kill -9 of a random role
// (coordinator, either applier, either streamer) at a random step inside a
// cutover or between commands. After every command it checks the invariants
// of docs/design.md's "Invariants across commands"; at the end every transaction
// whose COMMIT returned is on the live side and both sides compare identical.
//
// make test runs ROWLIFT_SOAK_COMMANDS commands (default 8) per flavor;
// `make soak-cutover` runs for ROWLIFT_SOAK_MINUTES per flavor instead.
// A failing sequence replays with its seed (ROWLIFT_TEST_SEED).
func TestCutoverSoak(t *testing.T) {
	sandboxtest.EachFlavor(t, testCutoverSoak)
}

// soakSteps are the journal steps a kill lands in: each is held for the
// coordinator's cutover_step hook delay.
var soakSteps = []string{"freezing", "frozen", "applied", "writable", "started"}

// soak is the state of one soak run, as the test believes it must be.
type soak struct {
	*pairEnv
	rng  *rand.Rand
	seed uint64
	// dir holds the route file and the two files the hook copies over it.
	dir string
	// onTarget: the target side takes the writes (after a switch).
	onTarget bool
	// switched: some switch finished, so the side that does not take the
	// writes holds its tables under their frozen names (before it, the
	// target's tables are the copy's, under their own names).
	switched bool
	ledger   *txLedger
	counts   map[string]int
	pauses   []int
}

func testCutoverSoak(t *testing.T, flavor sandbox.Flavor) {
	const keys = 900
	p := newPairEnv(t, flavor, keys, []string{"ROWLIFT_TEST_HOOKS=cutover_step=150-400ms"}, withTable("txlog", txlogTable),
		// race.txlog grows by every transaction, hundreds of thousands of rows
		// in a long soak: verify chunks of 500 rows fell behind its writers,
		// chunks sized by their bytes keep up.
		withDefaultChunks())
	seed := testSeed(t)
	s := &soak{pairEnv: p, rng: rand.New(rand.NewPCG(seed, 23)), seed: seed, dir: t.TempDir(), ledger: &txLedger{}, counts: map[string]int{}}
	for file, side := range map[string]string{"switch": "target", "reverse": "source", "route": "source"} {
		require.NoError(t, os.WriteFile(filepath.Join(s.dir, file), []byte(side), 0o644))
	}
	stop := s.writers(keys)

	minutes := envInt("ROWLIFT_SOAK_MINUTES", 0)
	budget := envInt("ROWLIFT_SOAK_COMMANDS", 8)
	end := time.Now().Add(time.Duration(minutes) * time.Minute)
	for i := 0; (minutes > 0 && time.Now().Before(end)) || (minutes == 0 && i < budget); i++ {
		s.step()
	}
	writes := stop()
	s.converged()
	slices.Sort(s.pauses)
	pause := "none"
	if len(s.pauses) > 0 {
		pause = fmt.Sprintf("p50 %d ms, max %d ms", s.pauses[len(s.pauses)/2], s.pauses[len(s.pauses)-1])
	}
	t.Logf("soak: %d commands (%d cutovers, %d rolled back, %d refused, %d verifies, %d verifies cancelled, %d cancelled by a cutover, "+
		"%d kills inside a cutover step, %d kills between commands), %d invariant checks, %d transactions committed (%d logged), write pause %s",
		s.counts["command"], s.counts["cutover"], s.counts["rolled back"], s.counts["refused"], s.counts["verify"], s.counts["verify cancelled"],
		s.counts["verify cancelled by a cutover"], s.counts["kill in step"], s.counts["kill between"], s.counts["check"], writes,
		len(s.ledger.committed), pause)
}

// writers starts race writers that send each transaction where the route
// file says, logging it in the ledger.
func (s *soak) writers(keys int) (stop func() int) {
	ctx, cancel := context.WithCancel(context.Background())
	route := filepath.Join(s.dir, "route")
	wait := startRoutedWriters(ctx, func() *sql.DB {
		b, _ := os.ReadFile(route)
		if strings.TrimSpace(string(b)) == "target" {
			return s.appDst
		}
		return s.appSrc
	}, s.seed, 1, keys, &s.committed, s.ledger)
	s.writing = raceWriters
	return func() int {
		cancel()
		s.writing = 0
		return wait()
	}
}

// direction is the cutover that moves the writes to the other side.
func (s *soak) direction() string {
	if s.onTarget {
		return "reverse"
	}
	return "switch"
}

// follower is the workflow that streams the live side's writes to the other.
func (s *soak) follower() (name string, store *state.Store) {
	if s.onTarget {
		return "race_reverse", s.srcStore
	}
	return "race", s.store
}

// hook is the routing hook: it points the route file at the side a finished
// cutover gave the writes to.
func (s *soak) hook() string {
	return fmt.Sprintf(`cp "%[1]s/$ROWLIFT_DIRECTION" "%[1]s/route.new" && mv "%[1]s/route.new" "%[1]s/route"`, s.dir)
}

// cutoverArgs is the command line of a cutover in direction dir.
func (s *soak) cutoverArgs(dir, timeout, freeze string) []string {
	return []string{"workflow", dir, "race", "--timeout", timeout, "--freeze", freeze, "--hook-cmd", s.hook()}
}

// step runs one random command and checks the invariants after it.
func (s *soak) step() {
	s.t.Helper()
	s.counts["command"]++
	switch n := s.rng.IntN(100); {
	case n < 30:
		s.cutover()
	case n < 50:
		s.killInStep()
	case n < 65:
		s.rollBack()
	case n < 70:
		s.verify()
	case n < 75:
		s.verifyCancelled()
	case n < 80:
		s.verifyUnderCutover()
	case n < 83:
		s.refused()
	case n < 90:
		s.stoppedRefuses()
	default:
		s.killBetween()
	}
	s.check()
}

// cutover moves the writes to the other side with a random freeze mode.
func (s *soak) cutover() {
	dir := s.direction()
	freeze := []string{"rename", "lock"}[s.rng.IntN(2)]
	r := s.cli.run(s.cutoverArgs(dir, "60s", freeze)...)
	require.Zero(s.t, r.code, "%s --freeze %s failed: %s", dir, freeze, r.stderr)
	if m := writePause.FindStringSubmatch(r.stdout); m != nil {
		ms, err := strconv.Atoi(m[1])
		require.NoError(s.t, err)
		s.pauses = append(s.pauses, ms)
	}
	s.moved(dir)
}

// moved records that a cutover in direction dir finished.
func (s *soak) moved(dir string) {
	s.counts["cutover"]++
	s.onTarget = dir == "switch"
	s.switched = s.switched || s.onTarget
}

// killInStep starts a cutover, kills a random role once the journal reaches a
// random step, restarts it, and waits until the cutover ends, by the running
// command, by the same command run again, or by the restarted coordinator's
// resume loop. The rename freeze only: a lock freeze lost with its streamer
// after the park lets writes escape by design (README: "those writes are not
// moved").
func (s *soak) killInStep() {
	s.t.Helper()
	dir := s.direction()
	step := soakSteps[s.rng.IntN(len(soakSteps))]
	victims := map[string]*proc{"coordinator": s.coord, "applier": s.applier, "reverse applier": s.revApplier,
		"streamer": s.streamer, "reverse streamer": s.revStreamer}
	names := slices.Sorted(maps.Keys(victims))
	victim := names[s.rng.IntN(len(names))]
	before := s.journal()
	done := make(chan result, 1)
	go func() { done <- s.cli.run(s.cutoverArgs(dir, "60s", "rename")...) }()
	var r *result
	s.waitFor(fmt.Sprintf("the %s to reach step %s", dir, step), 2*time.Minute, func() (bool, string) {
		select {
		case got := <-done:
			r = &got
			return true, ""
		default:
		}
		j := s.journal()
		return j != nil && j.StartedAtUS != startedAt(before) && j.Direction == dir && j.Step == step, fmt.Sprint(j)
	})
	if r == nil {
		victims[victim].kill()
		victims[victim].restart()
		s.counts["kill in step"]++
		s.t.Logf("killed the %s at %s/%s", victim, dir, step)
		got := <-done
		r = &got
	}
	j := s.finished()
	if r.code != 0 && j.Step == "done" {
		// The command died with the coordinator: run again, it must not
		// freeze again on top of the finished cutover.
		again := s.cli.run(s.cutoverArgs(dir, "60s", "rename")...)
		require.NotZero(s.t, again.code, "a %s that finished must not run again: %s", dir, again.stdout)
		require.Equal(s.t, j.StartedAtUS, s.journal().StartedAtUS, "the re-run %s started a second cutover", dir)
	}
	switch j.Step {
	case "done":
		s.moved(dir)
	case "rolled_back":
		s.counts["rolled back"]++
	}
}

// rollBack forces a rollback: the applier that must apply the freeze
// position is down, and --timeout is short.
func (s *soak) rollBack() {
	s.t.Helper()
	dir := s.direction()
	applier := map[string]*proc{"switch": s.applier, "reverse": s.revApplier}[dir]
	applier.kill()
	r := s.cli.run(s.cutoverArgs(dir, "2s", []string{"rename", "lock"}[s.rng.IntN(2)])...)
	applier.restart()
	require.Equal(s.t, 1, r.code, "a %s whose applier is down must roll back: %s %s", dir, r.stdout, r.stderr)
	require.Contains(s.t, r.stderr, "rolled back")
	s.counts["rolled back"]++
}

// verify verifies the workflow that follows the writes: under live writes,
// it must find no difference. race.txlog grows by every transaction, so a
// long soak's verify reads hundreds of thousands of rows.
func (s *soak) verify() {
	s.t.Helper()
	name, _ := s.follower()
	r := s.cli.runWithin(15*time.Minute, "workflow", "verify", name, "--wait", "--interval", "1s")
	require.Zero(s.t, r.code, "verify %s: %s %s", name, r.stdout, r.stderr)
	require.Contains(s.t, r.stdout, "no difference")
	s.counts["verify"]++
}

// verifyCancelled starts a verify of the workflow that follows the writes
// and cancels it: it must end, cancelled or (if it was quicker) done.
func (s *soak) verifyCancelled() {
	s.t.Helper()
	name, _ := s.follower()
	s.cli.ok("workflow", "verify", name)
	out := s.cli.ok("workflow", "verify", name, "--cancel")
	require.Regexp(s.t, "cancelled|nothing to cancel", out)
	s.counts["verify cancelled"]++
}

// verifyUnderCutover starts a verify of the workflow that follows the writes
// and, without waiting for it, moves the writes: the cutover must cancel the
// verify (if it still runs) and say so, and succeed.
func (s *soak) verifyUnderCutover() {
	s.t.Helper()
	name, _ := s.follower()
	s.cli.ok("workflow", "verify", name)
	dir := s.direction()
	r := s.cli.run(s.cutoverArgs(dir, "60s", "rename")...)
	require.Zero(s.t, r.code, "%s with a verify of %s running: %s", dir, name, r.stderr)
	if strings.Contains(r.stdout, "cancelled the running verify of "+name) {
		s.counts["verify cancelled by a cutover"]++
	}
	s.moved(dir)
}

// refused runs the cutover that goes the wrong way: it must refuse, say what
// to run, and change nothing.
func (s *soak) refused() {
	s.t.Helper()
	wrong := map[string]string{"switch": "reverse", "reverse": "switch"}[s.direction()]
	s.unchangedBy(func() {
		r := s.cli.run(s.cutoverArgs(wrong, "60s", "rename")...)
		require.Equal(s.t, 1, r.code, "%s must be refused: %s", wrong, r.stdout)
		require.Regexp(s.t, "reverse it|was not switched|nothing to reverse|switch it", r.stderr)
	})
}

// stoppedRefuses stops the workflow that would stop taking the stream: the
// cutover must refuse while it is stopped, naming its state, and change
// nothing; then it resumes.
func (s *soak) stoppedRefuses() {
	s.t.Helper()
	name, _ := s.follower()
	s.cli.ok("workflow", "stop", name)
	s.unchangedBy(func() {
		r := s.cli.run(s.cutoverArgs(s.direction(), "60s", "rename")...)
		require.Equal(s.t, 1, r.code, "a cutover of a stopped workflow must be refused: %s", r.stdout)
		require.Contains(s.t, r.stderr, "is in state stopped")
	})
	s.cli.ok("workflow", "resume", name)
}

// killBetween kills a random role while no cutover runs.
func (s *soak) killBetween() {
	victims := []*proc{s.coord, s.applier, s.revApplier, s.streamer, s.revStreamer}
	v := victims[s.rng.IntN(len(victims))]
	v.kill()
	v.restart()
	s.counts["kill between"]++
}

// unchangedBy runs a command that must change nothing: the journal, both
// workflows' states and both sides' tables are the same after it.
func (s *soak) unchangedBy(command func()) {
	s.t.Helper()
	before := s.snapshot()
	command()
	require.Equal(s.t, before, s.snapshot(), "a refused command changed something")
	s.counts["refused"]++
}

// snapshot is what a refused command must not change.
func (s *soak) snapshot() string {
	s.t.Helper()
	out := fmt.Sprint(s.journal())
	for _, w := range []struct {
		store *state.Store
		name  string
	}{{s.store, "race"}, {s.srcStore, "race_reverse"}} {
		if wf, err := w.store.Workflow(context.Background(), w.name); err == nil {
			out += fmt.Sprintf(" %s:%s", w.name, wf.State)
		}
	}
	return out + " " + strings.Join(tableNames(s.t, s.srcDB, "race"), ",") + " " + strings.Join(tableNames(s.t, s.dstDB, "race"), ",")
}

// journal is the pair's last cutover journal (nil: none yet).
func (s *soak) journal() *state.Journal {
	j, err := s.store.Journal(context.Background(), "race")
	if err != nil {
		return nil
	}
	return j
}

func startedAt(j *state.Journal) int64 {
	if j == nil {
		return 0
	}
	return j.StartedAtUS
}

// finished waits until the pair's last cutover has ended and returns it.
func (s *soak) finished() *state.Journal {
	s.t.Helper()
	var j *state.Journal
	s.waitFor("the cutover to end", 3*time.Minute, func() (bool, string) {
		j = s.journal()
		return j == nil || j.Step == "done" || j.Step == "rolled_back", fmt.Sprint(j)
	})
	return j
}

// check asserts the invariants once no cutover is in flight: the live side's
// tables are under their own names, the other side's under their frozen names
// (once a switch happened), the route file points at the live side, the
// workflow that follows the live side runs, and the writers (while they run)
// commit there.
func (s *soak) check() {
	s.t.Helper()
	s.finished()
	live, other := s.srcDB, s.dstDB
	if s.onTarget {
		live, other = s.dstDB, s.srcDB
	}
	s.liveSide(live)
	if s.switched {
		s.tablesAre(other, false, "frozen on the side that does not take the writes")
	} else {
		s.tablesAre(other, true, "the copy's tables before any switch")
	}
	b, err := os.ReadFile(filepath.Join(s.dir, "route"))
	require.NoError(s.t, err)
	require.Equal(s.t, map[bool]string{true: "target", false: "source"}[s.onTarget], strings.TrimSpace(string(b)),
		"the routing hook points the writers at the live side")
	name, store := s.follower()
	// A verify never outlives the stream it runs on: the parked workflow
	// (if it exists) has none running.
	parked, parkedStore := "race", s.store
	if name == parked {
		parked, parkedStore = "race_reverse", s.srcStore
	}
	tvs, err := parkedStore.Verify(context.Background(), parked, "")
	require.NoError(s.t, err)
	for _, tv := range tvs {
		require.True(s.t, tv.Done, "a verify of the parked workflow %s still runs on table %s", parked, tv.Table)
	}
	s.waitFor(name+" to run", time.Minute, func() (bool, string) {
		w, err := store.Workflow(context.Background(), name)
		if err != nil {
			return false, err.Error()
		}
		return w.State == state.Running, fmt.Sprintf("%s: %s", w.State, w.Message)
	})
	if s.writing > 0 {
		s.waitWrites("the writers to commit on the live side")
	}
	s.caughtUp()
	s.counts["check"]++
}

// caughtUp waits until the workflow that follows the live side has applied
// the live side's position of now, so that the next cutover is not refused
// for lag.
func (s *soak) caughtUp() {
	s.t.Helper()
	name, store := s.follower()
	if s.onTarget {
		s.followed(s.dstDB, store, name)
		return
	}
	s.followed(s.srcDB, store, name)
}

// converged checks the end: the follower applied everything of the live
// side, every committed transaction is there, and both sides are identical.
func (s *soak) converged() {
	s.t.Helper()
	s.check() // the writers stopped: it ends caught up with all they wrote
	live, other := s.srcDB, s.dstDB
	if s.onTarget {
		live, other = s.dstDB, s.srcDB
	}
	logged := map[int64]bool{}
	rows, err := live.Query("SELECT id FROM race.txlog")
	require.NoError(s.t, err)
	for rows.Next() {
		var id int64
		require.NoError(s.t, rows.Scan(&id))
		logged[id] = true
	}
	require.NoError(s.t, rows.Err())
	rows.Close()
	var lost []int64
	for _, id := range s.ledger.committed {
		if !logged[id] {
			lost = append(lost, id)
		}
	}
	require.Empty(s.t, lost, "transactions whose COMMIT returned are missing on the live side")
	if s.switched {
		s.sameRows(live, other, s.twin)
		return
	}
	s.sameRows(live, other, nil)
}
