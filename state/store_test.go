package state_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// openStore opens the sidecar schema on a new target server of the flavor,
// through a pool with the applier's and the coordinator's session settings.
func openStore(t *testing.T, flavor sandbox.Flavor) (*state.Store, *sql.DB) {
	srv := sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
	db, _, err := dbconn.Open(srv.DSN(""), dbconn.Target)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	store, err := state.Open(context.Background(), db)
	require.NoError(t, err)
	return store, db
}

func spec(name string) *rowliftv1.WorkflowSpec {
	return &rowliftv1.WorkflowSpec{
		Name:           name,
		SourceDatabase: "shop",
		Sources:        []*rowliftv1.SourceShard{{Name: "-80", StreamerAddress: "a:1"}, {Name: "80-", StreamerAddress: "b:1"}},
		Targets:        []*rowliftv1.TargetShard{{Name: "main"}},
		Tables:         []*rowliftv1.TableSpec{{Name: "orders", Columns: []string{"id", "total"}}, {Name: "users"}},
		Options:        &rowliftv1.WorkflowOptions{ChunkRows: 500},
	}
}

func TestCreateAndReadWorkflow(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		store, _ := openStore(t, flavor)
		ctx := context.Background()
		require.NoError(t, store.CreateWorkflow(ctx, spec("move"), "main"))

		w, err := store.Workflow(ctx, "move")
		require.NoError(t, err)
		require.Equal(t, state.Init, w.State)
		require.Equal(t, []string{"id", "total"}, w.Spec.GetTables()[0].GetColumns())
		require.EqualValues(t, 500, w.Spec.GetOptions().GetChunkRows())
		require.False(t, w.CreatedAt.IsZero())

		cs, err := store.CopyState(ctx, "move", "")
		require.NoError(t, err)
		require.Len(t, cs, 4, "one copy_state row per source and table")
		streams, err := store.Streams(ctx, "move")
		require.NoError(t, err)
		require.Len(t, streams, 2)
	})
}

// reshardSpec splits two sources into three targets.
func reshardSpec(name string) *rowliftv1.WorkflowSpec {
	s := spec(name)
	s.Sources[0].KeyRange, s.Sources[1].KeyRange = "-80", "80-"
	s.Targets = []*rowliftv1.TargetShard{{Name: "a", KeyRange: "-55"}, {Name: "b", KeyRange: "55-aa"}, {Name: "c", KeyRange: "aa-"}}
	s.Tables[0].ShardingColumn = "id"
	s.Tables[1].Reference = true
	return s
}

// TestCreateReshardOnOneTarget: a target stores the streams it runs and whose
// target it is; the reference table comes from one source only.
func TestCreateReshardOnOneTarget(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		store, _ := openStore(t, flavor)
		ctx := context.Background()
		require.NoError(t, store.CreateWorkflow(ctx, reshardSpec("split"), "b"))
		w, err := store.Workflow(ctx, "split")
		require.NoError(t, err)
		require.Equal(t, "b", w.Target)
		streams, err := store.Streams(ctx, "split")
		require.NoError(t, err)
		require.Len(t, streams, 2, "55-aa overlaps both sources")
		cs, err := store.CopyState(ctx, "split", "")
		require.NoError(t, err)
		var got []string
		for _, c := range cs {
			got = append(got, c.Source+"/"+c.Table)
		}
		require.ElementsMatch(t, []string{"-80/orders", "-80/users", "80-/orders"}, got)
	})
}

func TestOpenIsIdempotent(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		store, db := openStore(t, flavor)
		require.NoError(t, store.CreateWorkflow(context.Background(), spec("keep"), "main"))
		again, err := state.Open(context.Background(), db)
		require.NoError(t, err)
		_, err = again.Workflow(context.Background(), "keep")
		require.NoError(t, err, "reopening the schema keeps existing workflows")
	})
}

func TestDuplicateWorkflowName(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		store, _ := openStore(t, flavor)
		ctx := context.Background()
		require.NoError(t, store.CreateWorkflow(ctx, spec("dup"), "main"))
		err := store.CreateWorkflow(ctx, spec("dup"), "main")
		require.ErrorIs(t, err, state.ErrExists)
		require.ErrorContains(t, err, `"dup" (delete it first or pick another name)`)
		cs, err := store.CopyState(ctx, "dup", "")
		require.NoError(t, err)
		require.Len(t, cs, 4, "a refused duplicate writes nothing")
	})
}

func TestInvalidWorkflows(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		store, _ := openStore(t, flavor)
		ctx := context.Background()
		bad := spec("has space")
		require.ErrorContains(t, store.CreateWorkflow(ctx, bad, "main"), "use 1 to 64 letters")
		noTables := spec("empty")
		noTables.Tables = nil
		require.ErrorContains(t, store.CreateWorkflow(ctx, noTables, "main"), "needs at least one source and one table")
		gap := spec("gap")
		gap.Targets[0].KeyRange = "-80"
		require.ErrorContains(t, store.CreateWorkflow(ctx, gap, "main"), "targets: key ranges leave 80- uncovered")
		stranger := reshardSpec("stranger")
		require.ErrorContains(t, store.CreateWorkflow(ctx, stranger, "main"), `has no target named "main"`)
		ws, err := store.Workflows(ctx)
		require.NoError(t, err)
		require.Empty(t, ws)
	})
}

func TestSetStateAndMissingWorkflow(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		store, _ := openStore(t, flavor)
		ctx := context.Background()
		require.NoError(t, store.CreateWorkflow(ctx, spec("s"), "main"))
		require.NoError(t, store.SetState(ctx, "s", state.Error, "table x has no key"))
		w, err := store.Workflow(ctx, "s")
		require.NoError(t, err)
		require.Equal(t, state.Error, w.State)
		require.Equal(t, "table x has no key", w.Message)

		require.ErrorIs(t, store.SetState(ctx, "nope", state.Copying, ""), state.ErrNotFound)
		_, err = store.Workflow(ctx, "nope")
		require.ErrorIs(t, err, state.ErrNotFound)
	})
}

// TestCopyProgressCommitsWithTheData checks that progress saved in a transaction
// that rolls back is gone with it, and kept when it commits.
func TestCopyProgressCommitsWithTheData(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		store, db := openStore(t, flavor)
		ctx := context.Background()
		require.NoError(t, store.CreateWorkflow(ctx, spec("p"), "main"))
		pk := &rowliftv1.Row{}
		rowcodec.Pack(pk, [][]byte{[]byte("42")})

		owner, err := store.TakeOver(ctx, "p", "-80")
		require.NoError(t, err)
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, state.SaveCopyProgress(ctx, tx, "p", "-80", owner, "orders", pk, 42, 4200, false))
		require.NoError(t, tx.Rollback())
		cs, err := store.CopyState(ctx, "p", "-80")
		require.NoError(t, err)
		require.Nil(t, cs[0].LastPK)
		require.Zero(t, cs[0].RowsCopied)
		require.Zero(t, cs[0].BytesCopied)

		tx, err = db.BeginTx(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, state.SaveCopyProgress(ctx, tx, "p", "-80", owner, "orders", pk, 42, 4200, false))
		require.NoError(t, state.SaveCopyProgress(ctx, tx, "p", "-80", owner, "orders", nil, 0, 0, true))
		require.NoError(t, tx.Commit())
		cs, err = store.CopyState(ctx, "p", "-80")
		require.NoError(t, err)
		require.Equal(t, "orders", cs[0].Table)
		require.Equal(t, "42", string(cs[0].LastPK.GetValues()), "an empty final chunk keeps the last PK")
		require.EqualValues(t, 42, cs[0].RowsCopied)
		require.EqualValues(t, 4200, cs[0].BytesCopied, "the bytes commit with the rows")
		require.True(t, cs[0].Done)

		done, err := store.CopyDone(ctx, "p")
		require.NoError(t, err)
		require.False(t, done, "three more tables are still copying")
	})
}

func TestDeleteWorkflowRemovesAllState(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		store, db := openStore(t, flavor)
		ctx := context.Background()
		require.NoError(t, store.CreateWorkflow(ctx, spec("d"), "main"))
		require.NoError(t, store.CreateWorkflow(ctx, spec("other"), "main"))
		require.NoError(t, store.DeleteWorkflow(ctx, "d"))
		for _, table := range []string{"workflow", "stream", "copy_state"} {
			col := "workflow"
			if table == "workflow" {
				col = "name"
			}
			var n int
			require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM _rowlift."+table+" WHERE "+col+" = 'd'").Scan(&n))
			require.Zero(t, n, table)
			require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM _rowlift."+table+" WHERE "+col+" = 'other'").Scan(&n))
			require.NotZero(t, n, "other workflows keep their %s rows", table)
		}
	})
}

// TestTakeOverFencesEarlierRuns: a new run of a stream waits for the commit of an
// earlier run's transaction that is already writing state (as a killed client's
// COMMIT the server still runs), sees its result, and every later write of the
// earlier run is refused.
func TestTakeOverFencesEarlierRuns(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		store, db := openStore(t, flavor)
		ctx := context.Background()
		require.NoError(t, store.CreateWorkflow(ctx, spec("f"), "main"))
		old, err := store.TakeOver(ctx, "f", "-80")
		require.NoError(t, err)

		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, state.SavePosition(ctx, tx, "f", "-80", old, "0-1-5", 0))
		taken := make(chan int64)
		go func() {
			owner, err := store.TakeOver(ctx, "f", "-80")
			require.NoError(t, err)
			taken <- owner
		}()
		select {
		case <-taken:
			t.Fatal("the takeover did not wait for the earlier run's transaction")
		case <-time.After(300 * time.Millisecond):
		}
		require.NoError(t, tx.Commit())
		owner := <-taken

		streams, err := store.Streams(ctx, "f")
		require.NoError(t, err)
		require.Equal(t, "0-1-5", streams[0].Position, "the new run reads what the earlier run committed")

		late, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		err = state.SavePosition(ctx, late, "f", "-80", old, "0-1-6", 0)
		require.ErrorIs(t, err, state.ErrNotOwner)
		require.NoError(t, late.Rollback())
		err = state.SaveCopyProgress(ctx, db, "f", "-80", old, "orders", nil, 1, 1, false)
		require.ErrorIs(t, err, state.ErrNotOwner)

		now, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, state.SavePosition(ctx, now, "f", "-80", owner, "0-1-6", 0))
		require.NoError(t, now.Commit())
	})
}

// TestLagIsCommitTimeMinusSourceTime: the stream's lag is the applier's commit
// time minus the source time of what it committed, and a position saved again
// unchanged is still accepted for its owner (no CLIENT_FOUND_ROWS here).
func TestLagIsCommitTimeMinusSourceTime(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		store, db := openStore(t, flavor)
		ctx := context.Background()
		require.NoError(t, store.CreateWorkflow(ctx, spec("lag"), "main"))
		owner, err := store.TakeOver(ctx, "lag", "-80")
		require.NoError(t, err)
		streams, err := store.Streams(ctx, "lag")
		require.NoError(t, err)
		require.Zero(t, streams[0].Lag(), "nothing applied yet")

		sourceTime := time.Now().Add(-5 * time.Second).UnixMicro()
		for range 2 {
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			require.NoError(t, state.SavePosition(ctx, tx, "lag", "-80", owner, "0-1-7", sourceTime))
			require.NoError(t, tx.Commit())
		}
		streams, err = store.Streams(ctx, "lag")
		require.NoError(t, err)
		require.GreaterOrEqual(t, streams[0].Lag(), 5*time.Second)
		require.GreaterOrEqual(t, streams[0].AppliedAtUS, sourceTime)
	})
}

// TestLeavingRunningFencesStreams: a move out of copying and running (a
// cutover's park, a stop, an error) refuses every later write of the runs
// still going, in the same transaction; a move back does not.
func TestLeavingRunningFencesStreams(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		store, db := openStore(t, flavor)
		ctx := context.Background()
		require.NoError(t, store.CreateWorkflow(ctx, spec("park"), "main"))
		require.NoError(t, store.SetState(ctx, "park", state.Running, ""))
		for _, to := range []state.State{state.Switched, state.Stopped, state.Error} {
			owner, err := store.TakeOver(ctx, "park", "-80")
			require.NoError(t, err)
			require.NoError(t, store.SetState(ctx, "park", state.Running, "resumed"))
			require.NoError(t, state.SaveCopyProgress(ctx, db, "park", "-80", owner, "orders", nil, 1, 1, false), "a move to running keeps the run")
			moved, err := store.Transition(ctx, "park", []state.State{state.Running}, to, "away")
			require.NoError(t, err)
			require.True(t, moved)
			err = state.SaveCopyProgress(ctx, db, "park", "-80", owner, "orders", nil, 2, 2, false)
			require.ErrorIs(t, err, state.ErrNotOwner, "after a move to %s", to)
		}
	})
}
