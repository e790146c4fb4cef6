package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/rowlift/rowlift/internal/frozen"
	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/verify"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// pairEnv is a move set up to switch: besides the env's source, target,
// streamer (next to the source) and applier (next to the target), a streamer
// next to the target and an applier next to the source for the reverse
// workflow, and a coordinator that knows both servers: "main" is the target,
// "origin" the source. Writers write wherever route points, as an application
// that is re-routed after each switch.
type pairEnv struct {
	*env
	revStreamer, revApplier, coord *proc
	revAddr                        string
	cli                            *cli
	srcStore                       *state.Store
	// appSrc and appDst are the application's pools on the source and the
	// target: the writers connect as a user of their own, which a routing hook
	// can shut out of a side.
	appSrc, appDst *sql.DB
	route          atomic.Pointer[sql.DB]
	names          []string
	keys           int
	// freeze is the --freeze of every cutover ("": the default, rename).
	freeze string
	// committed counts the writers' commits as they happen; writing is how
	// many writers run now, runs how many times writers were started.
	committed atomic.Int64
	writing   int
	runs      uint64
	// hookDir holds the files by which a lock cutover's routing hook and the
	// test hand the writers over.
	hookDir string
	// strays counts stray writes: each takes a key of its own, since the
	// workflow that resumes after the next cutover replays the earlier ones.
	strays int
}

// pairSetup is what newPairEnv sets up beyond the race tables.
type pairSetup struct {
	// tables are empty tables to move too: name and CREATE TABLE.
	tables [][2]string
	// chunkRows is the workflow's --chunk-rows (0: rowlift's default chunks,
	// sized by their bytes).
	chunkRows int
	// chunkBytes is the workflow's --chunk-bytes (0: the default).
	chunkBytes int
}

// pairOption changes newPairEnv's setup.
type pairOption func(*pairSetup)

// withTable moves an empty table too.
func withTable(name, ddl string) pairOption {
	return func(s *pairSetup) { s.tables = append(s.tables, [2]string{name, ddl}) }
}

// withDefaultChunks gives the workflow rowlift's default chunks instead of
// newPairEnv's 500-row ones, which make many chunks to widen the race
// windows of the copy.
func withDefaultChunks() pairOption { return func(s *pairSetup) { s.chunkRows = 0 } }

// withChunkBytes sets the workflow's --chunk-bytes: a small budget makes
// chunks of few rows, the first of each table ending by its bytes.
func withChunkBytes(n int) pairOption { return func(s *pairSetup) { s.chunkBytes = n } }

// newPairEnv starts everything and a workflow "race" over the race tables
// (keys keys) and what opts add, and waits until it runs. coordHooks are test
// hooks for the coordinator.
func newPairEnv(t *testing.T, flavor sandbox.Flavor, keys int, coordHooks []string, opts ...pairOption) *pairEnv {
	t.Helper()
	setup := pairSetup{chunkRows: 500}
	for _, o := range opts {
		o(&setup)
	}
	p := &pairEnv{env: newEnvWith(t, sandbox.Options{Flavor: flavor}), keys: keys}
	p.names = createRaceTables(p.env, keys)
	for _, x := range setup.tables {
		p.sourceExec(x[1])
		p.names = append(p.names, x[0])
	}
	p.appSrc, p.appDst = p.appPool(p.src, p.srcDB), p.appPool(p.dst, p.dstDB)
	p.revAddr = freeAddr(t)
	p.startStreamer()
	p.startApplier()
	p.revStreamer = startProc(t, "reverse-streamer", nil, "streamer", "--listen", p.revAddr, "--source-dsn", p.dst.DSN(""))
	p.revApplier = startProc(t, "reverse-applier", nil, "applier", "--target-dsn", p.src.DSN(""), "--poll-interval", "50ms")
	p.coord, p.cli, _ = p.startCoordinatorCLI(coordHooks, "--target", "main="+p.dst.DSN(""), "--target", "origin="+p.src.DSN(""))
	var err error
	p.srcStore, err = state.Open(context.Background(), p.srcDB)
	require.NoError(t, err)
	p.route.Store(p.appSrc)
	create := []string{"workflow", "create", "--name", "race", "--source", "main=" + p.streamerAddr, "--target", "main", "--source-database", "race",
		"--tables", strings.Join(p.names, ","), "--reverse-target", "main=origin", "--reverse-streamer", "main=" + p.revAddr, "--start"}
	if setup.chunkRows > 0 {
		create = append(create, "--chunk-rows", strconv.Itoa(setup.chunkRows))
	}
	if setup.chunkBytes > 0 {
		create = append(create, "--chunk-bytes", strconv.Itoa(setup.chunkBytes))
	}
	p.cli.ok(create...)
	p.cli.ok("workflow", "watch", "race", "--until", "running", "--interval", "200ms", "--timeout", "2m")
	return p
}

// appPool creates the application's user on a server (admin is a root pool
// to it) and returns a pool of the application's sessions there.
func (p *pairEnv) appPool(server *sandbox.Server, admin *sql.DB) *sql.DB {
	p.t.Helper()
	sandboxtest.Exec(p.t, admin, "CREATE USER app@'%'", "GRANT ALL ON race.* TO app@'%'")
	db, err := sql.Open("mysql", "app@tcp("+server.Addr()+")/")
	require.NoError(p.t, err)
	p.t.Cleanup(func() { db.Close() })
	return db
}

// writers starts routed race writers; stop ends them and returns how many
// transactions they committed.
func (p *pairEnv) writers(keys int) (stop func() int) {
	ctx, cancel := context.WithCancel(context.Background())
	wait := startRoutedWriters(ctx, func() *sql.DB { return p.route.Load() }, testSeed(p.t), 1+p.runs*raceWriters, keys, &p.committed, nil)
	p.runs++
	p.writing = raceWriters
	return func() int {
		cancel()
		p.writing = 0
		return wait()
	}
}

// waitWrites waits until the writers commit again: after a cutover, where
// they were routed to. A writer may count a commit it made before the wait
// started (just before a cutover, on the other side) after it, so each must
// have committed one more.
func (p *pairEnv) waitWrites(what string) {
	p.t.Helper()
	from := p.committed.Load()
	p.waitFor(what, time.Minute, func() (bool, string) {
		n := p.committed.Load()
		return n > from+int64(p.writing), fmt.Sprintf("%d commits since", n-from)
	})
}

var (
	writePause     = regexp.MustCompile(`(?m)^write pause: (\d+) ms$`)
	freezePosition = regexp.MustCompile(`(?m)^freeze position: main: (\S+)$`)
)

// switched is what a cutover printed.
type switched struct {
	pause int
	// freezePos is the position of the side that lost the writes at the freeze.
	freezePos string
}

// cutover runs `rowlift workflow switch|reverse race` with p.freeze, hands
// the writers over to the side that now takes writes, and returns what it
// printed.
func (p *pairEnv) cutover(direction string, args ...string) switched {
	p.t.Helper()
	r := p.startCutover(direction, args...)()
	require.Zero(p.t, r.code, "rowlift workflow %s failed: %s", direction, r.stderr)
	require.Empty(p.t, r.stderr)
	m := writePause.FindStringSubmatch(r.stdout)
	require.NotNil(p.t, m, "no write pause in %q", r.stdout)
	f := freezePosition.FindStringSubmatch(r.stdout)
	require.NotNil(p.t, f, "no freeze position in %q", r.stdout)
	if p.freeze == "lock" {
		require.Contains(p.t, r.stdout, "hook: routed "+direction+" after a write pause of ")
	}
	ms, _ := strconv.Atoi(m[1])
	return switched{pause: ms, freezePos: f[1]}
}

// startCutover starts `rowlift workflow switch|reverse race` with p.freeze.
// finish, on the test's goroutine, waits for it and hands the writers over to
// the side that takes the writes once it succeeded, or, under a lock freeze,
// while its routing hook runs (see handOver).
func (p *pairEnv) startCutover(direction string, args ...string) (finish func() result) {
	p.t.Helper()
	args = append([]string{"workflow", direction, "race", "--timeout", "60s"}, args...)
	if p.freeze != "" {
		args = append(args, "--freeze", p.freeze)
	}
	lock := p.freeze == "lock"
	if lock {
		if p.hookDir == "" {
			p.hookDir = p.t.TempDir()
		}
		// The hook waits until the test has handed the writers over.
		args = append(args, "--hook-cmd", fmt.Sprintf(`touch '%[1]s/hooked'; while [ ! -e '%[1]s/routed' ]; do sleep 0.05; done; `+
			`rm '%[1]s/hooked' '%[1]s/routed'; echo "routed $ROWLIFT_DIRECTION after a write pause of $ROWLIFT_WRITE_PAUSE_MS ms"`, p.hookDir))
	}
	done := make(chan result, 1)
	go func() { done <- p.cli.run(args...) }()
	return func() result {
		p.t.Helper()
		if !lock {
			r := <-done
			if r.code == 0 {
				p.reroute(direction)
			}
			return r
		}
		var ended *result
		p.waitFor("the routing hook of the "+direction, 2*time.Minute, func() (bool, string) {
			select {
			case r := <-done:
				ended = &r
				return true, ""
			default:
			}
			_, err := os.Stat(filepath.Join(p.hookDir, "hooked"))
			return err == nil, fmt.Sprint(err)
		})
		if ended != nil {
			return *ended // failed or rolled back: no hook, nothing to hand over
		}
		checkQueued := p.handOver(direction)
		require.NoError(p.t, os.WriteFile(filepath.Join(p.hookDir, "routed"), nil, 0o644))
		r := <-done
		if r.code == 0 {
			checkQueued()
		}
		return r
	}
}

func (p *pairEnv) reroute(direction string) {
	if direction == "switch" {
		p.route.Store(p.appDst)
	} else {
		p.route.Store(p.appSrc)
	}
}

// frozenSide checks the race tables on db, the side that lost the writes: only
// under their frozen names after a rename or lock freeze (a lock freeze ends
// with the rename); only under their own names after a none freeze, which
// renames nothing.
func (p *pairEnv) frozenSide(db *sql.DB) {
	p.t.Helper()
	if p.freeze == "none" {
		p.tablesAre(db, true, "left in place")
		return
	}
	p.tablesAre(db, false, "renamed to its frozen twin")
}

// liveSide checks the race tables on db, the side that takes the writes: only
// under their own names.
func (p *pairEnv) liveSide(db *sql.DB) {
	p.t.Helper()
	p.tablesAre(db, true, "live on the side that takes the writes")
}

// tablesAre checks that each race table on db exists under its own name and
// not its frozen twin's (live), or the other way round.
func (p *pairEnv) tablesAre(db *sql.DB, live bool, what string) {
	p.t.Helper()
	want := [2]int{0, 1}
	if live {
		want = [2]int{1, 0}
	}
	for _, n := range p.names {
		fz, err := frozen.Name(n)
		require.NoError(p.t, err)
		var own, twin int
		require.NoError(p.t, db.QueryRow("SELECT SUM(TABLE_NAME = ?), SUM(TABLE_NAME = ?) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'race'",
			n, fz).Scan(&own, &twin))
		require.Equal(p.t, want, [2]int{own, twin}, "race.%s: own name and frozen twin (%s)", n, what)
	}
}

// twin is table n's name on the side that lost the writes.
func (p *pairEnv) twin(n string) string {
	if p.freeze == "none" {
		return n
	}
	fz, _ := frozen.Name(n)
	return fz
}

// identical waits until the workflow that follows the writes has applied
// everything of the side that takes them, then compares every live table there
// with its twin on the other side (see twin).
func (p *pairEnv) identical(active *sql.DB, follower *state.Store, workflow string, other *sql.DB) {
	p.t.Helper()
	p.followed(active, follower, workflow)
	p.sameRows(active, other, p.twin)
}

// sameRows compares every race table on from with its copy on to, named by
// twin (nil: under its own name).
func (p *pairEnv) sameRows(from, to *sql.DB, twin func(string) string) {
	p.t.Helper()
	for _, n := range p.names {
		opts := verify.Options{}
		if twin != nil {
			opts.TargetTable = twin(n)
		}
		r, err := verify.Table(context.Background(), from, to, "race", "race", n, opts)
		require.NoError(p.t, err)
		require.True(p.t, r.Identical(), r.String())
	}
}

// followed waits until the workflow that follows the writes has applied the
// position of now of active, the side that takes them.
func (p *pairEnv) followed(active *sql.DB, follower *state.Store, workflow string) {
	p.t.Helper()
	pos := position(p.t, active)
	p.waitFor(workflow+" to apply up to "+pos, 2*time.Minute, func() (bool, string) {
		streams, err := follower.Streams(context.Background(), workflow)
		if err != nil || len(streams) == 0 {
			return false, fmt.Sprint(err)
		}
		ok, err := gtid.Covers(streams[0].Position, pos)
		if err != nil {
			return false, err.Error()
		}
		return ok, "applied " + streams[0].Position
	})
}

// identicalAfter is identical once a cutover in direction moved the writes.
func (p *pairEnv) identicalAfter(direction string) {
	p.t.Helper()
	if direction == "switch" {
		p.identical(p.dstDB, p.srcStore, "race_reverse", p.srcDB)
	} else {
		p.identical(p.srcDB, p.store, "race", p.dstDB)
	}
}

// TestSwitchReverseCycles is the life of a move under live writes, through
// the CLI: create, watch, verify (clean), switch (the target equals the source at the freeze, and the
// writers' later writes flow back through the reverse workflow), reverse,
// switch again, and so on for ten cycles; both sides identical after every
// cutover; then complete.
func TestSwitchReverseCycles(t *testing.T) {
	sandboxtest.EachFlavor(t, testSwitchReverseCycles)
}

func testSwitchReverseCycles(t *testing.T, flavor sandbox.Flavor) {
	const keys = 1500
	p := newPairEnv(t, flavor, keys, nil)
	stop := p.writers(keys)
	found, code := p.verifyWait()
	require.Zero(t, code, "a clean target verifies clean under live writes")
	require.Empty(t, found)

	// The first switch, checked at the freeze: nothing writes anywhere until
	// the writers are re-routed, and the target must equal the frozen source.
	out := p.cli.ok("workflow", "switch", "race", "--timeout", "60s")
	require.Contains(t, out, "following back: race_reverse")
	p.frozenSide(p.srcDB)
	p.sameRows(p.dstDB, p.srcDB, p.twin) // the target, at the freeze
	p.reroute("switch")
	require.Contains(t, p.cli.fails(1, "workflow", "verify", "race"), "verify the workflow that replicates the writes now (`rowlift workflow verify race_reverse`)")
	out = p.cli.ok("workflow", "verify", "race_reverse", "--wait", "--interval", "200ms")
	require.Contains(t, out, "verify done: ", "the reverse workflow verifies the source's frozen tables against the target")
	require.Contains(t, out, "no difference")
	// Parsed: protojson varies its spacing from build to build on purpose.
	var shown rowliftv1.Workflow
	require.NoError(t, protojson.Unmarshal([]byte(p.cli.ok("workflow", "show", "race", "--output", "json")), &shown))
	require.Equal(t, rowliftv1.WorkflowState_WORKFLOW_STATE_SWITCHED, shown.GetStatus().GetState())
	require.Equal(t, "done", shown.GetStatus().GetCutover().GetStep())

	cycles := envInt("ROWLIFT_CUTOVER_CYCLES", 10)
	var pauses []int
	for i := 0; i < 2*cycles; i++ {
		time.Sleep(200 * time.Millisecond) // writes on the new side flow back
		direction := []string{"reverse", "switch"}[i%2]
		pauses = append(pauses, p.cutover(direction).pause)
		if direction == "reverse" {
			p.frozenSide(p.dstDB)
		} else {
			p.frozenSide(p.srcDB)
		}
	}
	writes := stop()
	require.Greater(t, writes, 100, "the writers barely ran")
	// The last cutover was a switch: writes go to the target, race_reverse follows them.
	p.identical(p.dstDB, p.srcStore, "race_reverse", p.srcDB)
	slices.Sort(pauses)
	t.Logf("%d cutovers under %d writes: write pause p50 %d ms, max %d ms", len(pauses)+1, writes, pauses[len(pauses)/2], pauses[len(pauses)-1])

	out = p.cli.ok("workflow", "complete", "race")
	require.Contains(t, out, "kept source tables")
	require.Contains(t, out, "main:race._ints_frozen")
	p.frozenSide(p.srcDB) // kept, renamed
	r := p.cli.run("workflow", "show", "race")
	require.Equal(t, 1, r.code, "the workflow is gone after complete")
	_, err := p.srcStore.Workflow(context.Background(), "race_reverse")
	require.ErrorIs(t, err, state.ErrNotFound, "the reverse workflow is gone after complete")
}

// journalStep reads the step of the race workflow's cutover journal.
func (p *pairEnv) journalStep() string {
	j, err := p.store.Journal(context.Background(), "race")
	if err != nil {
		return ""
	}
	return j.Direction + "/" + j.Step
}

// journalSteps reads the steps the race workflow's last cutover went through,
// failing the test unless their times follow each other.
func (p *pairEnv) journalSteps() []string {
	p.t.Helper()
	j, err := p.store.Journal(context.Background(), "race")
	require.NoError(p.t, err)
	var steps []string
	for i, s := range j.Steps {
		if i > 0 {
			require.GreaterOrEqual(p.t, s.AtUS, j.Steps[i-1].AtUS, "step %s recorded before the one before it: %+v", s.Step, j.Steps)
		}
		steps = append(steps, s.Step)
	}
	return steps
}

// TestCutoverSurvivesKills kills the coordinator and both appliers with SIGKILL
// at every step of a switch and of a reverse (the coordinator pauses after it
// records each step), restarts them, and checks that the restarted coordinator
// finishes the cutover by itself, that its journal lists every step once, and
// that both sides end identical.
func TestCutoverSurvivesKills(t *testing.T) {
	sandboxtest.EachFlavor(t, testCutoverSurvivesKills)
}

func testCutoverSurvivesKills(t *testing.T, flavor sandbox.Flavor) {
	const keys = 900
	p := newPairEnv(t, flavor, keys, []string{"ROWLIFT_TEST_HOOKS=cutover_step=700-700ms"})
	stop := p.writers(keys)
	direction := "switch"
	for _, step := range []string{"freezing", "frozen", "applied", "writable", "started"} {
		for range 2 {
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.cli.run("workflow", direction, "race", "--timeout", "60s") // dies with the coordinator
			}()
			want := direction + "/" + step
			p.waitFor("the cutover to reach "+want, time.Minute, func() (bool, string) {
				got := p.journalStep()
				return got == want, got
			})
			p.coord.kill()
			p.applier.kill()
			p.revApplier.kill()
			t.Logf("killed the coordinator and both appliers at %s", want)
			p.applier.restart()
			p.revApplier.restart()
			p.coord.restart()
			wg.Wait()
			p.waitFor("the restarted coordinator to finish "+direction, time.Minute, func() (bool, string) {
				got := p.journalStep()
				return got == direction+"/done", got
			})
			require.Equal(t, []string{"freezing", "frozen", "applied", "writable", "started", "done"}, p.journalSteps(),
				"the journal's steps after a kill at %s", want)
			p.reroute(direction)
			if direction == "switch" {
				p.frozenSide(p.srcDB)
				direction = "reverse"
			} else {
				p.frozenSide(p.dstDB)
				direction = "switch"
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	require.Greater(t, stop(), 50, "the writers barely ran")
	// Ten cutovers: the last was a reverse, so the sources take the writes.
	p.identical(p.srcDB, p.store, "race", p.dstDB)
}

// TestSwitchTimeoutUnfreezes: a switch whose stream cannot apply the freeze
// position (its applier is down) rolls back at --timeout: the source tables
// are live again, the workflow runs on, and writes made after the rollback
// reach the target.
func TestSwitchTimeoutUnfreezes(t *testing.T) {
	const keys = 600
	p := newPairEnv(t, sandbox.MariaDB, keys, nil)
	p.applier.kill()
	msg := p.cli.fails(1, "workflow", "switch", "race", "--timeout", "3s")
	require.Contains(t, msg, "rolled back")
	require.Contains(t, msg, "did not apply the freeze positions before the deadline")
	for _, n := range p.names {
		var live int
		require.NoError(t, p.srcDB.QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'race' AND TABLE_NAME = ?", n).Scan(&live))
		require.Equal(t, 1, live, "race.%s is live again on the source", n)
	}
	p.applier.restart()
	stop := p.writers(keys)
	time.Sleep(time.Second)
	stop()
	p.waitCaughtUp("race", time.Minute)
	p.sameRows(p.srcDB, p.dstDB, nil)
	w, err := p.store.Workflow(context.Background(), "race")
	require.NoError(t, err)
	require.Equal(t, state.Running, w.State)
}

// TestCutoverRefusals: each command refuses where it makes no sense, with a
// message that says what to do, and changes nothing.
func TestCutoverRefusals(t *testing.T) {
	p := newPairEnv(t, sandbox.MariaDB, 300, nil)
	require.Contains(t, p.cli.fails(1, "workflow", "reverse", "race"), "was not switched")
	require.Contains(t, p.cli.fails(1, "workflow", "complete", "race"), "switch it first (`rowlift workflow switch race`), or cancel it")
	require.Contains(t, p.cli.fails(1, "workflow", "switch", "race", "--max-lag", "1ns"), "raise --max-lag")
	require.Contains(t, p.cli.fails(2, "workflow", "switch", "race", "--freeze", "drop"), "--freeze must be rename, lock or none")
	p.cutover("switch")
	require.Contains(t, p.cli.fails(1, "workflow", "switch", "race"), "reverse it to switch back")
	require.Contains(t, p.cli.fails(1, "workflow", "cancel", "race"), "reverse it first")
	require.Contains(t, p.cli.fails(1, "workflow", "stop", "race"), "reverse it to switch back, or complete it")
	p.cutover("reverse")
	// Back on the source: the move can be given up; the target tables go.
	out := p.cli.ok("workflow", "cancel", "race", "--drop-target-tables")
	require.Contains(t, out, "dropped target tables: main:race._ints_frozen")
	var n int
	require.NoError(t, p.dstDB.QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'race'").Scan(&n))
	require.Zero(t, n)
	_, err := p.srcStore.Workflow(context.Background(), "race_reverse")
	require.ErrorIs(t, err, state.ErrNotFound)

	// A workflow created without the reverse flags says which to give.
	p.cli.ok("workflow", "create", "--name", "plain", "--source", "main="+p.streamerAddr, "--target", "main", "--source-database", "race",
		"--tables", "ints", "--target-database", "plain", "--start")
	p.cli.ok("workflow", "watch", "plain", "--until", "running", "--interval", "200ms")
	msg := p.cli.fails(1, "workflow", "switch", "plain")
	require.Contains(t, msg, "--reverse-target main=NAME")
	require.Contains(t, msg, "--reverse-streamer main=ADDR")
}
