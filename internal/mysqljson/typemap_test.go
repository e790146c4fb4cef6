package mysqljson

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// patchList renders a typed value's patches for comparison.
func patchList(t *testing.T, v []byte) []string {
	t.Helper()
	_, patches := Split(v)
	var out []string
	require.NoError(t, Patches(patches, func(p Patch) error {
		out = append(out, fmt.Sprintf("%s %s %s", p.Path, p.Type, p.Value))
		return nil
	}))
	return out
}

func TestAppendTypeMap(t *testing.T) {
	// A document and its type map as MySQL 9.7 selects them: members are
	// numbered over every object in pre-order ($.a, $.b, $.c, $.a[2].b,
	// $.a[2].z), elements over every array ($.a[0..2], $.b[0..1], $.b[0][0..1]).
	text := `{"a": [1, 1.50, {"b": "x", "z": "2020-01-02"}], "b": [[2, 5000000000], 4], "c": 5}`
	typeMap := `[[1, 3, "UNSIGNED INTEGER", 5], [1, 5, "DATE", "2020-01-02"], [2, 2, "DECIMAL", 1.50], [2, 7, "INTEGER", 5000000000]]`
	var m TypeMapper
	v, err := m.AppendTypeMap([]byte("x"), []byte(text), []byte(typeMap))
	require.NoError(t, err)
	got, _ := Split(v[1:])
	require.Equal(t, text, string(got), "the text comes first, unchanged")
	require.Equal(t, []string{
		`$."a"[1] DECIMAL 1.50`,
		`$."a"[2]."z" DATE 2020-01-02`,
		`$."b"[0][1] INTEGER 5000000000`,
		`$."c" UNSIGNED INTEGER 5`,
	}, patchList(t, v[1:]), "in the order of the text, with quoted member names")

	// The pre-order, not breadth first: $.a[0] is enumerated before $.b's
	// elements, and $.a[0][0] right after $.a's.
	v, err = m.AppendTypeMap(nil, []byte(`{"a": [[1.5]], "b": [2.5], "k\"ey": {"é": "1999-01-01"}}`),
		[]byte(`[[2, 2, "DECIMAL", 1.5], [2, 3, "DECIMAL", 2.5], [1, 4, "DATE", "1999-01-01"]]`))
	require.NoError(t, err)
	require.Equal(t, []string{`$."a"[0][0] DECIMAL 1.5`, `$."b"[0] DECIMAL 2.5`, `$."k\"ey"."é" DATE 1999-01-01`}, patchList(t, v))

	// A document that is one typed scalar; opaque values keep their text.
	v, err = m.AppendTypeMap(nil, []byte(`"base64:type15:AQI=\nAAA="`), []byte(`[[0, 0, "BLOB", "base64:type15:AQI=\nAAA="]]`))
	require.NoError(t, err)
	require.Equal(t, []string{"$ BLOB base64:type15:AQI=\nAAA="}, patchList(t, v))

	// No map: the text alone.
	v, err = m.AppendTypeMap(nil, []byte(`[1, "a"]`), nil)
	require.NoError(t, err)
	require.Equal(t, `[1, "a"]`, string(v))
}

func TestAppendTypeMapRefusesWhatDoesNotFit(t *testing.T) {
	text := []byte(`{"a": [1.5, "2020-01-02"], "b": {}}`)
	for typeMap, want := range map[string]string{
		`[[2, 1, "DECIMAL", 1.50]]`:      "places DECIMAL 1.50 where the document holds 1.5",
		`[[2, 3, "DECIMAL", 1.5]]`:       "entry 3 of 2 values",
		`[[1, 0, "DATE", "x"]]`:          "entry 0 of 2 values",
		`[[3, 1, "DATE", "x"]]`:          "neither 0, 1 nor 2",
		`[[2, 1, "DOUBLE", 1.5]]`:        `names type "DOUBLE", which its text tells`,
		`[[2, 1, "DECIMAL"]]`:            "type map",
		`{"not": "a list"}`:              "type map",
		`[["x", 1, "DECIMAL", 1.5]]`:     `"\"x\"" is not a whole number`,
		`[[2, 1, DECIMAL, 1.5]]`:         "names type DECIMAL, which its text tells",
		`[[2, 1, "DECIMAL", 1.5]] x`:     "bytes after its end",
		`[[2, 2, "DATE", "2020-01-03"]]`: `places DATE "2020-01-03" where the document holds "2020-01-02"`,
	} {
		_, err := new(TypeMapper).AppendTypeMap(nil, text, []byte(typeMap))
		require.ErrorContains(t, err, want, typeMap)
	}
	for _, bad := range []string{`{"a": [1, 2}`, `{"a" 1}`, `[1] x`, `"open`, `[1,`, ``} {
		_, err := new(TypeMapper).AppendTypeMap(nil, []byte(bad), []byte(`[[0, 0, "DATE", "x"]]`))
		require.Error(t, err, bad)
	}
}

func TestPatchesRoundTrip(t *testing.T) {
	in := []Patch{{Path: []byte("$"), Type: Decimal, Value: []byte("1.50")},
		{Path: []byte(`$."a"[3]`), Type: Opaque, Value: []byte(strings.Repeat("x", 300))},
		{Path: []byte(`$."e"`), Type: Date, Value: []byte{}}}
	v := []byte("[1]")
	for i, p := range in {
		v = AppendPatch(v, p, i == 0)
	}
	text, patches := Split(v)
	require.Equal(t, "[1]", string(text))
	var out []Patch
	require.NoError(t, Patches(patches, func(p Patch) error { out = append(out, p); return nil }))
	require.Len(t, out, len(in))
	for i := range in {
		require.Equal(t, string(in[i].Path), string(out[i].Path))
		require.Equal(t, in[i].Type, out[i].Type)
		require.Equal(t, string(in[i].Value), string(out[i].Value))
	}
	for _, bad := range [][]byte{{5}, {1, '$'}, {1, '$', 42, 0}, {1, '$', byte(Date), 9, 'x'}} {
		require.Error(t, Patches(bad, func(Patch) error { return nil }), "%q", bad)
	}
}

func TestAppendSQL(t *testing.T) {
	quote := func(dst, v []byte) []byte { return append(append(append(dst, '\''), v...), '\'') }
	typed := func(text string, ps ...Patch) []byte {
		v := []byte(text)
		for i, p := range ps {
			v = AppendPatch(v, p, i == 0)
		}
		return v
	}
	sql, err := AppendSQL(nil, []byte(`{"a": 1}`), quote)
	require.NoError(t, err)
	require.Equal(t, `_utf8mb4'{"a": 1}'`, string(sql), "no patch: the text as before")

	for _, c := range []struct {
		p    Patch
		want string
	}{
		{Patch{Type: Decimal, Value: []byte("-0.0010")}, "CAST(-0.0010 AS DECIMAL(4,4))"},
		{Patch{Type: Decimal, Value: []byte("12345678901234567890.1234567890")}, "CAST(12345678901234567890.1234567890 AS DECIMAL(30,10))"},
		{Patch{Type: Decimal, Value: []byte("0")}, "CAST(0 AS DECIMAL(1,0))"},
		{Patch{Type: Integer, Value: []byte("5000000000")}, "CAST(5000000000 AS SIGNED)"},
		{Patch{Type: Unsigned, Value: []byte("5")}, "CAST(5 AS UNSIGNED)"},
		{Patch{Type: Date, Value: []byte("2020-01-02")}, "DATE'2020-01-02'"},
		{Patch{Type: Time, Value: []byte("-838:59:59.000000")}, "TIME'-838:59:59.000000'"},
		{Patch{Type: Datetime, Value: []byte("2020-01-02 03:04:05.123456")}, "TIMESTAMP'2020-01-02 03:04:05.123456'"},
		{Patch{Type: Timestamp, Value: []byte("2020-01-02 03:04:05.500000")},
			"(SELECT _rl_v FROM JSON_TABLE(JSON_ARRAY(_latin1'2020-01-02 03:04:05.500000'), _utf8mb4'$[*]' COLUMNS(_rl_v TIMESTAMP(6) PATH _utf8mb4'$')) AS _rl_t)"},
		{Patch{Type: Bit, Value: []byte("base64:type16:AQI=")},
			"(SELECT _rl_v FROM JSON_TABLE(JSON_ARRAY(258), _utf8mb4'$[*]' COLUMNS(_rl_v BIT(16) PATH _utf8mb4'$')) AS _rl_t)"},
		{Patch{Type: Blob, Value: []byte("base64:type15:AQI=")}, "X'0102'"},
		{Patch{Type: Blob, Value: []byte("base64:type252:AQI=")},
			"(SELECT _rl_v FROM JSON_TABLE(JSON_ARRAY(CAST(X'0102' AS JSON)), _utf8mb4'$[*]' COLUMNS(_rl_v BLOB PATH _utf8mb4'$')) AS _rl_t)"},
		{Patch{Type: Blob, Value: []byte("base64:type254:AQI=")},
			"(SELECT _rl_v FROM JSON_TABLE(JSON_ARRAY(CAST(X'0102' AS JSON)), _utf8mb4'$[*]' COLUMNS(_rl_v BINARY(2) PATH _utf8mb4'$')) AS _rl_t)"},
		{Patch{Type: Blob, Value: []byte("base64:type250:AQI=")}, "IF(TRUE, X'0102', CAST('' AS BINARY(70000)))"},
	} {
		c.p.Path = []byte("$[0]")
		sql, err := AppendSQL(nil, typed("[0]", c.p), quote)
		require.NoError(t, err, c.want)
		require.Equal(t, "JSON_SET(CAST(_utf8mb4'[0]' AS JSON), _utf8mb4'$[0]', "+c.want+")", string(sql))
	}

	// A patch is checked for what its type says: none writes SQL of its own.
	for _, p := range []Patch{
		{Type: Decimal, Value: []byte("1) OR (1")},
		{Type: Decimal, Value: []byte("1.2.3")},
		{Type: Decimal, Value: []byte(strings.Repeat("9", 66))},
		{Type: Unsigned, Value: []byte("-1")},
		{Type: Integer, Value: []byte("1e5")},
		{Type: Timestamp, Value: []byte("2020'--")},
		{Type: Bit, Value: []byte("base64:type16:" + strings.Repeat("A", 16))},
		{Type: Blob, Value: []byte("base64:type15:!!")},
		{Type: Blob, Value: []byte("base64:typeX:AQI=")},
		{Type: Opaque, Value: []byte("base64:type245:AQI=")},
	} {
		p.Path = []byte("$")
		_, err := AppendSQL(nil, typed("0", p), quote)
		require.Error(t, err, "%s %q", p.Type, p.Value)
	}
}

// BenchmarkAppendTypeMap is the streamer's work per copied document that
// holds typed values: an order of about 1 KiB with five of them.
func BenchmarkAppendTypeMap(b *testing.B) {
	text := []byte(`{"id": 5000000001, "items": [{"qty": 2, "sku": "A-1", "price": 10.50}, {"qty": 1, "sku": "B-22", "price": 3.10}], ` +
		`"notes": "` + strings.Repeat("n", 700) + `", "total": 24.10, "customer": {"name": "Zoë", "tags": ["a", "b"], "since": "2020-01-02"}}`)
	typeMap := []byte(`[[1, 1, "INTEGER", 5000000001], [1, 4, "DECIMAL", 24.10], [1, 14, "DATE", "2020-01-02"], ` +
		`[1, 8, "DECIMAL", 10.50], [1, 11, "DECIMAL", 3.10]]`)
	var m TypeMapper
	var dst []byte
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if dst, err = m.AppendTypeMap(dst[:0], text, typeMap); err != nil {
			b.Fatal(err)
		}
	}
}
