package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/verify"
	"github.com/rowlift/rowlift/state"
)

// waitSettled waits until the workflow has caught up and runs, and checks
// that it never stopped on the way.
func (e *env) waitSettled(workflow string) {
	e.t.Helper()
	e.waitCaughtUp(workflow, time.Minute)
	w := e.waitState(workflow, state.Running, 10*time.Second)
	require.Empty(e.t, w.LastError, "the workflow never stopped")
}

// waitCaughtUp waits until the workflow's applied position covers the source's.
func (e *env) waitCaughtUp(workflow string, timeout time.Duration) {
	e.t.Helper()
	e.waitApplied(workflow, position(e.t, e.srcDB), timeout)
}

// position reads a server's binlog position, whatever its flavor.
func position(t *testing.T, db *sql.DB) string {
	t.Helper()
	pos, err := dbconn.Position(context.Background(), db)
	require.NoError(t, err)
	return pos
}

// waitApplied waits until the workflow's applied position covers pos.
func (e *env) waitApplied(workflow, pos string, timeout time.Duration) {
	e.t.Helper()
	e.waitFor("the target to apply up to "+pos, timeout, func() (bool, string) {
		streams, err := e.store.Streams(context.Background(), workflow)
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

func testSeed(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("ROWLIFT_TEST_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (rerun with ROWLIFT_TEST_SEED=%d)", seed, seed)
	return seed
}

// TestResumeAfterApplierDowntime: changes made while the applier is down are
// applied when it comes back, from the position it had committed.
func TestResumeAfterApplierDowntime(t *testing.T) {
	sandboxtest.EachFlavor(t, testResumeAfterApplierDowntime)
}

func testResumeAfterApplierDowntime(t *testing.T, flavor sandbox.Flavor) {
	e := newEnvWith(t, sandbox.Options{Flavor: flavor})
	e.sourceExec("CREATE DATABASE r", "CREATE TABLE r.t (id INT PRIMARY KEY, v INT)", "INSERT INTO r.t VALUES (1, 1), (2, 2)")
	e.startStreamer()
	e.startApplier()
	e.start(e.workflow("resume", "r", "t"))
	e.waitState("resume", state.Running, 30*time.Second)
	e.sourceExec("INSERT INTO r.t VALUES (3, 3)")
	e.waitCaughtUp("resume", 30*time.Second)

	e.applier.kill()
	e.sourceExec("INSERT INTO r.t VALUES (4, 4)", "UPDATE r.t SET v = 20 WHERE id = 2", "DELETE FROM r.t WHERE id = 1")
	e.applier.restart()
	e.waitCaughtUp("resume", 30*time.Second)
	// Once idle, heartbeats carry the source's time: the recorded source time
	// passes the last write, so lag reads about zero instead of growing.
	afterWrites := time.Now().UnixMicro()
	e.waitFor("a heartbeat after the last write", 30*time.Second, func() (bool, string) {
		streams, err := e.store.Streams(context.Background(), "resume")
		if err != nil {
			return false, err.Error()
		}
		return streams[0].SourceTimeUS >= afterWrites, fmt.Sprintf("source time %d", streams[0].SourceTimeUS)
	})
	res, err := verify.Table(context.Background(), e.srcDB, e.dstDB, "r", "r", "t", verify.Options{})
	require.NoError(t, err)
	require.True(t, res.Identical(), "%s", res)
	require.EqualValues(t, 3, res.TargetRows)
}
