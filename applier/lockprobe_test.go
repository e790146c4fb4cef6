package applier

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
)

// TestLockProbeSeesMetadataLockWaits builds the commit-order deadlock a
// deferred-keys ALTER can close: a transaction that wrote the table is open
// (a later replay group waiting for its commit turn), the ALTER queues for the
// table's exclusive lock behind it, and a write to the table (the head group)
// queues behind the ALTER. InnoDB's lock tables show no wait; the probe must
// report the write as waiting, for a holder it cannot name, which makes
// schedule.Unstick roll back the later groups.
func TestLockProbeSeesMetadataLockWaits(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		ctx := context.Background()
		db := targetServer(t, flavor)
		sandboxtest.Exec(t, db, "CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY, a INT)", "INSERT INTO d.t VALUES (1, 1), (2, 2)")
		probe, err := newLockProbe(ctx, db, zap.NewNop())
		require.NoError(t, err)
		require.NotNil(t, probe)
		defer probe.close()

		later, err := db.Conn(ctx)
		require.NoError(t, err)
		defer later.Close()
		_, err = later.ExecContext(ctx, "BEGIN")
		require.NoError(t, err)
		_, err = later.ExecContext(ctx, "UPDATE d.t SET a = a + 1 WHERE id = 2")
		require.NoError(t, err)

		alterDone := make(chan error, 1)
		go func() {
			_, err := db.ExecContext(ctx, "ALTER TABLE d.t ADD KEY by_a (a)")
			alterDone <- err
		}()
		head, err := db.Conn(ctx)
		require.NoError(t, err)
		defer head.Close()
		// Deferred after head.Close, so it runs first if the test fails: it lets
		// the ALTER and the head's write through, and head.Close returns.
		defer later.ExecContext(ctx, "ROLLBACK") //nolint:errcheck // a second ROLLBACK is a no-op
		var headID uint64
		require.NoError(t, head.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&headID))
		require.Eventually(t, func() bool {
			var n int
			require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST "+
				"WHERE STATE = 'Waiting for table metadata lock' AND INFO LIKE 'ALTER TABLE%'").Scan(&n))
			return n == 1
		}, 30*time.Second, 10*time.Millisecond, "the ALTER queues behind the open transaction")
		headDone := make(chan error, 1)
		go func() {
			_, err := head.ExecContext(ctx, "UPDATE d.t SET a = a + 1 WHERE id = 1")
			headDone <- err
		}()

		require.Eventually(t, func() bool {
			time.Sleep(probe.every)
			waits, known, err := probe.waits(ctx)
			return err == nil && known && len(waits[headID]) == 1 && waits[headID][0] == 0
		}, 30*time.Second, 10*time.Millisecond, "the head's metadata lock wait, holder unnamed")

		// What rolling back the later group does: both go through.
		_, err = later.ExecContext(ctx, "ROLLBACK")
		require.NoError(t, err)
		require.NoError(t, <-alterDone)
		require.NoError(t, <-headDone)
	})
}

// TestLockProbeReadsAnyStatementText has the probe read a lock wait whose
// statement holds binary data and 4-byte UTF-8. MySQL copies a statement's
// text into information_schema's utf8mb3 columns (PROCESSLIST.INFO, INNODB_TRX's
// trx_query), and a probe that read those tables failed with error 3854
// ("Cannot convert string '\xA5\xEA...' from binary to utf8mb3"), which ended
// the stream. Probes on MySQL with performance_schema on (its default) read
// the wait live; with it off (the sandbox's setting) INNODB_TRX cannot be read
// at all while such a statement runs, and the probe says it cannot tell.
func TestLockProbeReadsAnyStatementText(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		db := targetServer(t, flavor)
		probeBinaryWait(t, db, flavor == sandbox.MariaDB)
		if flavor == sandbox.MySQL {
			srv := sandboxtest.Start(t, sandbox.Options{Flavor: flavor, Args: []string{"--performance-schema=ON"}})
			live, _, err := dbconn.Open(srv.DSN(""), dbconn.Target)
			require.NoError(t, err)
			t.Cleanup(func() { live.Close() })
			probeBinaryWait(t, live, true)
		}
	})
}

// probeBinaryWait makes a connection wait for a row lock with a statement of
// binary data and emoji, and probes the wait: seen, with its holder where the
// probe names holders, when tells is true; otherwise without an error, as
// unknown.
func probeBinaryWait(t *testing.T, db *sql.DB, tells bool) {
	ctx := context.Background()
	sandboxtest.Exec(t, db, "CREATE DATABASE d",
		"CREATE TABLE d.t (id INT PRIMARY KEY, b VARBINARY(64), s VARCHAR(64) CHARACTER SET utf8mb4)",
		"INSERT INTO d.t VALUES (1, NULL, NULL)")
	probe, err := newLockProbe(ctx, db, zap.NewNop())
	require.NoError(t, err)
	require.NotNil(t, probe)
	defer probe.close()

	holder, err := db.Conn(ctx)
	require.NoError(t, err)
	defer holder.Close()
	var holderID uint64
	require.NoError(t, holder.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&holderID))
	_, err = holder.ExecContext(ctx, "BEGIN")
	require.NoError(t, err)
	_, err = holder.ExecContext(ctx, "UPDATE d.t SET s = 'held' WHERE id = 1")
	require.NoError(t, err)
	defer holder.ExecContext(ctx, "ROLLBACK") //nolint:errcheck // a second ROLLBACK is a no-op

	waiter, err := db.Conn(ctx)
	require.NoError(t, err)
	defer waiter.Close()
	var waiterID uint64
	require.NoError(t, waiter.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&waiterID))
	waiterDone := make(chan error, 1)
	go func() {
		_, err := waiter.ExecContext(ctx, "UPDATE d.t SET b = _binary'\xa5\xea\x00\xff\xfe', s = '🙂 \xf0\x9f\x92\xa9' WHERE id = 1")
		waiterDone <- err
	}()
	want := uint64(0)
	if probe.named {
		want = holderID
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		time.Sleep(probe.every)
		waits, known, err := probe.waits(ctx)
		require.NoError(c, err)
		if !tells {
			require.False(c, known, "INNODB_TRX is unreadable")
			return
		}
		require.True(c, known, "a fresh snapshot")
		require.Equal(c, []uint64{want}, waits[waiterID])
	}, 30*time.Second, 10*time.Millisecond, "the waiter's row lock wait")
	_, err = holder.ExecContext(ctx, "ROLLBACK")
	require.NoError(t, err)
	require.NoError(t, <-waiterDone)
}
