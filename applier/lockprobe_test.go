package applier

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

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
