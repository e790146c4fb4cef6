package state_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/state"
)

// TestRewindPastLostTransactions follows a stream whose source lost
// transactions through the stop, the rewind and the repair: the stop records
// what was lost and where to go back to; a rewind without a shared position
// changes nothing; the rewind moves the position back, drops the replay
// slots, starts a verify with repair and is done once; the repair ends only
// when every table of the stream has finished its verify with repair.
func TestRewindPastLostTransactions(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		store, db := openStore(t, flavor)
		ctx := context.Background()
		require.NoError(t, store.CreateWorkflow(ctx, spec("lw"), "main"))
		_, err := store.Rewind(ctx, "lw")
		require.ErrorIs(t, err, state.ErrNothingLost)

		sandboxtest.Exec(t, db, "UPDATE _rowlift.stream SET position = '0-1-424' WHERE workflow = 'lw'",
			"INSERT INTO _rowlift.replay_slot (workflow, source, slot, watermark, applied) VALUES ('lw', '-80', 0, '0-1-424', '0-1-424')")
		require.NoError(t, store.StopLost(ctx, "lw", "80-", "0-1-400 and every earlier transaction of server 1 in domain 0", "", "lost, no shared point"))
		_, err = store.Rewind(ctx, "lw")
		require.ErrorContains(t, err, "shares no known position")
		require.NoError(t, store.StopLost(ctx, "lw", "-80", "0-1-423 to 0-1-424", "0-1-422", "lost"))
		sandboxtest.Exec(t, db, "UPDATE _rowlift.stream SET lost = NULL WHERE workflow = 'lw' AND source = '80-'")
		w, err := store.Workflow(ctx, "lw")
		require.NoError(t, err)
		require.Equal(t, state.Error, w.State)
		streams, err := store.Streams(ctx, "lw")
		require.NoError(t, err)
		require.Equal(t, "0-1-423 to 0-1-424", streams[0].Lost)

		sources, err := store.Rewind(ctx, "lw")
		require.NoError(t, err)
		require.Equal(t, []string{"-80"}, sources)
		resume, err := store.ResumeAt(ctx, "lw", "-80")
		require.NoError(t, err)
		require.Equal(t, "0-1-422", resume.Position, "back to what the source has; the slot's watermark is gone")
		require.Equal(t, "0-1-423 to 0-1-424", resume.Repairing)
		_, err = store.Rewind(ctx, "lw")
		require.ErrorIs(t, err, state.ErrNothingLost, "done once")
		verifies, err := store.Verify(ctx, "lw", "-80")
		require.NoError(t, err)
		require.Len(t, verifies, 2)
		require.True(t, verifies[0].Repair)

		owner, err := store.TakeOver(ctx, "lw", "-80")
		require.NoError(t, err)
		finish := func(table string) {
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			require.NoError(t, state.SaveVerifyChunk(ctx, tx, "lw", "-80", owner, table, verifies[0].StartedAtUS, state.VerifyChunk{Done: true}))
			require.NoError(t, tx.Commit())
		}
		finish("orders")
		repairing, err := state.Repairing(ctx, db, "lw", "-80")
		require.NoError(t, err)
		require.NotEmpty(t, repairing, "users is not verified yet")
		finish("users")
		repairing, err = state.Repairing(ctx, db, "lw", "-80")
		require.NoError(t, err)
		require.Empty(t, repairing, "every table verified with repair")
	})
}
