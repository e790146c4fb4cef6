package binlogrow

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/schema"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// TestJSONDoubleMatchesServer requires appendJSONDouble to print doubles of
// every magnitude and digit count exactly as MySQL prints them in JSON.
func TestJSONDoubleMatchesServer(t *testing.T) {
	db := sandboxtest.Open(t, sandboxtest.Start(t, sandbox.Options{Flavor: sandbox.MySQL}), "")
	values := []float64{0, math.Copysign(0, -1), 1, -1, 0.1, 1.5, 3, 1e14, 1e15, 1.5e15, 1e16, 1e-14, 1e-15, 1e-16, 1.5e-15,
		1.2345678901234567e15, 1.2345678901234567e16, 1.2345678901234567e-15, 1.2345678901234567e-16, 12345678.9,
		math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64, 2.2250738585072014e-308, 1 << 53, 1<<53 + 2,
		math.MaxInt64, math.MaxUint64, 123456789012345678901234}
	for e := -30; e <= 30; e++ {
		for _, m := range []float64{1, 1.5, 9.999999999999998, 1.2345678901234567, 7.000000000000001} {
			values = append(values, m*math.Pow(10, float64(e)), -m*math.Pow(10, float64(e)))
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		if f := math.Float64frombits(r.Uint64()); !math.IsNaN(f) && !math.IsInf(f, 0) {
			values = append(values, f)
		}
	}
	sandboxtest.Exec(t, db, "CREATE DATABASE j", "CREATE TABLE j.d (id INT PRIMARY KEY, d DOUBLE NOT NULL)")
	var rows []string
	for i, f := range values {
		// In 'e' notation, which MySQL reads as a double (-0 would be an integer).
		rows = append(rows, fmt.Sprintf("(%d, %s)", i, strconv.FormatFloat(f, 'e', -1, 64)))
	}
	sandboxtest.Exec(t, db, "INSERT INTO j.d VALUES "+strings.Join(rows, ", "))
	got, err := db.Query("SELECT id, CAST(d AS JSON) FROM j.d ORDER BY id")
	require.NoError(t, err)
	defer got.Close()
	var diffs []string
	n := 0
	for got.Next() {
		var id int
		var text string
		require.NoError(t, got.Scan(&id, &text))
		if mine := string(appendJSONDouble(nil, values[id])); mine != text {
			diffs = append(diffs, fmt.Sprintf("%v: mine %s, MySQL %s", values[id], mine, text))
		}
		n++
	}
	require.NoError(t, got.Err())
	require.Equal(t, len(values), n)
	require.Empty(t, diffs)
}

func TestAppendJSON(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"a":[1,2.5,{"b":null}],"c":{}}`, `{"a": [1, 2.5, {"b": null}], "c": {}}`},
		{`[[],{},[[]],""]`, `[[], {}, [[]], ""]`},
		{`"\u003c\u003e\u0026\u2028\u0001\"\\/"`, "\"<>&\u2028\\u0001\\\"\\\\/\""},
		{`{"\n":true,"k":false}`, `{"\n": true, "k": false}`},
		{`[100000000000000000000.0,1e-07,1.23456789e+07,3.0,1.50,18446744073709551615]`, `[1e20, 0.0000001, 12345678.9, 3.0, 1.50, 18446744073709551615]`},
		{`-0.0`, `-0.0`},
		{`null`, `null`},
	} {
		got, err := appendJSON([]byte("x"), c.in)
		require.NoError(t, err, c.in)
		require.Equal(t, "x"+c.want, string(got), c.in)
	}
	for _, bad := range []string{`{"a":`, `[1,2`, `{"a" 1}`} {
		_, err := appendJSON(nil, bad)
		require.ErrorContains(t, err, "JSON from the binlog decoder", bad)
	}
}

// TestJSONTextStoresTheSameValue converts the binlog images of MySQL JSON
// values and requires the text to be what SELECT prints (the copy's text), and
// written into a JSON column, to store what the copy's text stores: equal as
// JSON (CAST(a AS JSON) = CAST(b AS JSON)) and printed alike by SELECT. It pins
// down the one text that differs (see appendJSON), and what any JSON text,
// the copy's too, loses of the source's value: DECIMALs become doubles, and
// DATE, DATETIME, TIME and BINARY values strings.
func TestJSONTextStoresTheSameValue(t *testing.T) {
	ctx := context.Background()
	srv := sandboxtest.Start(t, sandbox.Options{Flavor: sandbox.MySQL})
	db := sandboxtest.Open(t, srv, "")
	const (
		opaque    = "opaque DECIMAL, DATE, DATETIME, TIME and BINARY"
		ambiguous = "whole DECIMALs of 16 or more digits"
	)
	docs := append(jsonDocs[:len(jsonDocs):len(jsonDocs)], struct{ what, sql string }{ambiguous,
		"JSON_ARRAY(CAST(1000000000000000 AS DECIMAL(20,1)), CAST(-1234567890123456789 AS DECIMAL(30,1)))"})
	sandboxtest.Exec(t, db, "CREATE DATABASE binlogrow",
		"CREATE TABLE binlogrow.j (id INT PRIMARY KEY, js JSON)",
		"CREATE TABLE binlogrow.again (id INT PRIMARY KEY, converted JSON, copied JSON)")
	for i, d := range docs {
		sandboxtest.Exec(t, db, fmt.Sprintf("INSERT INTO binlogrow.j VALUES (%d, %s)", i, d.sql))
	}
	sandboxtest.Exec(t, db, "CREATE TABLE binlogrow.done (id INT PRIMARY KEY)", "INSERT INTO binlogrow.done VALUES (1)")
	tbl, err := schema.Load(ctx, db, "binlogrow", "j")
	require.NoError(t, err)
	cols, err := tbl.Streamed(nil)
	require.NoError(t, err)
	images := readImages(t, srv, "j", "done")
	require.Len(t, images, len(docs))
	row := &rowliftv1.Row{}
	for _, im := range images {
		conv, err := NewConverter(im.table, cols)
		require.NoError(t, err)
		require.NoError(t, conv.Convert(row, im.values))
		vals, err := rowcodec.Values(nil, row)
		require.NoError(t, err)
		id, converted := string(vals[0]), string(vals[1])
		i, err := strconv.Atoi(id)
		require.NoError(t, err)
		what := docs[i].what
		var copied string
		var equal bool
		require.NoError(t, db.QueryRow("SELECT js, CAST(? AS JSON) = CAST(CAST(js AS CHAR) AS JSON) FROM binlogrow.j WHERE id = ?", converted, id).
			Scan(&copied, &equal))
		if what == ambiguous {
			require.Equal(t, `[1000000000000000.0, -1234567890123456789.0]`, copied)
			require.Equal(t, `[1e15, -1234567890123456789.0]`, converted,
				"the binlog text no longer tells the first DECIMAL, which a double holds exactly, from a double")
		} else {
			require.Equal(t, copied, converted, "%s: converted text differs from SELECT's", what)
		}
		// CAST(CAST(js AS CHAR) AS JSON) above is the copy's text read back as JSON.
		require.True(t, equal, "%s: converted text %q against SELECT's %q as JSON", what, cut(converted), cut(copied))

		literal := func(s string) string {
			return string(rowcodec.AppendComparable(nil, rowcodec.String, "utf8mb4", []byte(s)))
		}
		sandboxtest.Exec(t, db, fmt.Sprintf("INSERT INTO binlogrow.again VALUES (%s, %s, %s)", id, literal(converted), literal(copied)))
		var fromConverted, fromCopied string
		var sameAsSource bool
		require.NoError(t, db.QueryRow(`SELECT a.converted, a.copied, a.converted = a.copied, a.converted = j.js
			FROM binlogrow.again a JOIN binlogrow.j j USING (id) WHERE id = ?`, id).Scan(&fromConverted, &fromCopied, &equal, &sameAsSource))
		require.True(t, equal, "%s: stored, converted %q and copied %q are not equal as JSON", what, cut(fromConverted), cut(fromCopied))
		require.Equal(t, fromCopied, fromConverted, "%s: stored, SELECT prints converted and copied text otherwise", what)
		switch what {
		case opaque:
			require.False(t, sameAsSource, "dates written as text are strings, not dates")
			require.Equal(t, `{"d": 1.5, "n": -0.001, "t": "-01:02:03.000000", "z": 0.0, "dt": "2024-01-02", "bin": "base64:type15:AP8=", `+
				`"dtm": "2024-01-02 03:04:05.500000", "dtm0": "1999-12-31 23:59:59.000000"}`, fromConverted)
			require.Equal(t, `{"d": 1.50, "n": -0.001, "t": "-01:02:03.000000", "z": 0.0, "dt": "2024-01-02", "bin": "base64:type15:AP8=", `+
				`"dtm": "2024-01-02 03:04:05.500000", "dtm0": "1999-12-31 23:59:59.000000"}`, copied)
		case ambiguous:
			require.False(t, sameAsSource, "a DECIMAL beyond a double's digits, written as text, is rounded to a double")
			require.Equal(t, `[1e15, -1.2345678901234568e18]`, fromConverted)
		default:
			require.True(t, sameAsSource, "%s: stored, %q is not equal as JSON to the source's %q", what, cut(fromConverted), cut(copied))
			require.Equal(t, copied, fromConverted, "%s: stored, SELECT prints it otherwise than the source's", what)
		}
	}
}

// TestJSONFailsClosed checks that the JSON a converter cannot print as SELECT
// does is refused with the reason: a partial update logged with
// binlog_row_value_options=PARTIAL_JSON, and an empty document.
func TestJSONFailsClosed(t *testing.T) {
	ctx := context.Background()
	srv := sandboxtest.Start(t, sandbox.Options{Flavor: sandbox.MySQL})
	db := sandboxtest.Open(t, srv, "")
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	for _, q := range []string{
		"CREATE DATABASE binlogrow",
		"CREATE TABLE binlogrow.j (id INT PRIMARY KEY, js JSON NOT NULL)",
		`INSERT INTO binlogrow.j VALUES (1, '{"a": 1, "b": "long enough to be worth a diff"}')`,
		"SET SESSION sql_mode = ''",
		"INSERT IGNORE INTO binlogrow.j VALUES (2, NULL)",
		"SET SESSION binlog_row_value_options = 'PARTIAL_JSON'",
		`UPDATE binlogrow.j SET js = JSON_SET(js, '$.a', 2) WHERE id = 1`,
		"CREATE TABLE binlogrow.done (id INT PRIMARY KEY)",
		"INSERT INTO binlogrow.done VALUES (1)",
	} {
		_, err := conn.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	var stored string
	require.NoError(t, db.QueryRow("SELECT js FROM binlogrow.j WHERE id = 2").Scan(&stored))
	tbl, err := schema.Load(ctx, db, "binlogrow", "j")
	require.NoError(t, err)
	cols, err := tbl.Streamed(nil)
	require.NoError(t, err)
	images := readImages(t, srv, "j", "done")
	var kinds []string
	errs := map[string]error{}
	for _, im := range images {
		conv, err := NewConverter(im.table, cols)
		require.NoError(t, err)
		require.NoError(t, conv.CheckSkipped(im.skipped))
		kind := fmt.Sprintf("%s of %v", im.kind, im.values[0])
		kinds = append(kinds, kind)
		errs[kind] = conv.Convert(&rowliftv1.Row{}, im.values)
	}
	require.Equal(t, []string{"insert of 1", "insert of 2", "update before of 1", "update after of 1"}, kinds)
	require.NoError(t, errs["insert of 1"])
	require.NoError(t, errs["update before of 1"], "the before image of a partial update is whole")
	require.ErrorContains(t, errs["update after of 1"], "partial JSON update (Replace of $.a): the source must log with binlog_row_value_options=''")
	require.ErrorContains(t, errs["insert of 2"], "empty JSON document", "SELECT prints it as %q", stored)
}

// TestJSONNeedsTypeFaithfulDecoding shows why CheckConfig requires
// RenderJSONAsMySQLText: without it go-mysql prints a whole double as an
// integer (text that stores another value) and sorts keys by bytes, where
// MySQL sorts them by length first.
func TestJSONNeedsTypeFaithfulDecoding(t *testing.T) {
	srv := sandboxtest.Start(t, sandbox.Options{Flavor: sandbox.MySQL})
	db := sandboxtest.Open(t, srv, "")
	sandboxtest.Exec(t, db, "CREATE DATABASE binlogrow", "CREATE TABLE binlogrow.j (id INT PRIMARY KEY, js JSON)",
		`INSERT INTO binlogrow.j VALUES (1, '{"b": 3.0, "aa": 1}')`,
		"CREATE TABLE binlogrow.done (id INT PRIMARY KEY)", "INSERT INTO binlogrow.done VALUES (1)")
	decoded := func(faithful bool) any {
		cfg := syncerConfig(srv)
		cfg.RenderJSONAsMySQLText = faithful
		images := readImagesWith(t, srv, cfg, "j", "done")
		require.Len(t, images, 1)
		return images[0].values[1]
	}
	require.Equal(t, `{"b":3.0,"aa":1}`, decoded(true))
	require.Equal(t, `{"aa":1,"b":3}`, decoded(false))
	var selected string
	require.NoError(t, db.QueryRow("SELECT js FROM binlogrow.j").Scan(&selected))
	require.Equal(t, `{"b": 3.0, "aa": 1}`, selected)
	cfg := syncerConfig(srv)
	cfg.RenderJSONAsMySQLText = false
	require.ErrorContains(t, CheckConfig(cfg), "RenderJSONAsMySQLText must be true")
}
