package rowcodec

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

func TestPackAndValuesRoundTrip(t *testing.T) {
	in := [][]byte{[]byte("1"), nil, {}, []byte("a\x00b")}
	row := &rowliftv1.Row{}
	Pack(row, in)
	require.Equal(t, []int64{1, -1, 0, 3}, row.Lengths)
	out, err := Values(nil, row)
	require.NoError(t, err)
	require.Len(t, out, 4)
	require.Nil(t, out[1], "NULL stays nil")
	require.NotNil(t, out[2], "an empty string is not NULL")
	require.Empty(t, out[2])
	require.Equal(t, []byte("a\x00b"), out[3])

	Pack(row, [][]byte{[]byte("xy")})
	require.Equal(t, []int64{2}, row.Lengths, "Pack reuses and resets the row")
	require.Equal(t, "xy", string(row.Values))
}

// A row whose values are all empty strings or NULL has no value bytes: its
// Values is nil after Pack and after a protobuf round trip. Its empty strings
// must still not read back as NULL (an empty string key would become NULL).
func TestValuesEmptyStringsInRowWithoutBytes(t *testing.T) {
	row := &rowliftv1.Row{}
	Pack(row, [][]byte{{}, nil, {}})
	wire, err := proto.Marshal(row)
	require.NoError(t, err)
	decoded := &rowliftv1.Row{}
	require.NoError(t, proto.Unmarshal(wire, decoded))
	for _, r := range []*rowliftv1.Row{row, decoded, {Lengths: []int64{0, -1, 0}}} {
		out, err := Values(nil, r)
		require.NoError(t, err)
		require.Len(t, out, 3)
		require.NotNil(t, out[0], "an empty string is not NULL")
		require.Empty(t, out[0])
		require.Nil(t, out[1], "NULL stays nil")
		require.NotNil(t, out[2], "an empty string is not NULL")
		lit, err := AppendLiteral(nil, String, out[0])
		require.NoError(t, err)
		require.Equal(t, "''", string(lit))
	}
}

func TestValuesRejectsMalformedRows(t *testing.T) {
	_, err := Values(nil, &rowliftv1.Row{Lengths: []int64{5}, Values: []byte("abc")})
	require.ErrorContains(t, err, "truncated")
	_, err = Values(nil, &rowliftv1.Row{Lengths: []int64{1}, Values: []byte("abc")})
	require.ErrorContains(t, err, "2 bytes after its last value")
}

func TestKindOf(t *testing.T) {
	for dt, want := range map[string]Kind{
		"bigint": Number, "decimal": Number, "float": Float, "double": Float, "real": Float, "year": Number,
		"date": Temporal, "datetime": Temporal, "timestamp": Temporal, "time": Temporal,
		"bit": Bits, "varchar": String, "blob": String, "enum": String, "set": String, "json": String, "binary": String,
	} {
		require.Equal(t, want, KindOf(dt), dt)
	}
}

func TestAppendLiteral(t *testing.T) {
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	cases := []struct {
		kind Kind
		in   []byte
		want string
	}{
		{Number, nil, "NULL"},
		{Number, []byte("-9223372036854775808"), "-9223372036854775808"},
		{Float, []byte("-0"), "-0e0"},
		{Float, []byte("0.1"), "0.1e0"},
		{Float, []byte("1.7976931348623157e308"), "1.7976931348623157e308"},
		{Float, []byte("-1E-45"), "-1E-45"},
		{Float, nil, "NULL"},
		{Temporal, []byte("0000-00-00 00:00:00"), "'0000-00-00 00:00:00'"},
		{Bits, []byte{0xff, 0x00}, "X'FF00'"},
		{String, []byte{}, "''"},
		{String, []byte("a'b\\c\"d"), `'a\'b\\c"d'`},
		{String, []byte("\x00\n\r\x1a"), `'\0\n\r\Z'`},
		{JSON, nil, "NULL"},
		{JSON, []byte(`{"a": "x'y"}`), `_utf8mb4'{"a": "x\'y"}'`},
		{JSON, []byte("[1.50]\x00\x04$[0]\x01\x041.50"), `JSON_SET(CAST(_utf8mb4'[1.50]' AS JSON), _utf8mb4'$[0]', CAST(1.50 AS DECIMAL(3,2)))`},
		{JSONText, []byte("[1.50]\x00\x04$[0]\x01\x041.50"), `'[1.50]'`},
	}
	for _, c := range cases {
		lit, err := AppendLiteral(nil, c.kind, c.in)
		require.NoError(t, err)
		require.Equal(t, c.want, string(lit))
	}
	_, err := AppendLiteral(nil, JSON, []byte("[1]\x00\x04$[0]\x01\x041;--"))
	require.ErrorContains(t, err, "not a decimal number")
	// Every byte survives: unescaping the literal as the server does gives it back.
	lit, err := AppendLiteral(nil, String, every)
	require.NoError(t, err)
	require.Equal(t, every, unescape(t, lit))
}

// unescape reverses a quoted binary literal the way the server parses it.
func unescape(t *testing.T, lit []byte) []byte {
	require.Equal(t, byte('\''), lit[0])
	require.Equal(t, byte('\''), lit[len(lit)-1])
	var out []byte
	body := lit[1 : len(lit)-1]
	for i := 0; i < len(body); i++ {
		b := body[i]
		require.NotEqual(t, byte('\''), b, "unescaped quote at %d", i)
		if b != '\\' {
			out = append(out, b)
			continue
		}
		i++
		switch body[i] {
		case '0':
			out = append(out, 0)
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 'Z':
			out = append(out, 0x1a)
		default:
			out = append(out, body[i])
		}
	}
	return out
}

func TestAppendComparable(t *testing.T) {
	require.Equal(t, "_utf8mb4 X'C3A9'", string(AppendComparable(nil, String, "utf8mb4", []byte("é"))),
		"strings compare under the column's character set and collation")
	require.Equal(t, `'\0'`, string(AppendComparable(nil, String, "binary", []byte{0})))
	require.Equal(t, `'x'`, string(AppendComparable(nil, String, "", []byte("x"))), "binary types carry no charset")
	require.Equal(t, "42", string(AppendComparable(nil, Number, "", []byte("42"))))
	require.Equal(t, "NULL", string(AppendComparable(nil, String, "latin1", nil)))
}

func TestIdentQuoting(t *testing.T) {
	require.Equal(t, "`we``ird`", Ident("we`ird"))
	require.Equal(t, "`d`.`t`", QualifiedIdent("d", "t"))
}

func TestAppendLoadField(t *testing.T) {
	require.Equal(t, `\N`, string(AppendLoadField(nil, nil)))
	require.Equal(t, "", string(AppendLoadField(nil, []byte{})), "an empty string is an empty field, not NULL")
	require.Equal(t, `a\tb\\c\0d\ne\rf'"`, string(AppendLoadField(nil, []byte("a\tb\\c\x00d\ne\rf'\""))))
	require.Equal(t, `\\N`, string(AppendLoadField(nil, []byte(`\N`))), "the text \\N is not NULL")
}

func TestKeyRangeConditions(t *testing.T) {
	k := &Key{Idents: []string{"`r`", "`id`"}, Kinds: []Kind{String, Number}, Charsets: []string{"utf8mb4", ""}}
	v := [][]byte{[]byte("eu"), []byte("5")}
	require.Equal(t, "`r` >= _utf8mb4 X'6575' AND (`r` > _utf8mb4 X'6575' OR (`r` = _utf8mb4 X'6575' AND (`id` > 5)))",
		string(k.AppendAfter(nil, v)))
	require.Equal(t, "`r` <= _utf8mb4 X'6575' AND NOT (`r` > _utf8mb4 X'6575' OR (`r` = _utf8mb4 X'6575' AND (`id` > 5)))",
		string(k.AppendUpTo(nil, v)), "up to and including v")
}
