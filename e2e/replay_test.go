package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/metrics"
	"github.com/rowlift/rowlift/internal/metrics/metricstest"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/testhook"
	"github.com/rowlift/rowlift/internal/verify"
	"github.com/rowlift/rowlift/state"
)

// TestParallelReplay replays one conflict-heavy history (hot rows, unique
// values swapped between rows, key changes, deletes and re-inserts of the same
// keys) into one target database per configuration: 1, 2, 4, 8 and 16 workers,
// commits in source order and out of it, each with a random commit batch size
// (1: none; 0: the default). The applier is down while the history is written,
// so replay runs at full speed, and it is killed with SIGKILL during the
// catch-up (ROWLIFT_REPLAY_KILLS, 2 by default). Every target must end
// identical to the source.
func TestParallelReplay(t *testing.T) {
	sandboxtest.EachFlavor(t, testParallelReplay)
}

func testParallelReplay(t *testing.T, flavor sandbox.Flavor) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 7))
	keys := envInt("ROWLIFT_REPLAY_KEYS", 150)
	e := newEnvWith(t, sandbox.Options{Flavor: flavor})
	names := createRaceTables(e, keys)
	e.startStreamer()
	e.startApplier()

	type config struct {
		name       string
		workers    int
		outOfOrder bool
		batch      int
	}
	var configs []config
	for _, outOfOrder := range []bool{false, true} {
		for _, workers := range []int{1, 2, 4, 8, 16} {
			c := config{workers: workers, outOfOrder: outOfOrder, batch: []int{1, 4, 0}[rng.IntN(3)]}
			mode := map[bool]string{false: "inorder", true: "outoforder"}[outOfOrder]
			c.name = fmt.Sprintf("replay_%s_w%d_b%d", mode, workers, c.batch)
			configs = append(configs, c)
			spec := e.workflow(c.name, "race", names...)
			spec.TargetDatabase = c.name
			spec.Options.ApplyWorkers = int32(workers)
			spec.Options.OutOfOrderCommit = outOfOrder
			spec.Options.CommitBatchItems = int32(c.batch)
			spec.Options.CommitBatchMs = 2
			e.start(spec)
		}
	}
	for _, c := range configs {
		e.waitState(c.name, state.Running, 2*time.Minute)
	}
	e.applier.stop()

	ctx, stop := context.WithTimeout(context.Background(), time.Duration(envInt("ROWLIFT_REPLAY_MS", 2500))*time.Millisecond)
	writes := startRaceWriters(ctx, e, seed, 100, keys)()
	stop()
	t.Logf("%d source transactions to replay into %d targets", writes, len(configs))
	require.Greater(t, writes, 200, "the writers barely ran; the replay proves little")

	e.applier.restart()
	for k := range envInt("ROWLIFT_REPLAY_KILLS", 2) {
		time.Sleep(time.Duration(200+rng.IntN(800)) * time.Millisecond)
		e.applier.kill()
		t.Logf("kill %d: SIGKILL applier during the catch-up", k+1)
		e.applier.restart()
	}
	for _, c := range configs {
		w := e.waitStates(c.name, 3*time.Minute, state.Running, state.Error)
		require.Equal(t, state.Running, w.State, "%s: %s", c.name, w.Message)
		e.waitCaughtUp(c.name, 3*time.Minute)
	}
	for _, c := range configs {
		for _, name := range names {
			r, err := verify.Table(context.Background(), e.srcDB, e.dstDB, "race", c.name, name, verify.Options{})
			require.NoError(t, err)
			require.True(t, r.Identical(), "%s, table %s: %s", c.name, name, r.String())
		}
	}
}

// TestSlowTargetReplayHasNoRollbackStorm replays a backlog of transactions
// that share no row into a target the test hook slows down (every replay group
// held 30-160 ms after its statements ran, its locks taken, as a loaded server
// is slow over every statement) with four workers. Nothing is stuck, only
// slow: the stuck-group rule rolls nothing back (the fixed 100 ms it replaced
// rolled back the later groups behind every slow one), and the target ends
// identical. Real commit-order deadlocks are the applier package's
// TestReplayBreaksCommitOrderDeadlocks.
func TestSlowTargetReplayHasNoRollbackStorm(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		seed := testSeed(t)
		const rows, backlog = 400, 200
		e := newEnvWith(t, sandbox.Options{Flavor: flavor})
		e.hooks = []string{testhook.EnvVar + fmt.Sprintf("=slow_target=30-160ms,seed=%d", seed)}
		sandboxtest.Exec(t, e.srcDB, "CREATE DATABASE slow", "CREATE TABLE slow.t (id INT PRIMARY KEY, v INT NOT NULL)",
			fmt.Sprintf("INSERT INTO slow.t WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < %d) SELECT i, 0 FROM s", rows))
		metricsAddr := freeAddr(t)
		e.startStreamer()
		e.startApplier("--metrics-listen", metricsAddr)
		spec := e.workflow("slow", "slow", "t")
		spec.Options.ApplyWorkers, spec.Options.CommitBatchItems = 4, 1
		e.start(spec)
		e.waitState("slow", state.Running, 2*time.Minute)
		// A backlog for the applier to catch up on: one transaction per row.
		e.applier.stop()
		rng := rand.New(rand.NewPCG(seed, 24))
		for _, id := range rng.Perm(rows)[:backlog] {
			sandboxtest.Exec(t, e.srcDB, fmt.Sprintf("UPDATE slow.t SET v = %d WHERE id = %d", 1+rng.IntN(1000), id+1))
		}
		e.applier.restart()
		e.waitCaughtUp("slow", 3*time.Minute)
		r, err := verify.Table(context.Background(), e.srcDB, e.dstDB, "slow", "slow", "t", verify.Options{})
		require.NoError(t, err)
		require.True(t, r.Identical(), r.String())
		scrape := metricstest.Get(t, "http://"+metricsAddr+metrics.Path)
		committed, _ := scrape.Sum("rowlift_replay_transactions_total", map[string]string{"workflow": "slow"})
		require.GreaterOrEqual(t, committed, float64(backlog), "the restarted applier replayed the backlog")
		conflicts, _ := scrape.Sum("rowlift_replay_conflicts_total", map[string]string{"workflow": "slow"})
		require.Zero(t, conflicts, "replay groups rolled back on a slow target with no conflict:\n%s", e.applier.logText())
	})
}

// TestStopLeavesNoTransactionOpen stops a workflow while replay groups are
// in flight (delayed by the test hook, several waiting for their commit
// turn): the stop fences the streams, the applier ends the run, and no
// transaction of its replay workers stays open on the target, holding row
// locks and the share lock on the stream row that a cutover's Follow (or a
// resume) needs.
func TestStopLeavesNoTransactionOpen(t *testing.T) {
	seed := testSeed(t)
	e, names := stalledReplay(t, seed, "halt", "20-300ms", 300)
	stop := e.burst(seed, 300, 100)
	moved, err := e.store.Transition(context.Background(), "halt", []state.State{state.Running}, state.Stopped, "stopped by the test")
	require.NoError(t, err)
	require.True(t, moved)
	t.Logf("%d source transactions", stop())
	e.waitFor("no open transaction on the target", time.Minute, func() (bool, string) {
		// The server answers INNODB_TRX from a snapshot it refreshes only when
		// it was last read over 100 ms ago: read every 50 ms, the first answer
		// would stand forever (it showed a worker in a lock wait a minute after
		// its connection had gone).
		time.Sleep(150 * time.Millisecond)
		var n int
		var what string
		require.NoError(t, e.dstDB.QueryRow("SELECT COUNT(*), IFNULL(GROUP_CONCAT(CONCAT('thread ', trx_mysql_thread_id, ' ', trx_state, ' since ', trx_started, ': ', "+
			"IFNULL(trx_query, '-'))), '') FROM information_schema.INNODB_TRX").Scan(&n, &what))
		if n == 0 {
			return true, ""
		}
		// What every server thread does, so a timeout says what the open
		// transaction waits for (a row lock, a metadata lock, the commit).
		var threads string
		require.NoError(t, e.dstDB.QueryRow("SELECT IFNULL(GROUP_CONCAT(CONCAT('thread ', ID, ' ', COMMAND, ' ', TIME, ' s ', IFNULL(STATE, '-'), ': ', "+
			"LEFT(IFNULL(INFO, '-'), 60)) SEPARATOR '; '), '') FROM information_schema.PROCESSLIST WHERE COMMAND <> 'Daemon'").Scan(&threads))
		return false, what + "; server threads: " + threads
	})
	// And the stream row is free: a resume takes it over and catches up.
	_, err = e.store.Transition(context.Background(), "halt", []state.State{state.Stopped}, state.Running, "resumed by the test")
	require.NoError(t, err)
	e.waitCaughtUp("halt", 2*time.Minute)
	for _, name := range names {
		r, err := verify.Table(context.Background(), e.srcDB, e.dstDB, "race", "race", name, verify.Options{})
		require.NoError(t, err)
		require.True(t, r.Identical(), "table %s: %s", name, r.String())
	}
}

// stalledReplay runs workflow name over the race tables (keys keys) with four
// replay workers, one transaction per group, and each group stalled before it
// runs for a time in stall ("0-250ms"), and waits until it runs.
func stalledReplay(t *testing.T, seed uint64, name, stall string, keys int) (*env, []string) {
	t.Helper()
	e := newEnv(t)
	e.hooks = []string{testhook.EnvVar + fmt.Sprintf("=replay_exec=%s,seed=%d", stall, seed)}
	names := createRaceTables(e, keys)
	e.startStreamer()
	e.startApplier()
	spec := e.workflow(name, "race", names...)
	spec.Options.ApplyWorkers, spec.Options.CommitBatchItems = 4, 1
	e.start(spec)
	e.waitState(name, state.Running, 2*time.Minute)
	return e, names
}

// burst runs the race writers on the source until they have committed n
// transactions, however slow the machine; the writers go on until stop, which
// returns how many they committed.
func (e *env) burst(seed uint64, keys, n int) (stop func() int) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var committed atomic.Int64
	wait := startRoutedWriters(ctx, func() *sql.DB { return e.srcDB }, seed, 200, keys, &committed, nil)
	e.waitFor(fmt.Sprintf("%d source commits", n), time.Minute, func() (bool, string) {
		return committed.Load() >= int64(n), fmt.Sprint(committed.Load())
	})
	return func() int {
		cancel()
		return wait()
	}
}
