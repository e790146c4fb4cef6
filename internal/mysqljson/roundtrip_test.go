package mysqljson

import (
	"context"
	"database/sql"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
)

// roundTripDocs are documents built by server functions with every type a
// typed value patches, where the type map must find each.
var roundTripDocs = []string{
	`JSON_OBJECT('dec', d, 'dt', dt, 'tm', tm, 'dtm', dtm, 'ts', ts, 'yr', yr, 'b9', b9, 'b64', b64, 'bl', bl, 'mb', mb, 'lb', lb,
	  'bn', bn, 'vb', vb, 'u', u, 'i', i, 'f', f, 'nest', JSON_ARRAY(d, JSON_OBJECT('deep', JSON_ARRAY(JSON_ARRAY(dt, u), tm)), i))`,
	`JSON_ARRAY(JSON_ARRAY(JSON_ARRAY(d)), JSON_OBJECT('k', JSON_OBJECT('k', ts)), JSON_ARRAY(), JSON_OBJECT(), NULL, TRUE, 'x')`,
	`JSON_OBJECT('a"b', dt, 'c\\d', d, 'é', tm, '', u, 'x y', 'plain')`,
	`CAST(d AS JSON)`, `CAST(dt AS JSON)`, `CAST(tm AS JSON)`, `CAST(dtm AS JSON)`, `CAST(ts AS JSON)`, `CAST(b9 AS JSON)`,
	`CAST(vb AS JSON)`, `CAST(u AS JSON)`, `CAST(i AS JSON)`, `CAST(f AS JSON)`,
	`JSON_ARRAY(-9223372036854775808, 9223372036854775807, CAST(18446744073709551615 AS UNSIGNED), CAST(0 AS UNSIGNED),
	  4294967295, 4294967296, CAST(4294967295 AS UNSIGNED), CAST(4294967296 AS UNSIGNED), -0e0, 1e300, 1.5e-7)`,
}

// TestTypeMapRoundTrip reads documents with their type maps as the copy does
// (SELECT of the text and of TypeMapExpr), writes the typed values with
// AppendSQL into another table, and requires every value's JSON type and
// value to be the source's at every path.
func TestTypeMapRoundTrip(t *testing.T) {
	srv := sandboxtest.Start(t, sandbox.Options{Flavor: sandbox.MySQL})
	db := sandboxtest.Open(t, srv, "")
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	exec := func(q string) {
		t.Helper()
		_, err := conn.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	exec("SET SESSION time_zone = '+00:00'")
	exec("SET SESSION group_concat_max_len = 1073741824")
	exec("CREATE DATABASE r")
	exec(`CREATE TABLE r.vals (id INT PRIMARY KEY, d DECIMAL(40,10), dt DATE, tm TIME(6), dtm DATETIME(6), ts TIMESTAMP(6) NULL, yr YEAR,
	  b9 BIT(9), b64 BIT(64), bl BLOB, mb MEDIUMBLOB, lb LONGBLOB, bn BINARY(3), vb VARBINARY(200), u BIGINT UNSIGNED, i BIGINT, f DOUBLE)`)
	exec(`INSERT INTO r.vals VALUES
	  (1, '-123456789012345678901234567890.1234567890', '0001-01-01', '-838:59:59', '1000-01-01 00:00:00', '1970-01-01 00:00:01', 1901,
	   b'0', b'0', '', X'00', X'FF', X'000102', '', 0, -9223372036854775808, -0e0),
	  (2, 0, '9999-12-31', '838:59:58.999999', '9999-12-31 23:59:59.999999', '2038-01-19 03:14:07.999999', 2155,
	   b'111111111', b'1111111111111111111111111111111111111111111111111111111111111111', REPEAT(X'AB', 100), 'm', 'l', 'abc',
	   REPEAT(X'FE', 200), 18446744073709551615, 9223372036854775807, 5e-324)`)
	exec("CREATE TABLE r.src (id INT PRIMARY KEY, j JSON)")
	exec("CREATE TABLE r.dst (id INT PRIMARY KEY, j JSON)")
	for i, doc := range roundTripDocs {
		exec("INSERT INTO r.src SELECT " + strconv.Itoa(100*(i+1)) + " + id, " + doc + " FROM r.vals")
	}

	// As the streamer and the applier do: every string unconverted.
	exec("SET NAMES binary")
	rows, err := conn.QueryContext(ctx, "SELECT id, j, "+TypeMapExpr("`j`")+" FROM r.src ORDER BY id")
	require.NoError(t, err)
	type doc struct {
		id    string
		typed []byte
	}
	var docs []doc
	var mapper TypeMapper
	patched := 0
	for rows.Next() {
		var id string
		var text, typeMap []byte
		require.NoError(t, rows.Scan(&id, &text, &typeMap))
		typed, err := mapper.AppendTypeMap(nil, text, typeMap)
		require.NoError(t, err, "document %s: %s with map %s", id, text, typeMap)
		if typeMap != nil {
			patched++
		}
		docs = append(docs, doc{id, typed})
	}
	require.NoError(t, rows.Err())
	require.NoError(t, rows.Close())
	require.Greater(t, patched, len(docs)/2, "most documents hold typed values")
	quote := func(dst, v []byte) []byte {
		dst = append(dst, '\'')
		for _, c := range v {
			if c == '\'' || c == '\\' {
				dst = append(dst, '\\')
			}
			dst = append(dst, c)
		}
		return append(dst, '\'')
	}
	for _, d := range docs {
		value, err := AppendSQL(nil, d.typed, quote)
		require.NoError(t, err, d.id)
		exec("INSERT INTO r.dst VALUES (" + d.id + ", " + string(value) + ")")
	}
	exec("SET NAMES utf8mb4")
	want, got := nodes(t, conn, "r.src"), nodes(t, conn, "r.dst")
	require.Len(t, got, len(want))
	for id, w := range want {
		assert.Equal(t, w, got[id], "document %s", id)
	}
	var same int
	require.NoError(t, conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM r.src JOIN r.dst USING (id) WHERE r.src.j = r.dst.j").Scan(&same))
	require.Equal(t, len(docs), same, "and each document is equal as JSON")
}

// nodes lists each document's type and text at every path, the document
// first, then each value the '$**' paths reach, with its type.
func nodes(t *testing.T, conn *sql.Conn, table string) map[string]string {
	t.Helper()
	rows, err := conn.QueryContext(context.Background(), `SELECT d.id, CONCAT(JSON_TYPE(d.j), ' ', CAST(d.j AS CHAR), '\n', IFNULL(
	  (SELECT GROUP_CONCAT(CONCAT(n.k, n.o, ' ', JSON_TYPE(n.v), ' ', CAST(n.v AS CHAR)) ORDER BY n.k, n.o SEPARATOR '\n') FROM (
	    SELECT 'm' AS k, o, v FROM JSON_TABLE(d.j, '$**.*' COLUMNS(o FOR ORDINALITY, v JSON PATH '$')) AS m
	    UNION ALL SELECT 'a', o, v FROM JSON_TABLE(d.j, '$**[*]' COLUMNS(o FOR ORDINALITY, v JSON PATH '$')) AS a) AS n), ''))
	  FROM `+table+` AS d ORDER BY d.id`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, list string
		require.NoError(t, rows.Scan(&id, &list))
		out[id] = list
	}
	require.NoError(t, rows.Err())
	return out
}
