package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
)

// TestRaceWriterWaitsForItsCommit: a race writer whose context ends while its
// COMMIT runs on the server learns how the COMMIT ended before it returns.
// Tests stop the writers, read the source's position and wait for the target to
// apply up to it (waitCaughtUp): a COMMIT the server finished after the writer
// gave up on it was missing from that position, and the target was compared
// before applying it (a flaky TestStuckReplayGroupRollsBackLaterOnes under load,
// where commits are slow). Here the COMMIT waits for a global read lock, the
// writer's context ends, then the lock goes: the writer must report the commit.
func TestRaceWriterWaitsForItsCommit(t *testing.T) {
	srv := sandboxtest.Start(t, sandbox.Options{})
	db := sandboxtest.Open(t, srv, "")
	sandboxtest.Exec(t, db, "CREATE DATABASE w", "CREATE TABLE w.t (id INT PRIMARY KEY)")
	bg := context.Background()
	hold, err := db.Conn(bg) // holds a user lock the transaction waits for before COMMIT
	require.NoError(t, err)
	defer hold.Close()
	lock, err := db.Conn(bg) // holds the global read lock, which COMMIT waits for
	require.NoError(t, err)
	defer lock.Close()
	_, err = hold.ExecContext(bg, "DO GET_LOCK('w', 3600)")
	require.NoError(t, err)

	conn, err := db.Conn(bg)
	require.NoError(t, err)
	var id int64
	require.NoError(t, conn.QueryRowContext(bg, "SELECT CONNECTION_ID()").Scan(&id))
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	committed := make(chan bool, 1)
	go func() {
		committed <- raceTx(ctx, conn, []string{"INSERT INTO w.t VALUES (1)", "DO GET_LOCK('w', 3600)"})
	}()
	running := func(what string) {
		waitUntil(t, "the writer's session to run "+what, func() (bool, string) {
			var info string
			err := hold.QueryRowContext(bg, "SELECT IFNULL(INFO, '') FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&info)
			return err == nil && info == what, fmt.Sprintf("running %q (%v)", info, err)
		})
	}
	running("DO GET_LOCK('w', 3600)")
	_, err = lock.ExecContext(bg, "FLUSH TABLES WITH READ LOCK")
	require.NoError(t, err)
	_, err = hold.ExecContext(bg, "DO RELEASE_LOCK('w')")
	require.NoError(t, err)
	running("COMMIT")
	cancel()
	_, err = lock.ExecContext(bg, "UNLOCK TABLES")
	require.NoError(t, err)
	reported := <-committed
	// The server is done with the transaction once the session is idle or gone.
	waitUntil(t, "the writer's session to end its transaction", func() (bool, string) {
		var busy int
		err := hold.QueryRowContext(bg, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ? AND COMMAND <> 'Sleep'", id).Scan(&busy)
		return err == nil && busy == 0, fmt.Sprintf("%d busy (%v)", busy, err)
	})
	var rows int
	require.NoError(t, hold.QueryRowContext(bg, "SELECT COUNT(*) FROM w.t").Scan(&rows))
	require.Equal(t, rows == 1, reported, "the writer reported committed=%v, and the server has %d rows", reported, rows)
	require.True(t, reported, "the COMMIT was running when the context ended: it commits")
}

// waitUntil polls cond until it holds, for at most a minute.
func waitUntil(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	waitWithin(t, what, time.Minute, cond)
}

// waitWithin is waitUntil for at most timeout.
func waitWithin(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var ok bool
		if ok, last = cond(); ok {
			return
		}
	}
	t.Fatalf("timed out waiting for %s: %s", what, last)
}
