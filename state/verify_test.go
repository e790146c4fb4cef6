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

// TestMergeVerifyKeys: the streams of a merge record the keys their chunks
// met; only once every source has verified a table does the last one read
// the keys no source holds (extra: every source found them foreign), those
// several sources hold, and those one source holds whose target row differs,
// and the table's keys are forgotten; a new verify starts from none.
func TestMergeVerifyKeys(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		store, db := openStore(t, flavor)
		ctx := context.Background()
		require.NoError(t, store.CreateWorkflow(ctx, spec("m"), "main"))
		_, err := store.StartVerify(ctx, "m", false, false)
		require.NoError(t, err)
		sources := []string{"-80", "80-"}
		key := func(id int) state.MergeKey {
			return state.MergeKey{Form: []byte{byte(id)}, Shown: fmt.Sprintf("(id=%d)", id)}
		}
		held := func(id int) state.MergeKey { k := key(id); k.Holder = true; return k }
		differs := func(id int) state.MergeKey { k := held(id); k.Differs = true; return k }
		foreign := func(id int) state.MergeKey { k := key(id); k.Foreign = true; return k }
		// finish records source i's last chunk of orders and says what the
		// end of the table's verify found, if it was the last source.
		finish := func(i int, keys ...state.MergeKey) (extra, several, different []string, last bool) {
			owner, err := store.TakeOver(ctx, "m", sources[i])
			require.NoError(t, err)
			rows, err := store.Verify(ctx, "m", sources[i])
			require.NoError(t, err)
			conn, err := db.Conn(ctx)
			require.NoError(t, err)
			defer conn.Close()
			_, err = conn.ExecContext(ctx, "START TRANSACTION")
			require.NoError(t, err)
			require.NoError(t, state.SaveMergeKeys(ctx, conn, "m", "orders", i, keys))
			extra, several, different, last, err = state.FinishMergeVerify(ctx, conn, "m", "orders", i, sources)
			require.NoError(t, err)
			require.NoError(t, state.SaveVerifyChunk(ctx, conn, "m", sources[i], owner, "orders", rows[0].StartedAtUS, state.VerifyChunk{Done: true}))
			_, err = conn.ExecContext(ctx, "COMMIT")
			require.NoError(t, err)
			return extra, several, different, last
		}
		// 1, 2: each held by one source; 3: no source's; 4: both sources';
		// 5: a's, its target row differs; 6: b's, foreign to a.
		_, _, _, last := finish(0, held(1), foreign(2), foreign(3), held(4), differs(5), foreign(6))
		require.False(t, last, "source 80- has not verified orders yet")
		extra, several, different, last := finish(1, foreign(1), held(2), foreign(3), differs(4), foreign(5), held(6))
		require.True(t, last)
		require.Equal(t, []string{"extra on target: (id=3)"}, extra)
		require.Equal(t, []string{"on several sources (-80, 80-): (id=4)"}, several)
		require.Equal(t, []string{"different: (id=5)"}, different)
		var n int
		require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM _rowlift.verify_key").Scan(&n))
		require.Zero(t, n, "the table's keys are forgotten")

		require.NoError(t, state.SaveMergeKeys(ctx, db, "m", "users", 0, []state.MergeKey{held(9)}))
		_, err = store.StartVerify(ctx, "m", false, true)
		require.NoError(t, err)
		require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM _rowlift.verify_key").Scan(&n))
		require.Zero(t, n, "a new verify starts from no keys")
	})
}

// TestVerifyRecheck: a chunk whose digests differed asks for its rows up
// to a key (or to the table's end), the stream reads that back, and the
// chunk that ends the recheck clears it; a verify that was replaced
// meanwhile takes no recheck.
func TestVerifyRecheck(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		store, db := openStore(t, flavor)
		ctx := context.Background()
		require.NoError(t, store.CreateWorkflow(ctx, spec("r"), "main"))
		_, err := store.StartVerify(ctx, "r", false, false)
		require.NoError(t, err)
		owner, err := store.TakeOver(ctx, "r", "-80")
		require.NoError(t, err)
		rows, err := store.Verify(ctx, "r", "-80")
		require.NoError(t, err)
		started := rows[0].StartedAtUS
		through := &rowliftv1.Row{}
		rowcodec.Pack(through, [][]byte{[]byte("700")})
		read := func() state.TableVerify {
			rows, err := store.Verify(ctx, "r", "-80")
			require.NoError(t, err)
			return rows[0]
		}

		require.NoError(t, state.SaveVerifyRecheck(ctx, db, "r", "-80", owner, "orders", started, through))
		got := read()
		require.True(t, got.Recheck)
		require.Equal(t, through.String(), got.RowsThrough.String())
		require.NoError(t, state.SaveVerifyChunk(ctx, db, "r", "-80", owner, "orders", started, state.VerifyChunk{LastPK: through, EndRecheck: true}))
		got = read()
		require.False(t, got.Recheck)
		require.Nil(t, got.RowsThrough)

		require.NoError(t, state.SaveVerifyRecheck(ctx, db, "r", "-80", owner, "orders", started, nil))
		got = read()
		require.True(t, got.Recheck, "up to the table's end")
		require.Nil(t, got.RowsThrough)
		require.ErrorIs(t, state.SaveVerifyRecheck(ctx, db, "r", "-80", owner, "orders", started+1, through), state.ErrNotOwner)
		require.ErrorIs(t, state.SaveVerifyRecheck(ctx, db, "r", "-80", owner+1, "orders", started, through), state.ErrNotOwner)
	})
}
