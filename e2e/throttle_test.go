package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/metrics"
	"github.com/rowlift/rowlift/internal/metrics/metricstest"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/testhook"
	"github.com/rowlift/rowlift/internal/verify"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// TestThrottlePausesTheCopyNotReplay: a copy pauses while a source metric is
// over its limit, then while a target metric is, showing why in the stream's
// state; binlog changes to a copied table and to a copied row of the paused
// table are applied meanwhile; the copy resumes by itself once both metrics
// are back under. Both metrics are lag queries reading a value the test sets.
//
// No timing decides the outcome: the source table being copied is locked
// (LOCK TABLES ... WRITE) so that its first chunk waits in its fence, whose
// lock tries are withdrawn and tried again until the test unlocks, while the
// source metric goes over its limit; the copy then pauses at its next chunk,
// after exactly one chunk of that table.
func TestThrottlePausesTheCopyNotReplay(t *testing.T) {
	e := newEnv(t)
	e.sourceExec("CREATE DATABASE ctl", "CREATE TABLE ctl.lag (v INT)", "INSERT INTO ctl.lag VALUES (0)")
	sandboxtest.Exec(t, e.dstDB, "CREATE DATABASE ctl", "CREATE TABLE ctl.lag (v INT)", "INSERT INTO ctl.lag VALUES (0)")
	ctx := context.Background()
	lock := e.smallAndLockedBig()

	const chunk = 100
	spec := e.workflow("throttle", "d", "small", "big")
	// One table at a time, in this order: small is copied before big starts.
	spec.Options.ChunkRows, spec.Options.ParallelTables = chunk, 1
	lag := &rowliftv1.ThrottleLimits{LagQuery: "SELECT v FROM ctl.lag", MaxLagSeconds: 10}
	const interval = 100 * time.Millisecond
	spec.Options.Throttle = &rowliftv1.Throttle{Source: lag, Target: lag, CheckIntervalMs: interval.Milliseconds()}
	e.startStreamer()
	metricsURL := freeAddr(t)
	e.startApplier("--metrics-listen", metricsURL)
	metricsURL = "http://" + metricsURL + metrics.Path
	stream := map[string]string{"workflow": "throttle", "source": "main", "target": "main"}
	scraped := func(name string) float64 {
		t.Helper()
		v, ok := metricstest.Get(t, metricsURL).Sum(name, stream)
		require.True(t, ok, "%s is scraped", name)
		return v
	}
	e.start(spec)

	e.waitFenceTry("throttle", "big")
	e.sourceExec("UPDATE ctl.lag SET v = 100")
	// The streamer's last reading is from before big's first chunk; one interval
	// on, the next chunk's check reads the source again.
	time.Sleep(2 * interval)
	_, err := lock.ExecContext(ctx, "UNLOCK TABLES")
	require.NoError(t, err)

	e.waitThrottled("throttle", "source lag 100s > 10s")
	require.Equal(t, 1.0, scraped("rowlift_copy_throttled"), "the applier records the throttle before it stores it")
	// Replay goes on: a change of the copied table and of a copied row of the
	// paused one are applied; a row not copied yet comes with its chunk later.
	e.sourceExec("INSERT INTO d.small VALUES (4, 4)", "UPDATE d.big SET v = -1 WHERE id IN (50, 500)")
	e.waitRow("d.small", 4, 4)
	e.waitRow("d.big", 50, -1)
	require.Equal(t, chunk, e.rowsCopied("throttle", "big"), "one chunk of big was copied before the pause")

	// The target's limit too; then the source's metric drops: the copy waits
	// for the target alone.
	sandboxtest.Exec(t, e.dstDB, "UPDATE ctl.lag SET v = 100")
	e.waitThrottled("throttle", "source lag 100s > 10s; target lag 100s > 10s")
	e.sourceExec("UPDATE ctl.lag SET v = 0")
	e.waitThrottled("throttle", "target lag 100s > 10s")
	e.sourceExec("INSERT INTO d.small VALUES (5, 5)", "UPDATE d.big SET v = -2 WHERE id = 60")
	e.waitRow("d.small", 5, 5)
	e.waitRow("d.big", 60, -2)
	require.Equal(t, chunk, e.rowsCopied("throttle", "big"), "no chunk while the target's metric is over its limit")
	require.Equal(t, chunk, count(t, e.dstDB, "d.big"))

	sandboxtest.Exec(t, e.dstDB, "UPDATE ctl.lag SET v = 0")
	e.waitState("throttle", state.Running, 30*time.Second)
	e.waitCaughtUp("throttle", 30*time.Second)
	e.waitThrottled("throttle", "")
	require.Equal(t, 0.0, scraped("rowlift_copy_throttled"))
	require.Greater(t, scraped("rowlift_copy_throttled_time_seconds_total"), 0.0, "the throttle lasted several heartbeats")
	for _, table := range []string{"small", "big"} {
		res, err := verify.Table(ctx, e.srcDB, e.dstDB, "d", "d", table, verify.Options{})
		require.NoError(t, err)
		require.True(t, res.Identical(), "%s", res)
	}

	streamerLog, applierLog := e.streamer.logText(), e.applier.logText()
	for _, want := range []string{`"copy throttled: metric over its limit"`, `"side":"source"`, `"reason":"source lag 100s > 10s"`,
		`"copy throttle lifted: metric back under its limit"`, `"copy throttled by the target"`, `"copy throttle by the target lifted"`} {
		require.Contains(t, streamerLog, want)
	}
	for _, want := range []string{`"copy throttled: metric over its limit"`, `"side":"target"`, `"limit":10`,
		`"copy throttle lifted: metric back under its limit"`} {
		require.Contains(t, applierLog, want)
	}
}

// TestCopyWaitsForReplay: catch-up before copy. While replay lags more than
// max_replay_lag_ms, the copy waits between chunks and the stream's state
// says why; it copies again once replay has caught up, and the tables end
// identical. Replay is slowed on purpose (each group holds its locks 600 ms)
// while a copied table takes a few writes, each group waiting for the one
// before it (the same row).
//
// No timing decides the outcome: big's first chunk waits in its fence's table
// lock while the writes go in, 150 ms apart, so at its second chunk the second
// write has waited most of a second behind the first group's 600 ms, against a
// bound of 300 ms, and replay needs 3.6 s to apply them all. The streamer's
// log shows the second chunk placed only once replay has caught up.
func TestCopyWaitsForReplay(t *testing.T) {
	sandboxtest.EachFlavor(t, testCopyWaitsForReplay)
}

func testCopyWaitsForReplay(t *testing.T, flavor sandbox.Flavor) {
	e := newEnvWith(t, sandbox.Options{Flavor: flavor})
	e.hooks = []string{testhook.EnvVar + "=" + string(testhook.SlowTarget) + "=600ms-600ms"}
	ctx := context.Background()
	lock := e.smallAndLockedBig()

	const chunk = 100
	spec := e.workflow("catchup", "d", "small", "big")
	spec.Options.ChunkRows, spec.Options.ParallelTables = chunk, 1
	spec.Options.MaxReplayLagMs = 300
	e.startStreamer("--log-level", "debug") // its chunks' placing, in order with its waits
	e.startApplier()
	e.start(spec)
	e.waitFenceTry("catchup", "big")
	// Apart by more than a replay group waits for more transactions
	// (commit_batch_ms), so that each is a group of its own.
	for range 6 {
		e.sourceExec("UPDATE d.small SET v = v + 1 WHERE id = 1")
		time.Sleep(150 * time.Millisecond)
	}
	_, err := lock.ExecContext(ctx, "UNLOCK TABLES")
	require.NoError(t, err)

	e.waitFor("the copy to wait for replay", 30*time.Second, func() (bool, string) {
		streams, err := e.store.Streams(ctx, "catchup")
		if err != nil {
			return false, err.Error()
		}
		return strings.HasPrefix(streams[0].Throttled, "replay lag "), fmt.Sprintf("throttled %q; copy state %s", streams[0].Throttled, e.copyState("catchup"))
	})
	require.Contains(t, mustStream(t, e, "catchup").Throttled, "> 300ms (max_replay_lag_ms): the copy waits for replay to catch up")

	e.waitState("catchup", state.Running, time.Minute)
	e.waitCaughtUp("catchup", 30*time.Second)
	e.waitThrottled("catchup", "")
	for _, table := range []string{"small", "big"} {
		res, err := verify.Table(ctx, e.srcDB, e.dstDB, "d", "d", table, verify.Options{})
		require.NoError(t, err)
		require.True(t, res.Identical(), "%s", res)
	}
	streamerLog := e.streamer.logText()
	for _, want := range []string{`"copy waits for replay to catch up"`, `"max_replay_lag":0.3`, `"replay caught up: copying again"`} {
		require.Contains(t, streamerLog, want)
	}
	// Big's second chunk waited for replay: the streamer placed it only after
	// replay caught up. (Its first chunk, placed after the writes, commits only
	// after them, so the target's state cannot show the wait between the two.)
	var order []string
	for _, line := range strings.Split(streamerLog, "\n") {
		switch {
		case strings.Contains(line, `"msg":"chunk placed"`) && strings.Contains(line, `"table":"big"`):
			order = append(order, "big chunk")
		case strings.Contains(line, `"msg":"copy waits for replay to catch up"`):
			order = append(order, "wait")
		case strings.Contains(line, `"msg":"replay caught up: copying again"`):
			order = append(order, "go")
		}
	}
	require.GreaterOrEqual(t, len(order), 4, "%v", order)
	require.Equal(t, []string{"big chunk", "wait", "go", "big chunk"}, order[:4])
}

// smallAndLockedBig creates d.small (rows 1 to 3) and d.big (rows 1 to 1000)
// on the source and returns a connection that holds LOCK TABLES d.big WRITE,
// so that big's first chunk waits in its fence until the test unlocks.
func (e *env) smallAndLockedBig() *sql.Conn {
	e.t.Helper()
	e.sourceExec("CREATE DATABASE d",
		"CREATE TABLE d.small (id INT PRIMARY KEY, v INT)", "INSERT INTO d.small VALUES (1, 1), (2, 2), (3, 3)",
		"CREATE TABLE d.big (id INT PRIMARY KEY, v INT)",
		"INSERT INTO d.big WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 1000) SELECT i, i FROM s")
	lock, err := e.srcDB.Conn(context.Background())
	require.NoError(e.t, err)
	e.t.Cleanup(func() { lock.Close() })
	_, err = lock.ExecContext(context.Background(), "LOCK TABLES d.big WRITE")
	require.NoError(e.t, err)
	return lock
}

// waitFenceTry waits until a chunk of table tries to take its fence's table
// lock, which the test holds. Each try waits 50 ms before the streamer
// withdraws it and tries again after a pause, so the processlist is read
// every 5 ms, not at waitFor's pace.
func (e *env) waitFenceTry(workflow, table string) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if count(e.t, e.srcDB, "information_schema.PROCESSLIST WHERE STATE = 'Waiting for table metadata lock' AND INFO LIKE 'LOCK TABLES%"+table+"%'") == 1 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.t.Fatalf("no chunk of %s tried its fence's lock in 30 s; copy state %s", table, e.copyState(workflow))
}

// mustStream returns the workflow's first stream.
func mustStream(t *testing.T, e *env, workflow string) state.Stream {
	t.Helper()
	streams, err := e.store.Streams(context.Background(), workflow)
	require.NoError(t, err)
	require.NotEmpty(t, streams)
	return streams[0]
}

// waitThrottled waits until the workflow's stream shows reason as why its copy
// waits ("" once it does not).
func (e *env) waitThrottled(workflow, reason string) {
	e.t.Helper()
	e.waitFor(fmt.Sprintf("stream throttled %q", reason), 30*time.Second, func() (bool, string) {
		streams, err := e.store.Streams(context.Background(), workflow)
		if err != nil {
			return false, err.Error()
		}
		return streams[0].Throttled == reason, fmt.Sprintf("throttled %q; copy state %s", streams[0].Throttled, e.copyState(workflow))
	})
}

// waitRow waits until the target's table has the row (id, v).
func (e *env) waitRow(table string, id, v int) {
	e.t.Helper()
	e.waitFor(fmt.Sprintf("row (%d, %d) in %s on the target", id, v, table), 30*time.Second, func() (bool, string) {
		var got int
		err := e.dstDB.QueryRow("SELECT v FROM "+table+" WHERE id = ?", id).Scan(&got)
		return err == nil && got == v, fmt.Sprintf("v %d, %v", got, err)
	})
}

func (e *env) rowsCopied(workflow, table string) int {
	e.t.Helper()
	copies, err := e.store.CopyState(context.Background(), workflow, "")
	require.NoError(e.t, err)
	for _, c := range copies {
		if c.Table == table {
			return int(c.RowsCopied)
		}
	}
	e.t.Fatalf("no copy state of %s", table)
	return 0
}

func (e *env) copyState(workflow string) string {
	copies, err := e.store.CopyState(context.Background(), workflow, "")
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, c := range copies {
		parts = append(parts, fmt.Sprintf("%s: %d rows, done %v", c.Table, c.RowsCopied, c.Done))
	}
	return strings.Join(parts, "; ")
}
