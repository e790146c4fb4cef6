package mysqljson

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// val is one binary JSON value: its type byte and its bytes (for an inlined
// type, its little-endian value).
type val struct {
	typ  byte
	data []byte
}

func (v val) doc() []byte { return append([]byte{v.typ}, v.data...) }

func i16(n int16) val  { return val{binInt16, binary.LittleEndian.AppendUint16(nil, uint16(n))} }
func u16(n uint16) val { return val{binUint16, binary.LittleEndian.AppendUint16(nil, n)} }
func i32(n int32) val  { return val{binInt32, binary.LittleEndian.AppendUint32(nil, uint32(n))} }
func u32(n uint32) val { return val{binUint32, binary.LittleEndian.AppendUint32(nil, n)} }
func i64(n int64) val  { return val{binInt64, binary.LittleEndian.AppendUint64(nil, uint64(n))} }
func u64(n uint64) val { return val{binUint64, binary.LittleEndian.AppendUint64(nil, n)} }
func dbl(f float64) val {
	return val{binDouble, binary.LittleEndian.AppendUint64(nil, math.Float64bits(f))}
}
func lit(b byte) val    { return val{binLiteral, []byte{b, 0}} }
func strv(s string) val { return val{binString, append(varLen(len(s)), s...)} }
func opq(field byte, b []byte) val {
	return val{binOpaque, append(append([]byte{field}, varLen(len(b))...), b...)}
}

func varLen(n int) []byte {
	var b []byte
	for {
		if n < 0x80 {
			return append(b, byte(n))
		}
		b = append(b, byte(n)|0x80)
		n >>= 7
	}
}

// container encodes an array (keys nil) or an object as MySQL does.
func container(large bool, keys []string, vals ...val) val {
	w, typ := 2, byte(binSmallArray)
	if large {
		w, typ = 4, binLargeArray
	}
	object := keys != nil
	if object {
		typ -= 2
	}
	put := func(b []byte, n int) []byte {
		if w == 2 {
			return binary.LittleEndian.AppendUint16(b, uint16(n))
		}
		return binary.LittleEndian.AppendUint32(b, uint32(n))
	}
	header := 2*w + len(vals)*(1+w)
	if object {
		header += len(keys) * (w + 2)
	}
	var entries, body []byte
	for _, k := range keys {
		entries = put(entries, header+len(body))
		entries = binary.LittleEndian.AppendUint16(entries, uint16(len(k)))
		body = append(body, k...)
	}
	for _, v := range vals {
		entries = append(entries, v.typ)
		if inlined(v.typ, large) {
			entries = append(entries, make([]byte, w)...)
			copy(entries[len(entries)-w:], v.data)
			continue
		}
		entries = put(entries, header+len(body))
		body = append(body, v.data...)
	}
	out := put(nil, len(vals))
	out = put(out, header+len(body))
	return val{typ, append(append(out, entries...), body...)}
}

// decimalPayload encodes v (digits with an optional '-' and '.') as a JSON
// DECIMAL(precision, scale) payload, as decimal2bin does.
func decimalPayload(v string, precision, scale int) []byte {
	neg := strings.HasPrefix(v, "-")
	v = strings.TrimPrefix(v, "-")
	intPart, frac, _ := strings.Cut(v, ".")
	intPart = strings.Repeat("0", precision-scale-len(intPart)) + intPart
	frac += strings.Repeat("0", scale-len(frac))
	var b []byte
	group := func(digits string) {
		n, _ := strconv.ParseUint(digits, 10, 32)
		size := 4
		if len(digits) < 9 {
			size = dig2bytes[len(digits)]
		}
		for i := size - 1; i >= 0; i-- {
			b = append(b, byte(n>>(8*i)))
		}
	}
	if lead := len(intPart) % 9; lead > 0 {
		group(intPart[:lead])
		intPart = intPart[lead:]
	}
	for ; len(intPart) > 0; intPart = intPart[9:] {
		group(intPart[:9])
	}
	for ; len(frac) >= 9; frac = frac[9:] {
		group(frac[:9])
	}
	if len(frac) > 0 {
		group(frac)
	}
	b[0] ^= 0x80
	if neg {
		for i := range b {
			b[i] ^= 0xFF
		}
	}
	return append([]byte{byte(precision), byte(scale)}, b...)
}

// packed encodes a datetime as TIME_to_longlong_datetime_packed does.
func packed(y, mo, d, h, mi, s, us int64) []byte {
	ymd := (y*13+mo)<<5 | d
	hms := h<<12 | mi<<6 | s
	return binary.LittleEndian.AppendUint64(nil, uint64((ymd<<17|hms)<<24+us))
}

// packedTime encodes a TIME as TIME_to_longlong_time_packed does.
func packedTime(neg bool, h, mi, s, us int64) []byte {
	v := (h<<12|mi<<6|s)<<24 + us
	if neg {
		v = -v
	}
	return binary.LittleEndian.AppendUint64(nil, uint64(v))
}

// typedString shows a typed value as its text and its patches.
func typedString(t *testing.T, v []byte) string {
	t.Helper()
	text, patches := Split(v)
	out := string(text)
	require.NoError(t, Patches(patches, func(p Patch) error {
		out += fmt.Sprintf(" | %s %s %q", p.Path, p.Type, p.Value)
		return nil
	}))
	return out
}

func TestAppendBinary(t *testing.T) {
	for _, c := range []struct {
		name string
		doc  val
		want string
	}{
		{"small object", container(false, []string{"a", "b"}, i16(1), container(false, nil, i16(1), i16(2))), `{"a": 1, "b": [1, 2]}`},
		{"large object keeps its stored order", container(true, []string{"b", "a"}, i32(-7), u32(7)), `{"b": -7, "a": 7} | $."a" UNSIGNED INTEGER "7"`},
		{"empty containers", container(false, nil, container(false, nil), container(false, []string{})), `[[], {}]`},
		{"literals", container(false, nil, lit(0), lit(1), lit(2)), `[null, true, false]`},
		{"integers", container(false, nil, i16(-32768), u16(65535), i32(math.MinInt32), u32(math.MaxUint32), i64(math.MaxUint32),
			i64(math.MaxUint32+1), i64(math.MinInt64), u64(math.MaxUint32), u64(math.MaxUint32+1), u64(math.MaxUint64)),
			`[-32768, 65535, -2147483648, 4294967295, 4294967295, 4294967296, -9223372036854775808, 4294967295, 4294967296, 18446744073709551615]` +
				` | $[1] UNSIGNED INTEGER "65535" | $[3] UNSIGNED INTEGER "4294967295" | $[5] INTEGER "4294967296" | $[7] UNSIGNED INTEGER "4294967295"`},
		{"doubles", container(false, nil, dbl(math.Copysign(0, -1)), dbl(1e300), dbl(5e-324), dbl(0.5)), `[-0.0, 1e300, 5e-324, 0.5]`},
		{"strings and escaped keys", container(false, []string{"k\"\n", "é"}, strv("a\x01\\"), strv(strings.Repeat("x", 200))),
			`{"k\"\n": "a\u0001\\", "é": "` + strings.Repeat("x", 200) + `"}`},
		{"decimals", container(false, nil, opq(fieldDecimal, decimalPayload("1.50", 5, 2)), opq(fieldDecimal, decimalPayload("0", 4, 2)),
			opq(fieldDecimal, decimalPayload("-0.5", 4, 2)), opq(fieldDecimal, decimalPayload("123", 65, 30)),
			opq(fieldDecimal, decimalPayload("-1234567890.0123456789", 30, 10)), opq(fieldDecimal, decimalPayload("5", 1, 0))),
			`[1.50, 0.00, -0.50, 123.000000000000000000000000000000, -1234567890.0123456789, 5]` +
				` | $[0] DECIMAL "1.50" | $[1] DECIMAL "0.00" | $[2] DECIMAL "-0.50" | $[3] DECIMAL "123.000000000000000000000000000000"` +
				` | $[4] DECIMAL "-1234567890.0123456789" | $[5] DECIMAL "5"`},
		{"temporals", container(false, []string{"d", "t", "dt", "ts"}, opq(fieldDate, packed(2020, 1, 2, 0, 0, 0, 0)),
			opq(fieldTime, packedTime(true, 838, 59, 59, 0)), opq(fieldDatetime, packed(2020, 1, 2, 3, 4, 5, 123000)),
			opq(fieldTimestamp, packed(1970, 1, 1, 0, 0, 1, 0))),
			`{"d": "2020-01-02", "t": "-838:59:59.000000", "dt": "2020-01-02 03:04:05.123000", "ts": "1970-01-01 00:00:01.000000"}` +
				` | $."d" DATE "2020-01-02" | $."t" TIME "-838:59:59.000000" | $."dt" DATETIME "2020-01-02 03:04:05.123000"` +
				` | $."ts" TIMESTAMP "1970-01-01 00:00:01.000000"`},
		{"opaque", container(false, nil, opq(fieldBit, []byte{1}), opq(252, []byte(strings.Repeat("a", 58))), opq(fieldVarchar, nil), opq(245, []byte{0})),
			`["base64:type16:AQ==", "base64:type252:` + strings.Repeat("YWFh", 19) + `\nYQ==", "base64:type15:", "base64:type245:AA=="]` +
				` | $[0] BIT "base64:type16:AQ==" | $[1] BLOB "base64:type252:` + strings.Repeat("YWFh", 19) + "\\nYQ==\"" +
				` | $[2] BLOB "base64:type15:" | $[3] OPAQUE "base64:type245:AA=="`},
		{"top-level DECIMAL", opq(fieldDecimal, decimalPayload("-0.001", 10, 3)), `-0.001 | $ DECIMAL "-0.001"`},
		{"top-level TIME", opq(fieldTime, packedTime(false, 1, 2, 3, 4)), `"01:02:03.000004" | $ TIME "01:02:03.000004"`},
		{"top-level uint16", u16(5), `5 | $ UNSIGNED INTEGER "5"`},
		{"top-level literal", val{binLiteral, []byte{1}}, `true`},
		{"top-level string", strv("s"), `"s"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := AppendBinary([]byte("prefix"), c.doc.doc())
			require.NoError(t, err)
			require.Equal(t, "prefix", string(got[:6]))
			require.Equal(t, c.want, typedString(t, got[6:]))
			text, _ := Split(got[6:])
			require.True(t, json.Valid(text), "%s", text)
		})
	}
}

func TestAppendBinaryLargeDocument(t *testing.T) {
	var vals []val
	var want []string
	for i := range 20000 {
		vals = append(vals, i32(int32(i)), strv("s"))
		want = append(want, fmt.Sprint(i), `"s"`)
	}
	doc := container(true, nil, vals...).doc()
	got, err := AppendBinary(nil, doc)
	require.NoError(t, err)
	require.Equal(t, "["+strings.Join(want, ", ")+"]", string(got))
}

func TestAppendBinaryErrors(t *testing.T) {
	good := container(false, []string{"a"}, strv("x")).doc()
	for _, c := range []struct {
		name string
		doc  []byte
		err  string
	}{
		{"empty", nil, "MySQL binary JSON is empty"},
		{"unknown type", []byte{0x0d}, "value at byte 1 has unknown type 0xd"},
		{"truncated container", good[:3], "object at byte 1 is truncated"},
		{"size beyond the document", good[:len(good)-1], "object at byte 1 claims 14 bytes, 13 are left"},
		{"too many elements", append([]byte{binSmallArray, 0xff, 0xff, 4, 0}, 0, 0), "has 65535 elements, whose entries need"},
		{"key outside", func() []byte { b := append([]byte(nil), good...); b[5] = 0xff; return b }(), "key 0 of the object at byte 1 lies outside it"},
		{"value past the end", func() []byte { b := append([]byte(nil), good...); b[10] = 0xff; return b }(), "element 0 of the object at byte 1 points past its end"},
		{"bad literal", val{binLiteral, []byte{3}}.doc(), "literal at byte 1 has unknown value 3"},
		{"truncated int64", []byte{binInt64, 1, 2}, "8-byte number at byte 1 is truncated"},
		{"NaN", dbl(math.NaN()).doc(), "double at byte 1 is NaN"},
		{"string length past the end", []byte{binString, 5, 'a'}, "string at byte 1 claims 5 bytes, 1 are left"},
		{"string length of 6 bytes", []byte{binString, 0x80, 0x80, 0x80, 0x80, 0x80, 0}, "length of more than 5 bytes"},
		{"decimal of wrong size", opq(fieldDecimal, []byte{5, 2, 0x80}).doc(), "DECIMAL(5,2) of 1 bytes, not 3"},
		{"decimal scale above precision", opq(fieldDecimal, []byte{2, 5}).doc(), "precision 2 and scale 5"},
		{"decimal group too large", opq(fieldDecimal, []byte{2, 0, 0x80 | 100}).doc(), "group of 2 digits holds 100"},
		{"date of 7 bytes", opq(fieldDate, make([]byte, 7)).doc(), "has 7 bytes, not 8"},
		{"datetime out of range", opq(fieldDatetime, packed(2020, 1, 2, 24, 0, 0, 0)).doc(), "DATETIME at byte 1: packed value"},
		{"TIME of 839 hours", opq(fieldTime, packedTime(false, 839, 0, 0, 0)).doc(), "TIME at byte 1: packed value"},
		{"negative date", opq(fieldDate, packedTime(true, 1, 0, 0, 0)).doc(), "DATE at byte 1: negative packed value"},
		{"a value referenced twice", func() []byte {
			b := container(false, nil, container(false, nil, strv(strings.Repeat("x", 100))), i16(0)).doc()
			b[8] = binSmallArray // the second entry points at the first's array
			copy(b[9:11], b[6:8])
			return b
		}(), "values overlap"},
		{"nested too deep", func() []byte {
			v := container(true, nil)
			for range maxDepth {
				v = container(true, nil, v)
			}
			return v.doc()
		}(), "nested deeper than 1000 levels"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := AppendBinary([]byte("prefix"), c.doc)
			require.ErrorContains(t, err, c.err)
			require.Equal(t, "prefix", string(got), "dst is left as it was")
		})
	}
}

// FuzzAppendBinary checks that no input panics, and that what decodes is a
// typed value: valid JSON text, and patches that decode.
func FuzzAppendBinary(f *testing.F) {
	f.Add(container(false, []string{"a", "b"}, i16(1), container(false, nil, i16(1), u32(2), strv("x"))).doc())
	f.Add(container(true, []string{"d", "t"}, opq(fieldDecimal, decimalPayload("-1.5", 10, 3)), opq(fieldTime, packedTime(true, 1, 2, 3, 4))).doc())
	f.Add(container(false, nil, opq(fieldDatetime, packed(2020, 1, 2, 3, 4, 5, 6)), opq(fieldBit, []byte{1, 2}), dbl(1.5), i64(-1), u64(1)).doc())
	f.Fuzz(func(t *testing.T, doc []byte) {
		v, err := AppendBinary(nil, doc)
		if err != nil {
			return
		}
		text, patches := Split(v)
		if !json.Valid(text) {
			t.Fatalf("invalid JSON text %q", text)
		}
		if err := Patches(patches, func(Patch) error { return nil }); err != nil {
			t.Fatal(err)
		}
	})
}

func BenchmarkAppendBinary(b *testing.B) {
	var vals []val
	for i := range 20000 {
		vals = append(vals, i32(int32(i)), dbl(float64(i)/3), strv("some text"), opq(fieldDecimal, decimalPayload("12.50", 10, 2)))
	}
	doc := container(true, []string{"k"}, container(true, nil, vals...)).doc()
	var dst []byte
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if dst, err = AppendBinary(dst[:0], doc); err != nil {
			b.Fatal(err)
		}
	}
}
