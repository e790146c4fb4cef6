package state_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/state"
)

// TestTransitionOnlyFromTheStatesGiven: a move races with nothing, because it
// only happens from the state the mover saw.
func TestTransitionOnlyFromTheStatesGiven(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		store, _ := openStore(t, flavor)
		ctx := context.Background()
		require.NoError(t, store.CreateWorkflow(ctx, spec("w"), "main"))

		moved, err := store.Transition(ctx, "w", []state.State{state.Copying}, state.Running, "copy done")
		require.NoError(t, err)
		require.False(t, moved, "init is not copying")
		moved, err = store.Transition(ctx, "w", []state.State{state.Init, state.Stopped}, state.Copying, "")
		require.NoError(t, err)
		require.True(t, moved)
		moved, err = store.Transition(ctx, "w", []state.State{state.Copying}, state.Copying, "")
		require.NoError(t, err)
		require.True(t, moved, "a move to the same state still counts as matched")
		_, err = store.Transition(ctx, "ghost", []state.State{state.Copying}, state.Running, "")
		require.ErrorIs(t, err, state.ErrNotFound)

		// An error is kept as the last error after the workflow moves on.
		require.NoError(t, store.SetState(ctx, "w", state.Error, "target rejected a row"))
		w, err := store.Workflow(ctx, "w")
		require.NoError(t, err)
		require.Equal(t, "target rejected a row", w.LastError)
		require.WithinDuration(t, time.Now(), w.LastErrorAt, time.Minute)
		moved, err = store.Transition(ctx, "w", []state.State{state.Error}, state.Copying, "")
		require.NoError(t, err)
		require.True(t, moved)
		w, err = store.Workflow(ctx, "w")
		require.NoError(t, err)
		require.Empty(t, w.Message)
		require.Equal(t, "target rejected a row", w.LastError)
	})
}

// TestCopyStartAndStreamMessageTimes: the columns status reads its rates,
// estimates and retry times from; the bytes copied are written with the rows
// and survive a resume (a new run's start, the store opened again).
func TestCopyStartAndStreamMessageTimes(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		store, db := openStore(t, flavor)
		ctx := context.Background()
		require.NoError(t, store.CreateWorkflow(ctx, spec("w"), "main"))
		before := time.Now().UnixMicro()
		require.NoError(t, store.RecordCopyStart(ctx, "w", "-80", map[string]state.Estimate{"orders": {Rows: 1234, Bytes: 98304}}))
		cs, err := store.CopyState(ctx, "w", "-80")
		require.NoError(t, err)
		require.Equal(t, "orders", cs[0].Table)
		require.EqualValues(t, 1234, cs[0].RowsEstimate)
		require.EqualValues(t, 98304, cs[0].BytesEstimate)
		require.GreaterOrEqual(t, cs[0].RunStartedAtUS, before)
		require.Zero(t, cs[1].RunStartedAtUS, "users has no estimate yet")

		owner, err := store.TakeOver(ctx, "w", "-80")
		require.NoError(t, err)
		tx, err := db.Begin()
		require.NoError(t, err)
		require.NoError(t, state.SaveCopyProgress(ctx, tx, "w", "-80", owner, "orders", nil, 10, 700, false))
		require.NoError(t, tx.Commit())
		cs, err = store.CopyState(ctx, "w", "-80")
		require.NoError(t, err)
		require.GreaterOrEqual(t, cs[0].UpdatedAtUS, before)
		require.EqualValues(t, 700, cs[0].BytesCopied)

		// A resume: another applier opens the store and starts a new run.
		store, err = state.Open(ctx, db)
		require.NoError(t, err)
		require.NoError(t, store.RecordCopyStart(ctx, "w", "-80", map[string]state.Estimate{"orders": {Rows: 1300, Bytes: 114688}}))
		cs, err = store.CopyState(ctx, "w", "-80")
		require.NoError(t, err)
		require.EqualValues(t, 10, cs[0].RunStartRows, "a new run's rate counts from the rows copied so far")
		require.EqualValues(t, 700, cs[0].BytesCopied, "a new run keeps the bytes copied")
		require.EqualValues(t, 114688, cs[0].BytesEstimate)
		owner, err = store.TakeOver(ctx, "w", "-80")
		require.NoError(t, err)
		require.NoError(t, state.SaveCopyProgress(ctx, db, "w", "-80", owner, "orders", nil, 5, 350, true))
		cs, err = store.CopyState(ctx, "w", "-80")
		require.NoError(t, err)
		require.EqualValues(t, 15, cs[0].RowsCopied)
		require.EqualValues(t, 1050, cs[0].BytesCopied, "the resumed run adds to them")

		require.NoError(t, store.SetStreamMessage(ctx, "w", "-80", "retrying"))
		streams, err := store.Streams(ctx, "w")
		require.NoError(t, err)
		require.GreaterOrEqual(t, streams[0].MessageAtUS, before)
		require.NoError(t, store.SetStreamMessage(ctx, "w", "-80", ""))
		streams, err = store.Streams(ctx, "w")
		require.NoError(t, err)
		require.Zero(t, streams[0].MessageAtUS)
	})
}

// TestOpenAddsNewColumnsToAnOldSchema: a target whose sidecar schema predates
// the status columns gets them when a newer version opens it.
func TestOpenAddsNewColumnsToAnOldSchema(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		store, db := openStore(t, flavor)
		ctx := context.Background()
		require.NoError(t, store.CreateWorkflow(ctx, spec("old"), "main"))
		for _, q := range []string{
			"ALTER TABLE " + state.Schema + ".workflow DROP COLUMN last_error, DROP COLUMN last_error_at",
			"ALTER TABLE " + state.Schema + ".stream DROP COLUMN message_at_us",
			"ALTER TABLE " + state.Schema + ".copy_state DROP COLUMN rows_estimate, DROP COLUMN run_started_at_us, " +
				"DROP COLUMN run_start_rows, DROP COLUMN updated_at_us, DROP COLUMN bytes_copied, DROP COLUMN bytes_estimate",
			"ALTER TABLE " + state.Schema + ".verify DROP COLUMN outcome, DROP COLUMN message",
		} {
			_, err := db.Exec(q)
			require.NoError(t, err)
		}
		store, err := state.Open(ctx, db)
		require.NoError(t, err)
		w, err := store.Workflow(ctx, "old")
		require.NoError(t, err)
		require.Empty(t, w.LastError)
		cs, err := store.CopyState(ctx, "old", "")
		require.NoError(t, err)
		require.Len(t, cs, 4)
		_, err = store.Streams(ctx, "old")
		require.NoError(t, err)
		_, err = store.StartVerify(ctx, "old", false, false)
		require.NoError(t, err)
		sources, err := store.CancelVerify(ctx, "old", "cancelled by a test")
		require.NoError(t, err)
		require.NotEmpty(t, sources)
	})
}
