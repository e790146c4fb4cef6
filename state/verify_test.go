package state_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// TestVerifyProgress starts a verify, commits chunks as a stream would, and
// checks what is kept: counts add up, examples stop at the cap, the last key
// moves, a stream that was taken over or a replaced verify commits nothing,
// and a new call replaces only a finished verify unless told to restart.
func TestVerifyProgress(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		store, db := openStore(t, flavor)
		ctx := context.Background()
		require.NoError(t, store.CreateWorkflow(ctx, spec("v"), "main"))
		started, err := store.StartVerify(ctx, "v", true, false)
		require.NoError(t, err)
		require.True(t, started)
		gens, err := store.VerifyGenerations(ctx)
		require.NoError(t, err)
		require.Len(t, gens, 2, "one running verify per stream")

		rows, err := store.Verify(ctx, "v", "-80")
		require.NoError(t, err)
		require.Len(t, rows, 2)
		tv := rows[0]
		require.Equal(t, "orders", tv.Table)
		require.True(t, tv.Repair)
		require.Nil(t, tv.LastPK)
		require.Empty(t, tv.Examples)

		owner, err := store.TakeOver(ctx, "v", "-80")
		require.NoError(t, err)
		key := func(id int) *rowliftv1.Row {
			r := &rowliftv1.Row{}
			rowcodec.Pack(r, [][]byte{[]byte(fmt.Sprint(id))})
			return r
		}
		var examples []string
		for i := range state.MaxVerifyExamples + 5 {
			examples = append(examples, fmt.Sprintf("missing on target: (id=%d)", i))
		}
		save := func(owner, started int64, c state.VerifyChunk) error {
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			defer tx.Rollback() //nolint:errcheck // a no-op after Commit
			if err := state.SaveVerifyChunk(ctx, tx, "v", "-80", owner, "orders", started, c); err != nil {
				return err
			}
			return tx.Commit()
		}
		require.NoError(t, save(owner, tv.StartedAtUS, state.VerifyChunk{LastPK: key(500), Examples: examples, VerifyCounts: state.VerifyCounts{RowsCompared: 500, Missing: 25, Repaired: 25}}))
		require.NoError(t, save(owner, tv.StartedAtUS, state.VerifyChunk{Done: true, VerifyCounts: state.VerifyCounts{Extra: 1, Repaired: 1}, Examples: []string{"extra on target: (id=900)"}}))
		require.ErrorIs(t, save(owner+1, tv.StartedAtUS, state.VerifyChunk{VerifyCounts: state.VerifyCounts{RowsCompared: 7}}), state.ErrNotOwner)
		require.ErrorIs(t, save(owner, tv.StartedAtUS+1, state.VerifyChunk{VerifyCounts: state.VerifyCounts{RowsCompared: 7}}), state.ErrNotOwner, "a chunk of a replaced verify")

		rows, err = store.Verify(ctx, "v", "-80")
		require.NoError(t, err)
		got := rows[0]
		require.True(t, got.Done)
		require.NotZero(t, got.FinishedAtUS)
		require.EqualValues(t, 500, got.RowsCompared)
		require.EqualValues(t, [4]int64{25, 1, 0, 26}, [4]int64{got.Missing, got.Extra, got.Different, got.Repaired})
		require.Equal(t, examples[:state.MaxVerifyExamples], got.Examples, "the first keys, up to the cap")
		require.Equal(t, key(500).String(), got.LastPK.String(), "a chunk without rows keeps the last key")

		started, err = store.StartVerify(ctx, "v", false, false)
		require.NoError(t, err)
		require.False(t, started, "a running verify is left alone")
		started, err = store.StartVerify(ctx, "v", false, true)
		require.NoError(t, err)
		require.True(t, started, "restart replaces it")
		rows, err = store.Verify(ctx, "v", "")
		require.NoError(t, err)
		require.Len(t, rows, 4)
		for _, r := range rows {
			require.False(t, r.Done)
			require.Zero(t, r.RowsCompared)
			require.False(t, r.Repair)
		}

		require.NoError(t, store.DeleteWorkflow(ctx, "v"))
		rows, err = store.Verify(ctx, "v", "")
		require.NoError(t, err)
		require.Empty(t, rows, "delete removes the verify")
	})
}

// TestVerifyCancelAndFail: a cancel ends every running table of a verify as
// cancelled and keeps the finished ones, tells the applier to restart the
// streams that ran it (VerifyGenerations), and no chunk checked meanwhile
// makes it run again; a second cancel finds nothing. A failed table ends alone
// and keeps its outcome against a later cancel.
func TestVerifyCancelAndFail(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		store, db := openStore(t, flavor)
		ctx := context.Background()
		require.NoError(t, store.CreateWorkflow(ctx, spec("v"), "main"))
		_, err := store.StartVerify(ctx, "v", false, false)
		require.NoError(t, err)
		rows, err := store.Verify(ctx, "v", "-80")
		require.NoError(t, err)
		started := rows[0].StartedAtUS
		owner, err := store.TakeOver(ctx, "v", "-80")
		require.NoError(t, err)
		save := func(table string) error {
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			defer tx.Rollback() //nolint:errcheck // a no-op after Commit
			if err := state.SaveVerifyChunk(ctx, tx, "v", "-80", owner, table, started, state.VerifyChunk{Done: true,
				VerifyCounts: state.VerifyCounts{RowsCompared: 10}}); err != nil {
				return err
			}
			return tx.Commit()
		}
		require.NoError(t, save("orders"), "orders finishes before the cancel")
		require.NoError(t, store.FailVerify(ctx, "v", "80-", "orders", "table gone"))

		sources, err := store.CancelVerify(ctx, "v", "cancelled by a test")
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"-80", "80-"}, sources)
		gens, err := store.VerifyGenerations(ctx)
		require.NoError(t, err)
		for _, src := range []string{"-80", "80-"} {
			require.Equal(t, state.VerifyGeneration{Cancelled: started}, gens[[2]string{"v", src}], src)
		}
		require.ErrorIs(t, save("users"), state.ErrNotOwner, "a chunk checked after the cancel commits nothing")

		rows, err = store.Verify(ctx, "v", "")
		require.NoError(t, err)
		outcome := map[string]state.VerifyOutcome{}
		for _, r := range rows {
			require.True(t, r.Done, r.Source+" "+r.Table)
			outcome[r.Source+" "+r.Table] = r.Outcome
			if r.Outcome != "" {
				require.NotEmpty(t, r.Message)
			}
		}
		require.Equal(t, map[string]state.VerifyOutcome{"-80 orders": "", "-80 users": state.VerifyCancelled,
			"80- orders": state.VerifyFailed, "80- users": state.VerifyCancelled}, outcome)

		sources, err = store.CancelVerify(ctx, "v", "again")
		require.NoError(t, err)
		require.Empty(t, sources, "nothing runs: a no-op")
		started2, err := store.StartVerify(ctx, "v", false, false)
		require.NoError(t, err)
		require.True(t, started2, "a cancelled verify is not running: a new one starts")
	})
}
