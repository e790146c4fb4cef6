package state_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/state"
)

// TestUpsertsLeaveNoWarnings: the state writes that insert or update a row
// (a replay slot on every out-of-order commit, a cutover journal) store their
// values and leave no warning on either flavor; MySQL warns on every
// ON DUPLICATE KEY UPDATE that reads VALUES().
func TestUpsertsLeaveNoWarnings(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		store, db := openStore(t, flavor)
		db.SetMaxOpenConns(1) // warnings are per session: read them on the writer's
		ctx := context.Background()
		require.NoError(t, store.CreateWorkflow(ctx, spec("u"), "main"))
		owner, err := store.TakeOver(ctx, "u", "-80")
		require.NoError(t, err)
		warnings := func() int {
			var n int
			require.NoError(t, db.QueryRowContext(ctx, "SELECT @@warning_count").Scan(&n))
			return n
		}

		for i, wm := range []string{"0-1-5", "0-1-9"} {
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			res, err := tx.ExecContext(ctx, string(state.AppendSaveSlot(nil, "u", "-80", owner, 0, wm, wm, int64(100+i))))
			require.NoError(t, err)
			saved, err := res.RowsAffected()
			require.NoError(t, err)
			require.NoError(t, state.SlotSaved("u", "-80", saved))
			var n int
			require.NoError(t, tx.QueryRowContext(ctx, "SELECT @@warning_count").Scan(&n))
			require.Zero(t, n, "save slot %s", wm)
			require.NoError(t, tx.Commit())
		}
		// A run that lost the stream writes nothing, and learns why.
		res, err := db.ExecContext(ctx, string(state.AppendSaveSlot(nil, "u", "-80", owner+1, 0, "0-1-12", "0-1-12", 102)))
		require.NoError(t, err)
		saved, err := res.RowsAffected()
		require.NoError(t, err)
		require.ErrorIs(t, state.SlotSaved("u", "-80", saved), state.ErrNotOwner)
		var watermark string
		var sourceTime int64
		require.NoError(t, db.QueryRowContext(ctx, "SELECT watermark, source_time_us FROM _rowlift.replay_slot WHERE workflow = 'u'").
			Scan(&watermark, &sourceTime))
		require.Equal(t, "0-1-9", watermark)
		require.EqualValues(t, 101, sourceTime)

		for _, step := range []string{"freeze", "done"} {
			require.NoError(t, store.SaveJournal(ctx, &state.Journal{Workflow: "u", Step: step}))
			require.Zero(t, warnings(), "save journal at %s", step)
		}
		j, err := store.Journal(ctx, "u")
		require.NoError(t, err)
		require.Equal(t, "done", j.Step)
	})
}
