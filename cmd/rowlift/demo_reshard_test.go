package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/keyrange"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/vindex"
)

// TestCompareShards: the demo's shard comparison says identical: yes for
// shards that hold exactly the source rows of their ranges, and names a
// missing, a different and an extra row (one of another shard's range) on a
// shard that was changed by hand.
func TestCompareShards(t *testing.T) {
	ctx := context.Background()
	ranges, err := keyrange.Even(2)
	require.NoError(t, err)
	d := &demo{ranges: ranges}
	d.srcDB = sandboxtest.Open(t, sandboxtest.Start(t, sandbox.Options{}), "")
	require.NoError(t, fillDemo(ctx, d.srcDB, 500, nil))
	for i, r := range ranges {
		db := sandboxtest.Open(t, sandboxtest.Start(t, sandbox.Options{}), "")
		require.NoError(t, fillDemo(ctx, db, 500, nil))
		// Keep only the shard's range.
		for _, tbl := range demoTables {
			var ids []string
			rows, err := db.QueryContext(ctx, "SELECT id FROM demo."+tbl.name)
			require.NoError(t, err)
			for rows.Next() {
				var id []byte
				require.NoError(t, rows.Scan(&id))
				ksid, err := vindex.Hash.ID(id)
				require.NoError(t, err)
				if !r.Contains(ksid) {
					ids = append(ids, string(id))
				}
			}
			require.NoError(t, rows.Err())
			sandboxtest.Exec(t, db, "DELETE FROM demo."+tbl.name+" WHERE id IN ("+strings.Join(ids, ",")+")")
		}
		d.targets = append(d.targets, demoTarget{name: fmt.Sprintf("shard%d", i+1), keyRange: r, db: db})
	}
	lines, identical, err := d.compareShards(ctx)
	require.NoError(t, err)
	require.True(t, identical, "%s", strings.Join(lines, "\n"))
	require.Len(t, lines, 2)
	for _, l := range lines {
		require.True(t, strings.HasSuffix(l, "identical: yes"), l)
	}

	// Break shard1: drop one of its rows, change another, and give it one of shard2's.
	// mine is the first id of the shard's range, other the first of another's.
	owned := func(shard int) (mine, other string) {
		rows, err := d.srcDB.QueryContext(ctx, "SELECT id FROM demo.events ORDER BY id")
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() && (mine == "" || other == "") {
			var id []byte
			require.NoError(t, rows.Scan(&id))
			ksid, err := vindex.Hash.ID(id)
			require.NoError(t, err)
			if ranges[shard].Contains(ksid) && mine == "" {
				mine = string(id)
			} else if !ranges[shard].Contains(ksid) && other == "" {
				other = string(id)
			}
		}
		return mine, other
	}
	mine, other := owned(0)
	var changed string
	require.NoError(t, d.targets[0].db.QueryRowContext(ctx, "SELECT MAX(id) FROM demo.events").Scan(&changed))
	sandboxtest.Exec(t, d.targets[0].db,
		"DELETE FROM demo.events WHERE id = "+mine,
		"UPDATE demo.events SET amount = amount + 1 WHERE id = "+changed,
		"INSERT INTO demo.events (id, user_id, kind, created_at) VALUES ("+other+", 1, 'view', NOW())")
	lines, identical, err = d.compareShards(ctx)
	require.NoError(t, err)
	require.False(t, identical)
	require.Contains(t, lines[0], "3 differences, first: ")
	for _, want := range []string{"events id=" + mine + " missing", "events id=" + changed + " different", "events id=" + other + " extra"} {
		require.Contains(t, lines[0], want)
	}
	require.True(t, strings.HasSuffix(lines[0], "identical: no"), lines[0])
	require.True(t, strings.HasSuffix(lines[1], "identical: yes"), lines[1])
}
