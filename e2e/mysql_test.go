package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/verify"
	"github.com/rowlift/rowlift/state"
)

// TestMySQLCompressedAndTaggedTransactions: a MySQL source that compresses its
// binlog transactions (TRANSACTION_PAYLOAD events) and writes tagged GTIDs
// (uuid:tag:n, MySQL 8.3+) is copied and followed exactly, through an applier
// killed and resumed from a position that holds tagged GTIDs.
func TestMySQLCompressedAndTaggedTransactions(t *testing.T) {
	e := newEnvWith(t, sandbox.Options{Flavor: sandbox.MySQL, Args: []string{"--binlog-transaction-compression=ON"}})
	e.sourceExec("CREATE DATABASE m", "CREATE TABLE m.t (id INT PRIMARY KEY, v VARCHAR(100), j JSON)",
		"INSERT INTO m.t WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 2000) "+
			"SELECT i, REPEAT('compressible ', 5), JSON_OBJECT('i', i, 'a', JSON_ARRAY(i, 1.5, 'x')) FROM s")
	e.startStreamer()
	e.startApplier()
	e.start(e.workflow("mysql", "m", "t"))
	e.waitState("mysql", state.Running, time.Minute)

	tagged := func(tag string, stmts ...string) {
		t.Helper()
		conn, err := e.srcDB.Conn(context.Background())
		require.NoError(t, err)
		defer conn.Close()
		_, err = conn.ExecContext(context.Background(), "SET gtid_next = 'AUTOMATIC:"+tag+"'")
		require.NoError(t, err)
		for _, q := range stmts {
			_, err := conn.ExecContext(context.Background(), q)
			require.NoError(t, err, q)
		}
	}
	tagged("rowlift_a", "UPDATE m.t SET v = 'tagged a', j = JSON_SET(j, '$.tag', 'a') WHERE id % 3 = 0",
		"INSERT INTO m.t VALUES (5000, 'tagged insert', '{\"z\": 1, \"a\": [true, null]}')")
	e.waitCaughtUp("mysql", time.Minute)
	streams, err := e.store.Streams(context.Background(), "mysql")
	require.NoError(t, err)
	require.Contains(t, streams[0].Position, ":rowlift_a:", "the applied position holds the tagged GTIDs")

	e.applier.kill()
	e.sourceExec("DELETE FROM m.t WHERE id % 7 = 0")
	tagged("rowlift_b", "UPDATE m.t SET j = JSON_REMOVE(j, '$.a') WHERE id % 5 = 0")
	e.applier.restart()
	e.waitCaughtUp("mysql", time.Minute)
	pos := position(t, e.srcDB)
	require.True(t, strings.Contains(pos, ":rowlift_b:"), "source position %s", pos)
	r, err := verify.Table(context.Background(), e.srcDB, e.dstDB, "m", "m", "t", verify.Options{})
	require.NoError(t, err)
	require.True(t, r.Identical(), r.String())
}
