package applier

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/metrics"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// TestDigestChecksLeaveNoSnapshotInThePool: when a chunk's digests differ
// while the next chunks' target snapshots wait in the queue, the check
// worker ends the stream and lets the queued snapshots go; their
// connections go back to the pool out of their read-only transactions, so
// every later write on the pool works (a connection returned inside START
// TRANSACTION ... READ ONLY refused the next takeover forever).
func TestDigestChecksLeaveNoSnapshotInThePool(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		ctx := context.Background()
		srv := sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
		sandboxtest.Exec(t, sandboxtest.Open(t, srv, ""), "CREATE DATABASE d")
		db, _, err := dbconn.Open(srv.DSN(""), dbconn.Target)
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		db.SetMaxIdleConns(20) // every released connection stays pooled
		store, err := state.Open(ctx, db)
		require.NoError(t, err)
		spec := &rowliftv1.WorkflowSpec{Name: "w", SourceDatabase: "d",
			Sources: []*rowliftv1.SourceShard{{Name: "main", StreamerAddress: "127.0.0.1:1"}},
			Targets: []*rowliftv1.TargetShard{{Name: "main"}}, Tables: []*rowliftv1.TableSpec{{Name: "hot"}}}
		require.NoError(t, store.CreateWorkflow(ctx, spec, "main"))
		_, err = store.StartVerify(ctx, "w", false, false)
		require.NoError(t, err)
		owner, err := store.TakeOver(ctx, "w", "main")
		require.NoError(t, err)
		tables, err := prepareTargets(ctx, db, spec, []*rowliftv1.TableFields{hotFields()}, nil, 1<<20, nil)
		require.NoError(t, err)
		seedHot(t, db, 20)
		stats := metrics.OpenApplyStream("w", "main", "main", []string{"hot"})
		t.Cleanup(stats.Close)
		play, err := newPlayer(db, "w", "main", "main", owner, tables, state.Resume{}, stats)
		require.NoError(t, err)
		verifies, err := store.Verify(ctx, "w", "main")
		require.NoError(t, err)
		var mu sync.Mutex
		var ended error
		v, err := newVerifier(ctx, db, play, tables["hot"], verifies[0], nil, nil, false, 1<<20,
			func(err error) { mu.Lock(); ended = err; mu.Unlock() }, zaptest.NewLogger(t))
		require.NoError(t, err)

		// The first check waits at its recheck's owner check (the stream
		// row, locked here) while two more chunks queue behind it.
		lock, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = lock.ExecContext(ctx, "SELECT owner FROM "+state.Schema+".stream WHERE workflow = 'w' FOR UPDATE")
		require.NoError(t, err)
		for i, last := range []int{10, 20, 30} {
			key := &rowliftv1.Row{}
			rowcodec.Pack(key, [][]byte{[]byte(fmt.Sprint(last))})
			wrong := &rowliftv1.VerifyDigest{Rows: int64(1000 + i), Sum: make([]byte, 8)}
			require.NoError(t, v.startDigest(ctx, &rowliftv1.Chunk{Table: "hot", Verify: true, Digest: wrong, LastPk: key}))
		}
		require.NoError(t, lock.Rollback())
		var recheck *verifyRecheck
		require.ErrorAs(t, v.wait(), &recheck, "the first chunk's digests differ")
		mu.Lock()
		require.ErrorAs(t, ended, &recheck, "the worker ended the stream with it")
		mu.Unlock()

		for i := range 40 {
			_, err := db.ExecContext(ctx, "UPDATE d.hot SET v = v + 1 WHERE id = ?", hotID)
			require.NoError(t, err, "write %d on the pool", i)
		}
		rows, err := store.Verify(ctx, "w", "main")
		require.NoError(t, err)
		require.True(t, rows[0].Recheck, "the first chunk's rows are to be compared")
	})
}
