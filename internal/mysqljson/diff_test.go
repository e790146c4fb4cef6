package mysqljson

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// diff encodes one JSON diff as the binlog logs it: the operation, the path
// and, but for REMOVE, the value, each length-encoded.
func diff(op byte, path string, v *val) []byte {
	b := append([]byte{op}, netLen(len(path))...)
	b = append(b, path...)
	if v == nil {
		return b
	}
	doc := v.doc()
	return append(append(b, netLen(len(doc))...), doc...)
}

func netLen(n int) []byte {
	if n < 251 {
		return []byte{byte(n)}
	}
	return []byte{0xfc, byte(n), byte(n >> 8)}
}

func diffs(ds ...[]byte) []byte {
	var b []byte
	for _, d := range ds {
		b = append(b, d...)
	}
	return b
}

func ptr(v val) *val { return &v }

func typed(t *testing.T, v val) []byte {
	t.Helper()
	b, err := AppendBinary(nil, v.doc())
	require.NoError(t, err)
	return b
}

func obj(keys []string, vals ...val) val { return container(false, keys, vals...) }
func arr(vals ...val) val                { return container(false, nil, vals...) }

// TestApplyDiffs requires of each update that ApplyDiffs on the before
// document's typed value give exactly AppendBinary's typed value of the after
// document.
func TestApplyDiffs(t *testing.T) {
	dec := func(s string, p, sc int) val { return opq(fieldDecimal, decimalPayload(s, p, sc)) }
	date := opq(fieldDate, packed(2021, 1, 2, 0, 0, 0, 0))
	before := obj([]string{"a", "b", "zz", "q\"k"},
		dec("1.50", 3, 2), arr(u32(5), strv("x"), i64(5000000000)), obj([]string{"n"}, arr(dec("7", 1, 0))), lit(1))
	long := strings.Repeat("k", 300)
	for _, tc := range []struct {
		what  string
		diffs []byte
		after val
	}{
		{"DECIMAL replaced by a DATE", diff(diffReplace, "$.a", ptr(date)),
			obj([]string{"a", "b", "zz", "q\"k"}, date, arr(u32(5), strv("x"), i64(5000000000)), obj([]string{"n"}, arr(dec("7", 1, 0))), lit(1))},
		{"members inserted in key order", diffs(diff(diffInsert, "$.m", ptr(u16(1))), diff(diffInsert, "$.ab", ptr(dec("2.0", 2, 1))),
			diff(diffInsert, `$."a b c"`, ptr(lit(0)))),
			obj([]string{"a", "b", "m", "ab", "zz", "q\"k", "a b c"}, dec("1.50", 3, 2), arr(u32(5), strv("x"), i64(5000000000)),
				u16(1), dec("2.0", 2, 1), obj([]string{"n"}, arr(dec("7", 1, 0))), lit(1), lit(0))},
		{"array elements removed, nested and quoted paths", diffs(diff(diffRemove, "$.b[0]", nil), diff(diffRemove, `$."q\"k"`, nil),
			diff(diffRemove, "$.zz.n[last]", nil)),
			obj([]string{"a", "b", "zz"}, dec("1.50", 3, 2), arr(strv("x"), i64(5000000000)), obj([]string{"n"}, arr()))},
		{"array inserts: middle, past the end, from the end", diffs(diff(diffInsert, "$.b[1]", ptr(u32(7))),
			diff(diffInsert, "$.b[100]", ptr(date)), diff(diffInsert, "$.b[last]", ptr(strv("before last")))),
			obj([]string{"a", "b", "zz", "q\"k"}, dec("1.50", 3, 2),
				arr(u32(5), u32(7), strv("x"), i64(5000000000), strv("before last"), date), obj([]string{"n"}, arr(dec("7", 1, 0))), lit(1))},
		{"replace in nested array and of a container", diffs(diff(diffReplace, "$.zz.n[0]", ptr(arr(dec("-3.25", 3, 2)))),
			diff(diffReplace, "$.b", ptr(obj([]string{"x"}, u64(3))))),
			obj([]string{"a", "b", "zz", "q\"k"}, dec("1.50", 3, 2), obj([]string{"x"}, u64(3)), obj([]string{"n"}, arr(arr(dec("-3.25", 3, 2)))), lit(1))},
		{"long path and member", diff(diffInsert, `$."`+long+`"`, ptr(strv("v"))),
			obj([]string{"a", "b", "zz", "q\"k", long}, dec("1.50", 3, 2), arr(u32(5), strv("x"), i64(5000000000)),
				obj([]string{"n"}, arr(dec("7", 1, 0))), lit(1), strv("v"))},
		{"no diffs", nil, before},
	} {
		t.Run(tc.what, func(t *testing.T) {
			got, err := ApplyDiffs([]byte("kept"), typed(t, before), tc.diffs)
			require.NoError(t, err)
			require.Equal(t, typedString(t, append([]byte("kept"), typed(t, tc.after)...)), typedString(t, got))
		})
	}
}

func TestApplyDiffsErrors(t *testing.T) {
	before := typed(t, obj([]string{"a", "b"}, arr(u16(1)), strv("s")))
	for _, tc := range []struct {
		what  string
		diffs []byte
		err   string
	}{
		{"unknown operation", []byte{3, 1, '$'}, "JSON diff 0 has unknown operation 3"},
		{"truncated path", []byte{diffRemove, 5, '$'}, "JSON diff 0 (REMOVE): path claims 5 bytes, 1 are left"},
		{"missing value", []byte{diffReplace, 3, '$', '.', 'a'}, "JSON diff 0 (REPLACE of $.a): value is missing"},
		{"bad value", diff(diffReplace, "$.a", &val{0x7f, nil}), "JSON diff 0 (REPLACE of $.a): MySQL binary JSON of 1 bytes: value at byte 1 has unknown type 0x7f"},
		{"root", diff(diffReplace, "$", ptr(u16(1))), "the path is the whole document"},
		{"bad path", diff(diffRemove, "a.b", nil), "path does not start with $"},
		{"bad cell", diff(diffRemove, "$.a[x]", nil), "path has a bad array cell [x]"},
		{"wildcard", diff(diffRemove, "$.*", nil), "path has a bad member name"},
		{"missing parent", diff(diffInsert, "$.c.d", ptr(u16(1))), "JSON diff 0 (INSERT of $.c.d): the document has no value at the path's first 1 steps"},
		{"auto-wrap", diff(diffReplace, "$.b[0]", ptr(u16(1))), "does not fit the value it is in"},
		{"existing member", diff(diffInsert, "$.a", ptr(u16(1))), "INSERT of a member the object already has"},
		{"missing member", diff(diffReplace, "$.c", ptr(u16(1))), "the object has no such member"},
		{"removed past the end", diffs(diff(diffRemove, "$.b", nil), diff(diffRemove, "$.a[1]", nil)),
			"JSON diff 1 (REMOVE of $.a[1]): the array of 1 elements has no such element"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			got, err := ApplyDiffs([]byte("kept"), before, tc.diffs)
			require.ErrorContains(t, err, tc.err)
			require.Equal(t, "kept", string(got))
		})
	}
	_, err := ApplyDiffs(nil, []byte(`{"a": 1`), nil)
	require.ErrorContains(t, err, "JSON document before a partial update: JSON text ends inside a container")
	_, err = ApplyDiffs(nil, AppendPatch([]byte(`{"a": 1}`), Patch{Path: []byte("$.b"), Type: Decimal, Value: []byte("1")}, true), nil)
	require.ErrorContains(t, err, "JSON patch at $.b is not at a scalar of the text")
}

func FuzzApplyDiffs(f *testing.F) {
	f.Add([]byte(`{"a": [1, 2], "b": {"c": "d"}}`), diffs(diff(diffRemove, "$.a[0]", nil), diff(diffInsert, "$.b.e", ptr(u16(1)))))
	f.Fuzz(func(t *testing.T, before, d []byte) {
		_, _ = ApplyDiffs(nil, before, d)
	})
}

// BenchmarkApplyDiffs replaces one element of a 20,000-element array of
// DECIMALs, integers and strings, as replay does for each partial update.
func BenchmarkApplyDiffs(b *testing.B) {
	var elems []val
	for i := range 20000 {
		elems = append(elems, []val{opq(fieldDecimal, decimalPayload("1.5", 3, 1)), i32(int32(i)), strv("s")}[i%3])
	}
	doc, err := AppendBinary(nil, container(true, nil, elems...).doc())
	require.NoError(b, err)
	d := diff(diffReplace, "$[7]", ptr(u16(1)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ApplyDiffs(nil, doc, d); err != nil {
			b.Fatal(err)
		}
	}
}
