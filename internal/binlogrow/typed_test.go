package binlogrow

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/mysqljson"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/schema"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// typedDocs are MySQL JSON documents built by server functions from values of
// every type, as SQL expressions over binlogrow.src (one row of typedSrcDDL).
var typedDocs = []struct{ what, sql string }{
	{"decimals", "JSON_ARRAY(CAST(1.50 AS DECIMAL(5,2)), CAST(0 AS DECIMAL(4,2)), CAST(-0.5 AS DECIMAL(4,2)), " +
		"CAST(123 AS DECIMAL(65,30)), CAST(-99999999999999999999999999999999999.999999999999999999999999999999 AS DECIMAL(65,30)), " +
		"CAST(0.001 AS DECIMAL(10,3)), CAST(5 AS DECIMAL(3,0)), CAST(-1234567890123456789 AS DECIMAL(30,1)), " +
		"CAST(1000000000000000 AS DECIMAL(20,1)), CAST(0.000000001 AS DECIMAL(18,9)), CAST(-123456789.123456789 AS DECIMAL(18,9)), " +
		"CAST(12345678901 AS DECIMAL(11,0)), CAST(-0.00 AS DECIMAL(4,2)), d65, d52, d100)"},
	{"temporals", "JSON_ARRAY(dt, tm, dtm, ts, yr, CAST('-838:59:59' AS TIME), CAST('838:59:59' AS TIME(6)), CAST('-838:59:58.999999' AS TIME(6)), " +
		"CAST('-00:00:00.5' AS TIME(1)), CAST('-01:00:00' AS TIME), CAST('100:00:00' AS TIME), CAST('2020-01-02 03:04:05.123' AS DATETIME(6)), " +
		"CAST('1000-01-01' AS DATE), CAST('9999-12-31 23:59:59.999999' AS DATETIME(6)), CAST('2020-01-02' AS DATETIME))"},
	{"BITs", "JSON_ARRAY(bit1, bit8, bit17, bit33, bit64, bit64z)"},
	{"binary strings", "JSON_OBJECT('bl', bl, 'tb', tb, 'mb', mb, 'lb', lb, 'bn', bn, 'vb', vb, 'long', CAST(REPEAT('x', 200) AS BINARY), " +
		"'57', CAST(REPEAT('y', 57) AS BINARY), '58', CAST(REPEAT('z', 58) AS BINARY), 'empty', CAST('' AS BINARY))"},
	{"integers", "JSON_ARRAY(-9223372036854775808, 9223372036854775807, 18446744073709551615, 4294967295, 4294967296, " +
		"CAST(4294967295 AS UNSIGNED), CAST(4294967296 AS UNSIGNED), CAST(5 AS UNSIGNED), CAST(0 AS UNSIGNED), 0, -1, " +
		"-32768, 32767, 65535, 65536, -2147483648, 2147483647, CAST(65535 AS UNSIGNED), CAST(9223372036854775807 AS UNSIGNED))"},
	{"integers as text", `'[-9223372036854775808, 9223372036854775807, 18446744073709551615, 4294967295, 4294967296, 0, -1]'`},
	{"doubles", "JSON_ARRAY(-0e0, 0e0, 1e300, -1e300, 5e-324, 1.7976931348623157e308, 1e15, 1e16, 1.5e-7, 0.1e0, 1e-15, 1e-16, " +
		"123456789012345678e0, 1.2345678901234567e-16, 3e0, d)"},
	{"nested", "JSON_OBJECT('a', JSON_ARRAY(1, JSON_OBJECT('b', CAST(1.5 AS DECIMAL(3,1)), 'c', JSON_ARRAY(dt, JSON_ARRAY(JSON_ARRAY(tm))))), " +
		"'e', JSON_OBJECT(), 'f', JSON_ARRAY(), 'g', JSON_OBJECT('h', JSON_OBJECT('i', CAST(7 AS UNSIGNED))))"},
	{"keys that need escaping", "JSON_OBJECT('q\"', CAST(1 AS UNSIGNED), 'back\\\\', CAST(2.0 AS DECIMAL(2,1)), 'nl\\n', dt, 'é😀', bit1, " +
		"'', CAST(3 AS UNSIGNED), 'tab\\t', 4, CONCAT('ctl', CHAR(1 USING utf8mb4)), CAST(5 AS UNSIGNED), '$', tm, 'a.b', 6, '[0]', CAST(7 AS UNSIGNED))"},
	// Elements of six types in turn: JSON_EXTRACT keeps their types (a CASE
	// of them would make them strings).
	{"array of 20,000 elements", "(SELECT JSON_ARRAYAGG(JSON_EXTRACT(JSON_ARRAY(CAST(n / 7 AS DECIMAL(20,5)), n, CAST(n AS UNSIGNED), " +
		"n / 3e0, CONCAT('s', n), DATE_ADD(dt, INTERVAL n DAY)), CONCAT('$[', n % 6, ']'))) FROM binlogrow.nums)"},
	// Every branch is JSON: CASE would make values of other types strings.
	{"object of 5,000 keys", "(SELECT JSON_OBJECTAGG(CONCAT('key', n), CASE n % 4 WHEN 0 THEN CAST(CAST(n AS DECIMAL(10,2)) AS JSON) " +
		"WHEN 1 THEN JSON_ARRAY(n, CAST(n AS UNSIGNED)) WHEN 2 THEN CAST(n * 1000000000 AS JSON) ELSE CAST('null' AS JSON) END) " +
		"FROM binlogrow.nums WHERE n < 5000)"},
	{"top-level DECIMAL", "CAST(CAST(-1.50 AS DECIMAL(3,2)) AS JSON)"},
	{"top-level DATE", "CAST(dt AS JSON)"},
	{"top-level TIME", "CAST(tm AS JSON)"},
	{"top-level DATETIME", "CAST(dtm AS JSON)"},
	{"top-level TIMESTAMP", "CAST(ts AS JSON)"},
	{"top-level YEAR", "CAST(yr AS JSON)"},
	{"top-level BIT", "CAST(bit17 AS JSON)"},
	{"top-level BLOB", "CAST(lb AS JSON)"},
	{"top-level UNSIGNED INTEGER", "CAST(CAST(5 AS UNSIGNED) AS JSON)"},
	{"top-level large INTEGER", "CAST(4294967296 AS JSON)"},
	{"top-level INTEGER", "CAST(-5 AS JSON)"},
	{"top-level DOUBLE", "CAST(-0e0 AS JSON)"},
	{"top-level string", `'"s\\u0001"'`},
	{"top-level null", "'null'"},
	{"top-level boolean", "'true'"},
	// Targets of partial updates, one for each (an image is checked against
	// the document before and after all updates).
	{"partial: DECIMAL replaced by a DATE", partialDoc},
	{"partial: several diffs, members inserted in the middle, nested", partialDoc},
	{"partial: array elements removed", partialDoc},
	{"partial: array elements inserted", partialDoc},
	{"partial: keys needing quotes", partialDoc},
	{"partial: array insert", partialDoc},
	{"partial: second column", partialDoc},
}

// partialDoc is a document MySQL can update partially: large enough that a
// diff is smaller, with scalars of types the text does not tell.
const partialDoc = "JSON_OBJECT('dec', CAST(1.50 AS DECIMAL(5,2)), 'arr', JSON_ARRAY(1, CAST(2 AS UNSIGNED), dt, 'four', " +
	"CAST(5.5 AS DECIMAL(3,1))), 'nest', JSON_OBJECT('deep', JSON_ARRAY(JSON_OBJECT('x', tm))), 'a b', 'quoted key', " +
	"'zzzz', REPEAT('long enough to be worth a diff ', 8))"

// partialUpdates are updates MySQL logs as diffs under
// binlog_row_value_options=PARTIAL_JSON (and as whole documents without it),
// each of the typedDocs document it names.
var partialUpdates = []struct{ what, set string }{
	{"partial: DECIMAL replaced by a DATE", `js = JSON_SET(js, '$.dec', CAST('2022-02-02' AS DATE))`},
	{"partial: several diffs, members inserted in the middle, nested", `js = JSON_SET(js, '$.bbb', CAST(3 AS UNSIGNED), ` +
		`'$.mm', CAST(9.75 AS DECIMAL(3,2)), '$.arr[1]', 'was unsigned', '$.nest.deep[0].y', CAST('2020-01-02 03:04:05' AS DATETIME), ` +
		`'$.nest.deep[0].x', 4294967296)`},
	{"partial: array elements removed", `js = JSON_REMOVE(js, '$.arr[0]', '$.arr[last]', '$.nest.deep[0]')`},
	{"partial: array elements inserted", `js = JSON_SET(js, '$.arr[10]', CAST(7 AS UNSIGNED), '$.arr[last]', CAST(0.5 AS DECIMAL(2,1)))`},
	{"partial: keys needing quotes", `js = JSON_SET(js, '$."a b"', CAST(1 AS UNSIGNED), '$."q\\"k"', CAST(2.5 AS DECIMAL(2,1)), ` +
		`'$."é 😀"', 'new', '$."a.b"', CAST('10:11:12' AS TIME))`},
	{"partial: array insert", `js = JSON_ARRAY_INSERT(js, '$.arr[1]', CAST(8 AS UNSIGNED))`},
	{"partial: second column", `js2 = JSON_REPLACE(js2, '$.k', CAST('2023-03-03' AS DATE)), js = JSON_ARRAY(1)`},
}

// typedSrcDDL is a table of a column of each type typedDocs build JSON of.
const typedSrcDDL = `CREATE TABLE binlogrow.src (
  d65 DECIMAL(65,30), d52 DECIMAL(5,2), d100 DECIMAL(10,0), d DOUBLE,
  dt DATE, tm TIME(6), dtm DATETIME(6), ts TIMESTAMP(6) NULL, yr YEAR,
  bit1 BIT(1), bit8 BIT(8), bit17 BIT(17), bit33 BIT(33), bit64 BIT(64), bit64z BIT(64),
  bl BLOB, tb TINYBLOB, mb MEDIUMBLOB, lb LONGBLOB, bn BINARY(5), vb VARBINARY(100))`

const typedSrcRow = `INSERT INTO binlogrow.src VALUES (
  12345678901234567890123456789012345.123456789012345678901234567890, -999.99, -9999999999, -1.5e-300,
  '2024-02-29', '-12:34:56.789012', '1999-12-31 23:59:59.5', '2038-01-19 03:14:07.999999', 2155,
  b'1', b'10100101', b'10000000000000001', b'100000000000000000000000000000001', X'FFFFFFFFFFFFFFFF', X'0000000000000001',
  X'00FF0102', X'', REPEAT(X'C3', 100), REPEAT('abc', 30), X'0102', X'00')`

// TestConvertTypedJSON converts the binlog images of MySQL JSON documents
// holding scalars of every type, inserted and then updated in several ways,
// and requires of each typed value that its text be SELECT's text of the
// column, and its patches be exactly the scalars whose type the text does not
// reproduce: at every scalar path, the source value's JSON_TYPE is that of
// the text's (CAST(text AS JSON)), unless a patch is there, whose type is the
// source's and whose value is the scalar as JSON_UNQUOTE prints it.
func TestConvertTypedJSON(t *testing.T) {
	diffs, unchanged := testConvertTypedJSON(t)
	require.Zero(t, diffs+unchanged, "without PARTIAL_JSON no JSON value is a diff vector")
}

// TestConvertTypedJSONPartial is TestConvertTypedJSON on a source logging
// partial JSON updates (binlog_row_value_options=PARTIAL_JSON): the diffs
// applied to the before images' documents give the after images'.
func TestConvertTypedJSONPartial(t *testing.T) {
	diffs, unchanged := testConvertTypedJSON(t, "--binlog-row-value-options=PARTIAL_JSON")
	require.GreaterOrEqual(t, diffs, len(partialUpdates)-1, "the partial updates but JSON_ARRAY_INSERT are logged as diffs")
	require.NotZero(t, unchanged, "a JSON column an update leaves alone is an empty diff vector")
}

// testConvertTypedJSON runs TestConvertTypedJSON on a server started with
// args, returning how many JSON values of after images were diff vectors, and
// how many of them empty.
func testConvertTypedJSON(t *testing.T, args ...string) (diffs, unchanged int) {
	ctx := context.Background()
	srv := sandboxtest.Start(t, sandbox.Options{Flavor: sandbox.MySQL, Args: append([]string{"--default-time-zone=" + serverZone}, args...)})
	db := sandboxtest.Open(t, srv, "")
	db.SetMaxOpenConns(1) // one session, in +05:30
	sandboxtest.Exec(t, db, "SET SESSION cte_max_recursion_depth = 20000", "CREATE DATABASE binlogrow", typedSrcDDL, typedSrcRow,
		"CREATE TABLE binlogrow.nums (n INT PRIMARY KEY)",
		"INSERT INTO binlogrow.nums WITH RECURSIVE c (n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM c WHERE n < 19999) "+
			"SELECT n FROM c",
		"CREATE TABLE binlogrow.j (id INT PRIMARY KEY, js JSON, js2 JSON)")
	// js2 is NULL in every other row, not in the second column's test.
	for i, d := range typedDocs {
		js2 := "NULL"
		if i%2 == 0 || d.what == "partial: second column" {
			js2 = "JSON_OBJECT('k', CAST(1.5 AS DECIMAL(2,1)), 'pad', REPEAT('long enough to be worth a diff ', 4))"
		}
		sandboxtest.Exec(t, db, fmt.Sprintf("INSERT INTO binlogrow.j SELECT %d, %s, %s FROM binlogrow.src", i, d.sql, js2))
	}
	var rowImage, valueOptions string
	require.NoError(t, db.QueryRow("SELECT @@binlog_row_image, @@binlog_row_value_options").Scan(&rowImage, &valueOptions))
	require.Equal(t, "FULL", rowImage)
	t.Logf("binlog_row_value_options=%q", valueOptions)
	// snap1 and snap2 hold the documents after the inserts and after the
	// updates (CREATE ... SELECT copies JSON with its types).
	sandboxtest.Exec(t, db, "CREATE TABLE binlogrow.snap1 AS SELECT * FROM binlogrow.j")
	doc := func(what string) int {
		for i, d := range typedDocs {
			if d.what == what {
				return i
			}
		}
		t.Fatalf("no document %q", what)
		return 0
	}
	sandboxtest.Exec(t, db,
		fmt.Sprintf(`UPDATE binlogrow.j SET js = JSON_SET(js, '$.a[1].b', CAST(2.25 AS DECIMAL(4,2)), '$.new', CAST('2021-01-01' AS DATE), `+
			`'$.e.x', CAST(9 AS UNSIGNED)) WHERE id = %d`, doc("nested")),
		fmt.Sprintf(`UPDATE binlogrow.j SET js = JSON_REPLACE(js, '$[0]', 1, '$[7]', CAST(1 AS DECIMAL(1,0)), '$[19999]', `+
			`(SELECT tm FROM binlogrow.src)) WHERE id = %d`, doc("array of 20,000 elements")),
		fmt.Sprintf(`UPDATE binlogrow.j SET js = JSON_REMOVE(js, '$.key1', '$.key4') WHERE id = %d`, doc("object of 5,000 keys")),
		fmt.Sprintf(`UPDATE binlogrow.j SET js = JSON_INSERT(js, '$[100]', CAST(4294967296 AS UNSIGNED), '$[0]', 'kept') WHERE id = %d`,
			doc("integers")),
		fmt.Sprintf(`UPDATE binlogrow.j SET js = JSON_SET(js, '$[0]', CAST(-7.125 AS DECIMAL(10,3)), '$[1]', 'shorter') WHERE id = %d`,
			doc("decimals")),
		fmt.Sprintf(`UPDATE binlogrow.j j JOIN binlogrow.src s SET j.js = JSON_ARRAY(s.bl, s.bit33, j.js) WHERE j.id = %d`, doc("top-level DATE")))
	for _, u := range partialUpdates {
		sandboxtest.Exec(t, db, fmt.Sprintf("UPDATE binlogrow.j SET %s WHERE id = %d", u.set, doc(u.what)))
	}
	sandboxtest.Exec(t, db, "CREATE TABLE binlogrow.snap2 AS SELECT * FROM binlogrow.j",
		"CREATE TABLE binlogrow.done (id INT PRIMARY KEY)", "INSERT INTO binlogrow.done VALUES (1)")

	tbl, err := schema.Load(ctx, db, "binlogrow", "j")
	require.NoError(t, err)
	cols, err := tbl.Streamed(nil)
	require.NoError(t, err)
	images := readImages(t, srv, "j", "done")
	counts := map[string]int{}
	row := &rowliftv1.Row{}
	for _, im := range images {
		counts[im.kind]++
		for _, v := range im.values {
			if p, ok := v.(partialJSON); ok && len(p.diffs) > 0 {
				diffs++
			} else if ok {
				unchanged++
			}
		}
		conv, err := NewConverter(im.table, cols)
		require.NoError(t, err)
		require.NoError(t, conv.Convert(row, im.values))
		vals, err := rowcodec.Values(nil, row)
		require.NoError(t, err)
		id, err := strconv.Atoi(string(vals[0]))
		require.NoError(t, err)
		snap := "binlogrow.snap1"
		if im.state == updated {
			snap = "binlogrow.snap2"
		}
		for c, col := range []string{"js", "js2"} {
			what := fmt.Sprintf("%s image of %s, %s", im.kind, typedDocs[id].what, col)
			if vals[1+c] == nil {
				var null bool
				require.NoError(t, db.QueryRow("SELECT "+col+" IS NULL FROM "+snap+" WHERE id = ?", id).Scan(&null))
				require.True(t, null, "%s: NULL, the SELECT's is not", what)
				continue
			}
			checkTyped(t, db, what, snap, col, id, vals[1+c])
		}
	}
	updates := 6 + len(partialUpdates)
	require.Equal(t, map[string]int{"insert": len(typedDocs), "update before": updates, "update after": updates}, counts)
	return diffs, unchanged
}

// checkTyped checks the typed value v of the document with the given id in
// table snap (see TestConvertTypedJSON).
func checkTyped(t *testing.T, db *sql.DB, what, snap, col string, id int, v []byte) {
	t.Helper()
	text, encoded := mysqljson.Split(v)
	var selected string
	require.NoError(t, db.QueryRow("SELECT "+col+" FROM "+snap+" WHERE id = ?", id).Scan(&selected))
	require.Equal(t, show([]byte(selected)), show(text), "%s: text differs from SELECT's", what)
	// The copy reads the same typed value, from the text and its type map.
	var typeMap []byte
	require.NoError(t, db.QueryRow("SELECT "+mysqljson.TypeMapExpr("`"+col+"`")+" FROM "+snap+" WHERE id = ?", id).Scan(&typeMap))
	copied, err := new(mysqljson.TypeMapper).AppendTypeMap(nil, []byte(selected), typeMap)
	require.NoError(t, err, what)
	require.Equal(t, show(v), show(copied), "%s: the copy's typed value differs from replay's", what)
	type patch struct{ typ, value string }
	patches := map[string]patch{}
	var order []string
	require.NoError(t, mysqljson.Patches(encoded, func(p mysqljson.Patch) error {
		patches[string(p.Path)] = patch{p.Type.String(), string(p.Value)}
		order = append(order, string(p.Path))
		return nil
	}))
	paths, err := scalarPaths(text)
	require.NoError(t, err, what)
	sandboxtest.Exec(t, db, "DROP TABLE IF EXISTS binlogrow.text", "CREATE TABLE binlogrow.text (js JSON)")
	_, err = db.Exec("INSERT INTO binlogrow.text VALUES (CAST(? AS JSON))", text)
	require.NoError(t, err)
	var patched []string
	var diffs []string
	// The types and values at up to 500 paths a query.
	for len(paths) > 0 {
		batch := paths[:min(500, len(paths))]
		paths = paths[len(batch):]
		var list []string
		var args []any
		for _, p := range batch {
			list = append(list, "JSON_TYPE(JSON_EXTRACT(s."+col+", ?)), JSON_TYPE(JSON_EXTRACT(t.js, ?)), JSON_UNQUOTE(JSON_EXTRACT(s."+col+", ?))")
			args = append(args, p, p, p)
		}
		var out string
		require.NoError(t, db.QueryRow("SELECT JSON_ARRAY("+strings.Join(list, ", ")+") FROM "+snap+" s, binlogrow.text t WHERE s.id = ?",
			append(args, id)...).Scan(&out))
		var got []*string
		require.NoError(t, json.Unmarshal([]byte(out), &got))
		require.Len(t, got, 3*len(batch))
		for i, p := range batch {
			source, fromText, printed := got[3*i], got[3*i+1], got[3*i+2]
			require.NotNil(t, source, "%s: no value at %s", what, p)
			require.NotNil(t, fromText, "%s: no value at %s of the text", what, p)
			pt, ok := patches[p]
			switch {
			case ok:
				patched = append(patched, p)
				if pt.typ != *source || pt.value != *printed || *source == *fromText {
					diffs = append(diffs, fmt.Sprintf("%s: patch %s %q, source %s %q, text %s", p, pt.typ, pt.value, *source, *printed, *fromText))
				}
			case *source != *fromText:
				diffs = append(diffs, fmt.Sprintf("%s: no patch, source %s %q, text %s", p, *source, *printed, *fromText))
			}
		}
	}
	require.Empty(t, diffs, "%s: patches differ from the source's types", what)
	require.Equal(t, order, patched, "%s: every patch is at a scalar, in text order", what)
}

// scalarPaths returns the path of every scalar in JSON text, in text order,
// as the patches write paths.
func scalarPaths(text []byte) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	type level struct {
		object bool
		key    string
		index  int
		path   []byte
	}
	var open []level
	var paths []string
	path := func() []byte {
		if len(open) == 0 {
			return []byte("$")
		}
		top := &open[len(open)-1]
		if top.object {
			return mysqljson.AppendMemberPath(bytes.Clone(top.path), top.key)
		}
		return mysqljson.AppendIndexPath(bytes.Clone(top.path), top.index)
	}
	expectKey := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return paths, nil
		}
		if err != nil {
			return nil, err
		}
		if expectKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				open = open[:len(open)-1]
				expectKey = len(open) > 0 && open[len(open)-1].object
				if len(open) > 0 && !open[len(open)-1].object {
					open[len(open)-1].index++
				}
				continue
			}
			open[len(open)-1].key = tok.(string)
			expectKey = false
			continue
		}
		switch d, _ := tok.(json.Delim); d {
		case '{', '[':
			open = append(open, level{object: d == '{', path: path()})
			expectKey = d == '{'
			continue
		case ']':
			open = open[:len(open)-1]
		default:
			paths = append(paths, string(path()))
		}
		// A value ended: the next is a key, or the next element.
		if len(open) > 0 {
			if open[len(open)-1].object {
				expectKey = true
			} else {
				open[len(open)-1].index++
			}
		}
	}
}
