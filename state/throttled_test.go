package state_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/state"
)

// TestStreamThrottled: the throttle reason is stored per stream by the run that
// owns it, and a target whose stream table predates the column gets it on Open.
func TestStreamThrottled(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		store, db := openStore(t, flavor)
		ctx := context.Background()
		require.NoError(t, store.CreateWorkflow(ctx, spec("thr"), "main"))
		owner, err := store.TakeOver(ctx, "thr", "-80")
		require.NoError(t, err)

		require.NoError(t, store.SetStreamThrottled(ctx, "thr", "-80", owner, "source Threads_running 57 > 50"))
		require.NoError(t, store.SetStreamThrottled(ctx, "thr", "80-", owner+1, "not the owner"))
		streams, err := store.Streams(ctx, "thr")
		require.NoError(t, err)
		require.Equal(t, "-80", streams[0].Source)
		require.Equal(t, "source Threads_running 57 > 50", streams[0].Throttled)
		require.Equal(t, "", streams[1].Throttled, "a run that does not own the stream writes nothing")

		// An older sidecar schema: the column is added, existing rows read as "".
		sandboxtest.Exec(t, db, "ALTER TABLE _rowlift.stream DROP COLUMN throttled")
		again, err := state.Open(ctx, db)
		require.NoError(t, err)
		streams, err = again.Streams(ctx, "thr")
		require.NoError(t, err)
		require.Equal(t, "", streams[0].Throttled)
		require.NoError(t, again.SetStreamThrottled(ctx, "thr", "-80", owner, "target lag 12s > 10s"))
		streams, err = again.Streams(ctx, "thr")
		require.NoError(t, err)
		require.Equal(t, "target lag 12s > 10s", streams[0].Throttled)
	})
}

// TestStreamWaiting: why a stream waits on its source is written only by the
// run that owns the stream, and an older sidecar schema gains the column.
func TestStreamWaiting(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		store, db := openStore(t, flavor)
		ctx := context.Background()
		require.NoError(t, store.CreateWorkflow(ctx, spec("wait"), "main"))
		owner, err := store.TakeOver(ctx, "wait", "-80")
		require.NoError(t, err)
		const why = "source is locating GTID 0-1-5 in binlog binlog.000003"
		require.NoError(t, store.SetStreamWaiting(ctx, "wait", "-80", owner, why))
		require.NoError(t, store.SetStreamWaiting(ctx, "wait", "80-", owner+1, "not the owner"))
		streams, err := store.Streams(ctx, "wait")
		require.NoError(t, err)
		require.Equal(t, why, streams[0].Waiting)
		require.Equal(t, "", streams[1].Waiting, "a run that does not own the stream writes nothing")

		sandboxtest.Exec(t, db, "ALTER TABLE _rowlift.stream DROP COLUMN waiting")
		again, err := state.Open(ctx, db)
		require.NoError(t, err)
		streams, err = again.Streams(ctx, "wait")
		require.NoError(t, err)
		require.Equal(t, "", streams[0].Waiting)
		require.NoError(t, again.SetStreamWaiting(ctx, "wait", "-80", owner, why))
		streams, err = again.Streams(ctx, "wait")
		require.NoError(t, err)
		require.Equal(t, why, streams[0].Waiting)
	})
}
