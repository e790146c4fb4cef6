package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/verify"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// jsonValsDDL holds the typed SQL values the JSON documents are built from,
// as an application builds them: with JSON_OBJECT, JSON_ARRAY and CAST over
// its columns.
const jsonValsDDL = `CREATE TABLE j.vals (id INT PRIMARY KEY, d652 DECIMAL(65,30), d52 DECIMAL(5,2), d400 DECIMAL(40,10), d0 DECIMAL(20,0),
  dt DATE, tm TIME(6), dtm DATETIME(6), ts TIMESTAMP(6) NULL, yr YEAR, b1 BIT(1), b9 BIT(9), b64 BIT(64),
  mb MEDIUMBLOB, lb LONGBLOB, bl BLOB, bn BINARY(3), vb VARBINARY(100), u BIGINT UNSIGNED, i BIGINT, dbl DOUBLE)`

// jsonVals are the values: each type at its ends, zero, and in between.
var jsonVals = []string{
	`(1, '-99999999999999999999999999999999999.999999999999999999999999999999', -999.99, '12345678901234567890.1234567890', 0,
	  '0001-01-01', '-838:59:59', '1000-01-01 00:00:00', '1970-01-01 00:00:01', 1901, b'0', b'0', b'0',
	  '', '', '', X'000102', '', 0, -9223372036854775808, -0e0)`,
	`(2, '99999999999999999999999999999999999.999999999999999999999999999999', 999.99, '-0.0000000001', 99999999999999999999,
	  '9999-12-31', '838:59:59', '9999-12-31 23:59:59.999999', '2038-01-19 03:14:07.999999', 2155, b'1', b'111111111', b'1111111111111111111111111111111111111111111111111111111111111111',
	  X'00FF', REPEAT(X'01', 70), REPEAT('b', 100), 'abc', REPEAT(X'FE', 100), 18446744073709551615, 9223372036854775807, 1e300)`,
	`(3, '0.000000000000000000000000000001', 1.50, '6334551366.9108972709', -5,
	  '2020-01-02', '00:00:00.000001', '2020-01-02 03:04:05.123456', '2020-01-02 03:04:05.5', 2000, b'1', b'100000001', b'101',
	  'm', 'l', 'b', 'x\0y', 'v', 4294967295, 4294967296, 5e-324)`,
}

// jsonDocs are the documents, as SELECTs from j.vals and a sequence.
var jsonDocs = []string{
	// Every type as a member, nested in arrays and objects.
	`SELECT 100 + id, JSON_OBJECT('d652', d652, 'd52', d52, 'd400', d400, 'd0', d0, 'dt', dt, 'tm', tm, 'dtm', dtm, 'ts', ts, 'yr', yr,
	  'b1', b1, 'b9', b9, 'b64', b64, 'mb', mb, 'lb', lb, 'bl', bl, 'bn', bn, 'vb', vb, 'u', u, 'i', i, 'dbl', dbl,
	  'nest', JSON_ARRAY(d52, dt, JSON_OBJECT('deep', JSON_ARRAY(tm, dtm, ts, JSON_ARRAY(u, i))), 'str', 1.5e0)) FROM j.vals`,
	// Top-level scalars of each type.
	`SELECT 200 + id, CAST(d52 AS JSON) FROM j.vals`,
	`SELECT 210 + id, CAST(dt AS JSON) FROM j.vals`,
	`SELECT 220 + id, CAST(tm AS JSON) FROM j.vals`,
	`SELECT 230 + id, CAST(dtm AS JSON) FROM j.vals`,
	`SELECT 240 + id, CAST(ts AS JSON) FROM j.vals`,
	`SELECT 250 + id, CAST(b9 AS JSON) FROM j.vals`,
	`SELECT 260 + id, CAST(vb AS JSON) FROM j.vals`,
	`SELECT 270 + id, CAST(u AS JSON) FROM j.vals`,
	`SELECT 280 + id, CAST(i AS JSON) FROM j.vals`,
	`SELECT 290 + id, CAST(dbl AS JSON) FROM j.vals`,
	// Integers at both ends of int64 and uint64 and around 2^32, doubles
	// that print with an exponent, and keys that need escaping.
	`SELECT 300, JSON_ARRAY(-9223372036854775808, 9223372036854775807, CAST(18446744073709551615 AS UNSIGNED), CAST(0 AS UNSIGNED),
	  4294967295, 4294967296, CAST(4294967295 AS UNSIGNED), CAST(4294967296 AS UNSIGNED), -0e0, 1e300, 1.5e-7, 123456789012345680000e0, 0.1e0)`,
	`SELECT 301, JSON_OBJECT('a"b', DATE '2020-01-02', 'c\\d', CAST(1.5 AS DECIMAL(3,1)), 'é', TIME '01:02:03', '', CAST(7 AS UNSIGNED), 'x y', 'plain')`,
	// Large: an array of 20,000 elements and an object of 5,000 members,
	// with typed values among them.
	// (JSON_EXTRACT keeps each element's type, where a CASE of them would
	// make them all strings.)
	`SELECT 400, JSON_ARRAYAGG(JSON_EXTRACT(JSON_ARRAY(CAST(n / 7 AS DECIMAL(20,6)), n, DATE '2020-01-01' + INTERVAL n DAY, CONCAT('s', n),
	  CAST(n AS UNSIGNED), n * 1000000), CONCAT('$[', n % 6, ']'))) FROM (WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 20000) SELECT n FROM s) q`,
	`SELECT 401, JSON_OBJECTAGG(CONCAT('k', n), JSON_EXTRACT(JSON_ARRAY(CAST(n AS DECIMAL(10,2)), n * 1.5e0), CONCAT('$[', n % 2, ']')))
	  FROM (WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 5000) SELECT n FROM s) q`,
	// Documents whose text tells every type: no patch.
	`SELECT 500 + id, JSON_OBJECT('s', 'text', 'n', id, 'f', id * 1.5e0, 'a', JSON_ARRAY(TRUE, NULL)) FROM j.vals`,
}

// jsonUpdates change documents in place the ways applications do, with typed
// values, while the workflow replays.
var jsonUpdates = []string{
	`UPDATE j.docs SET j = JSON_SET(j, '$.d52', CAST(-1.25 AS DECIMAL(5,2)), '$.added', DATE '2024-02-29') WHERE id BETWEEN 101 AND 103`,
	`UPDATE j.docs SET j = JSON_REPLACE(j, '$.nest[0]', TIMESTAMP '2001-02-03 04:05:06.7', '$.u', CAST(3 AS UNSIGNED)) WHERE id IN (101, 102)`,
	`UPDATE j.docs SET j = JSON_REMOVE(j, '$.dt', '$.nest[2]') WHERE id = 103`,
	`UPDATE j.docs SET j = JSON_INSERT(j, '$.new', CAST(X'CAFE' AS JSON), '$.dt', TIME '10:00:00') WHERE id IN (102, 103)`,
	`UPDATE j.docs SET j = JSON_ARRAY_APPEND(j, '$', CAST(123.456 AS DECIMAL(6,3))) WHERE id = 400`,
	`UPDATE j.docs SET j = JSON_SET(j, '$.k2', DATE '1999-12-31') WHERE id = 401`,
	`INSERT INTO j.docs (id, j) SELECT 1000 + id, JSON_OBJECT('late', d400, 'when', dtm, 'blob', bn, 'bits', b64) FROM j.vals`,
	`DELETE FROM j.docs WHERE id = 301`,
}

// TestMySQLJSONKeepsTypes moves JSON documents built by server functions
// from MySQL to MySQL, by the copy and by replay (with an applier killed in
// the middle): every value keeps its JSON type and its value at every path,
// and verify, which compares JSON by type as well as text, is clean; a
// DECIMAL rewritten as a DOUBLE of the same text on the target, and a DATE
// as a STRING, are then reported.
func TestMySQLJSONKeepsTypes(t *testing.T) {
	testMySQLJSONKeepsTypes(t)
}

// TestMySQLJSONKeepsTypesPartialJSON is TestMySQLJSONKeepsTypes from a source
// that logs partial JSON updates (binlog_row_value_options=PARTIAL_JSON): the
// JSON_SET, JSON_REPLACE and JSON_REMOVE updates come as diffs, which replay
// applies to the before images' documents.
func TestMySQLJSONKeepsTypesPartialJSON(t *testing.T) {
	e := testMySQLJSONKeepsTypes(t, "--binlog-row-value-options=PARTIAL_JSON")
	types := map[string]int{}
	for _, l := range binaryLogs(t, e.srcDB) {
		events, err := e.srcDB.Query("SHOW BINLOG EVENTS IN '" + l + "'")
		require.NoError(t, err)
		for events.Next() {
			var logName, typ, info string
			var pos, serverID, end int64
			require.NoError(t, events.Scan(&logName, &pos, &typ, &serverID, &end, &info))
			types[typ]++
		}
		require.NoError(t, events.Err())
		require.NoError(t, events.Close())
	}
	require.NotZero(t, types["Update_rows_partial"], "the source logged partial updates: %v", types)
}

// testMySQLJSONKeepsTypes runs TestMySQLJSONKeepsTypes on MySQL servers
// started with args, returning its environment.
func testMySQLJSONKeepsTypes(t *testing.T, args ...string) *env {
	e := newEnvWith(t, sandbox.Options{Flavor: sandbox.MySQL, Args: args})
	fillJSON(t, e.srcDB)
	e.startStreamer()
	e.startApplier()
	spec := e.workflow("js", "j", "docs")
	spec.Options.ChunkRows = 7 // chunks with typed values and without
	e.start(spec)
	e.waitState("js", state.Running, 2*time.Minute)
	requireSameJSON(t, e.srcDB, e.dstDB, "j", "the copy")

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, q := range jsonUpdates[:4] {
			sandboxtest.Exec(t, e.srcDB, q)
			time.Sleep(100 * time.Millisecond)
		}
	}()
	e.applier.kill()
	wg.Wait()
	e.applier.restart()
	e.sourceExec(jsonUpdates[4:]...)
	e.waitCaughtUp("js", time.Minute)
	requireSameJSON(t, e.srcDB, e.dstDB, "j", "replay")

	res, err := verify.Table(context.Background(), e.srcDB, e.dstDB, "j", "j", "docs", verify.Options{})
	require.NoError(t, err)
	require.True(t, res.Identical(), res.String())
	c := e.newCLI()
	r := c.run("workflow", "verify", "js", "--wait", "--interval", "200ms")
	require.Zero(t, r.code, "the workflow's verify is clean: %s %s", r.stdout, r.stderr)

	// Same text, other type: verify must see it. (MySQL skips an update to a
	// value its JSON comparison calls equal, as a DOUBLE and a DECIMAL of one
	// value are: the DOUBLE goes in through another value.)
	sandboxtest.Exec(t, e.dstDB,
		"UPDATE j.docs SET j = JSON_SET(j, '$.d52', 'other') WHERE id = 103",
		"UPDATE j.docs SET j = JSON_SET(j, '$.d52', CAST(-1.25 AS DOUBLE)) WHERE id = 103",
		"UPDATE j.docs SET j = CAST(CAST(j AS CHAR) AS JSON) WHERE id = 213")
	var text [2]string
	for i, db := range []*sql.DB{e.srcDB, e.dstDB} {
		require.NoError(t, db.QueryRow("SELECT CONCAT(JSON_EXTRACT(j, '$.d52'), ' ', (SELECT j FROM j.docs WHERE id = 213)) FROM j.docs WHERE id = 103").Scan(&text[i]))
	}
	require.Equal(t, text[0], text[1], "the planted changes keep the text")
	res, err = verify.Table(context.Background(), e.srcDB, e.dstDB, "j", "j", "docs", verify.Options{})
	require.NoError(t, err)
	require.Equal(t, []string{"different: (id=103)", "different: (id=213)"}, res.Examples, res.String())
	r = c.run("workflow", "verify", "js", "--wait", "--interval", "200ms")
	var found []string
	for _, m := range verifyExample.FindAllStringSubmatch(r.stdout, -1) {
		found = append(found, m[1])
	}
	require.Equal(t, 1, r.code, "%s %s", r.stdout, r.stderr)
	require.Equal(t, []string{"different: (id=103)", "different: (id=213)"}, found, r.stdout)

	// Moving JSON as text into MySQL loses what MySQL could keep: a warning.
	_, ctl, _ := e.startCoordinator()
	spec = e.workflow("js-text", "j", "docs")
	spec.TargetDatabase, spec.Options.JsonAsText = "j_text", true
	w := call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) {
		return ctl.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: spec})
	})
	require.Len(t, w.GetWarnings(), 1)
	require.Contains(t, w.GetWarnings()[0], "target main is MySQL, which keeps JSON's types, and --json-as-text writes the documents' text")
	return e
}

// fillJSON creates j.vals and j.docs on a MySQL source and fills them.
func fillJSON(t *testing.T, db *sql.DB) {
	t.Helper()
	conn, err := db.Conn(context.Background())
	require.NoError(t, err)
	defer conn.Close()
	for _, q := range append([]string{"SET SESSION time_zone = '+00:00'", "CREATE DATABASE j", jsonValsDDL,
		"CREATE TABLE j.docs (id INT PRIMARY KEY, j JSON) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci", "INSERT INTO j.vals VALUES " + strings.Join(jsonVals, ", ")},
		prefixAll("INSERT INTO j.docs ", jsonDocs)...) {
		_, err := conn.ExecContext(context.Background(), q)
		require.NoError(t, err, q)
	}
}

func prefixAll(prefix string, qs []string) []string {
	out := make([]string, len(qs))
	for i, q := range qs {
		out[i] = prefix + q
	}
	return out
}

// jsonNodes selects, for every document of db.docs, the JSON type and value
// of every value in it, in the order the '$**' paths enumerate them: the
// document, then each object's members and each array's elements. Two
// documents with equal lists hold the same type and value at every path.
const jsonNodes = `SELECT d.id, JSON_TYPE(d.j), CAST(d.j AS CHAR), IFNULL(
  (SELECT GROUP_CONCAT(CONCAT(t.k, t.o, ' ', JSON_TYPE(t.v), ' ', LEFT(CAST(t.v AS CHAR), 200)) ORDER BY t.k, t.o SEPARATOR '\n') FROM (
    SELECT 'm' AS k, o, v FROM JSON_TABLE(d.j, '$**.*' COLUMNS(o FOR ORDINALITY, v JSON PATH '$')) AS m
    UNION ALL SELECT 'a', o, v FROM JSON_TABLE(d.j, '$**[*]' COLUMNS(o FOR ORDINALITY, v JSON PATH '$')) AS a) AS t), '')
  FROM %s.docs AS d ORDER BY d.id`

// requireSameJSON compares every document's type and value at every path
// on both sides.
func requireSameJSON(t *testing.T, src, dst *sql.DB, db, what string) {
	t.Helper()
	read := func(pool *sql.DB) map[int]string {
		ctx := context.Background()
		conn, err := pool.Conn(ctx)
		require.NoError(t, err)
		defer conn.Close()
		_, err = conn.ExecContext(ctx, "SET SESSION group_concat_max_len = 1073741824")
		require.NoError(t, err)
		rows, err := conn.QueryContext(ctx, fmt.Sprintf(jsonNodes, db))
		require.NoError(t, err)
		defer rows.Close()
		out := map[int]string{}
		for rows.Next() {
			var id int
			var typ, text, nodes string
			require.NoError(t, rows.Scan(&id, &typ, &text, &nodes))
			out[id] = typ + " " + text + "\n" + nodes
		}
		require.NoError(t, rows.Err())
		return out
	}
	want, got := read(src), read(dst)
	require.NotEmpty(t, want)
	for id, w := range want {
		assert.Equal(t, w, got[id], "%s: document %d", what, id)
	}
	assert.Equal(t, len(want), len(got), "%s: documents", what)
}

// TestMySQLJSONToMariaDB: MariaDB keeps JSON as text, so a MySQL JSON column
// bound for it is refused at creation, naming the column and the flag that
// accepts it, before anything is written; with json_as_text the documents
// move as the text MySQL prints, by the copy and by replay, and verify
// compares that text.
func TestMySQLJSONToMariaDB(t *testing.T) {
	e := newEnvOf(t, sandbox.Options{Flavor: sandbox.MySQL}, sandbox.Options{Flavor: sandbox.MariaDB})
	fillJSON(t, e.srcDB)
	e.startStreamer()
	e.startApplier()
	_, ctl, _ := e.startCoordinator()
	spec := e.workflow("js", "j", "docs")
	spec.Options.ChunkRows = 7
	_, err := callErr(func(ctx context.Context) (*rowliftv1.Workflow, error) {
		return ctl.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: spec})
	})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), "column docs.j is JSON on the MySQL source, and MariaDB keeps JSON as text")
	require.Contains(t, status.Convert(err).Message(), "--json-as-text")
	e.nothingWritten("js", "j")

	spec.Options.JsonAsText = true
	w := call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) {
		return ctl.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: spec})
	})
	require.Len(t, w.GetWarnings(), 1)
	require.Contains(t, w.GetWarnings()[0], "column docs.j is JSON on the MySQL source and moves as its text (--json-as-text)")
	call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) {
		return ctl.StartWorkflow(ctx, &rowliftv1.WorkflowRef{Name: "js"})
	})
	e.waitState("js", state.Running, 2*time.Minute)
	e.sourceExec(jsonUpdates...)
	e.waitCaughtUp("js", time.Minute)
	res, err := verify.Table(context.Background(), e.srcDB, e.dstDB, "j", "j", "docs", verify.Options{})
	require.NoError(t, err)
	require.True(t, res.Identical(), res.String())
	require.Positive(t, res.TargetRows)
}
