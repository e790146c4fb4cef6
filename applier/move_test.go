package applier_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/applier"
	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
	"github.com/rowlift/rowlift/streamer/streamertest"
)

// servers starts a source and a target of flavor.
func servers(t *testing.T, flavor sandbox.Flavor) (src, dst *sandbox.Server) {
	src = sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
	dst = sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
	return src, dst
}

// readRows reads a table's rows as the copy reads them, by id; doc is
// decoded, since a MySQL target keeps JSON normalized.
func readRows(t *testing.T, db *sql.DB, table string) []string {
	rows, err := db.Query("SELECT id, note, amount, doc, HEX(bin) FROM shop." + table + " ORDER BY id")
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id, note, amount, doc, bin sql.NullString
		require.NoError(t, rows.Scan(&id, &note, &amount, &doc, &bin))
		var v any
		if doc.Valid {
			require.NoError(t, json.Unmarshal([]byte(doc.String), &v))
		}
		out = append(out, fmt.Sprintf("%v|%v|%v|%#v|%v", id, note, amount, v, bin))
	}
	require.NoError(t, rows.Err())
	return out
}

// TestMoveOntoEachTargetFlavor runs a workflow through the applier's engine
// onto a target of each flavor: the copy of a table of mixed types, then
// inserts, updates, key changes and deletes replayed while it runs, until the
// target has the source's rows, which a verify then finds equal.
func TestMoveOntoEachTargetFlavor(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		src, dst := servers(t, flavor)
		srcDB := sandboxtest.Open(t, src, "")
		sandboxtest.Exec(t, srcDB, "CREATE DATABASE shop CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci",
			"CREATE TABLE shop.orders (id BIGINT NOT NULL PRIMARY KEY, note VARCHAR(40), amount DECIMAL(12,2), doc JSON, bin VARBINARY(16))")
		for i := range 500 {
			sandboxtest.Exec(t, srcDB, fmt.Sprintf(`INSERT INTO shop.orders VALUES (%d, 'n%d é', %d.25, '{"i": %d, "tags": ["a", "b"], "x": 1.50}', X'00%02x')`,
				i, i, i, i, i%256))
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		dstPool, _, err := dbconn.Open(dst.DSN(""), dbconn.Target)
		require.NoError(t, err)
		t.Cleanup(func() { dstPool.Close() })
		store, err := state.Open(ctx, dstPool)
		require.NoError(t, err)
		spec := &rowliftv1.WorkflowSpec{Name: "move", SourceDatabase: "shop",
			Sources: []*rowliftv1.SourceShard{{Name: "main", StreamerAddress: streamertest.Serve(t, src)}},
			Targets: []*rowliftv1.TargetShard{{Name: "main"}},
			Tables:  []*rowliftv1.TableSpec{{Name: "orders"}},
			Options: &rowliftv1.WorkflowOptions{ChunkRows: 100}}
		require.NoError(t, store.CreateWorkflow(ctx, spec, "main"))
		require.NoError(t, store.SetState(ctx, "move", state.Copying, ""))

		engine, err := applier.New(applier.Config{TargetDSN: dst.DSN(""), PollInterval: 50 * time.Millisecond})
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- engine.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			<-done
		})

		sandboxtest.Exec(t, srcDB,
			`INSERT INTO shop.orders VALUES (1000, 'new', 1.00, '{"new": true}', NULL)`,
			`UPDATE shop.orders SET note = 'changed', doc = JSON_SET(doc, '$.i', 'x') WHERE id IN (3, 250, 499)`,
			"UPDATE shop.orders SET id = 2000 WHERE id = 7",
			"DELETE FROM shop.orders WHERE id IN (1, 300)",
			"UPDATE shop.orders SET doc = NULL, bin = X'FF' WHERE id = 1000")
		want := readRows(t, srcDB, "orders")
		dstDB := sandboxtest.Open(t, dst, "")
		// Not a speed limit: a target that never catches up fails here
		// rather than hanging the run.
		wait, stop := context.WithTimeout(ctx, 2*time.Minute)
		defer stop()
		var got []string
		for wait.Err() == nil {
			w, err := store.Workflow(ctx, "move")
			require.NoError(t, err)
			require.NotEqual(t, state.Error, w.State, w.Message)
			var n int
			if dstDB.QueryRow("SELECT COUNT(*) FROM shop.orders").Scan(&n) == nil && n == len(want) {
				if got = readRows(t, dstDB, "orders"); reflect.DeepEqual(want, got) {
					break
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		require.Equal(t, want, got)

		// A verify restarts the stream, which checks the tables it created
		// against the source's, then compares every row at exact points.
		started, err := store.StartVerify(ctx, "move", false, false)
		require.NoError(t, err)
		require.True(t, started)
		var verified []state.TableVerify
		for wait.Err() == nil {
			w, err := store.Workflow(ctx, "move")
			require.NoError(t, err)
			require.NotEqual(t, state.Error, w.State, w.Message)
			if verified, err = store.Verify(ctx, "move", ""); err == nil && len(verified) == 1 && verified[0].Done {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		require.Len(t, verified, 1)
		require.True(t, verified[0].Done, "the verify did not finish")
		require.EqualValues(t, len(want), verified[0].RowsCompared)
		require.Zero(t, verified[0].Missing+verified[0].Extra+verified[0].Different, "%v", verified[0].Examples)
	})
}
