// Package rowcodec packs rows for the stream and writes their values back as SQL
// literals that reproduce the source bytes exactly. Values are in MySQL text
// protocol form read with character_set_results=binary and time_zone='+00:00' (see
// rowlift.v1.Row); every function here appends into caller-owned buffers so the
// hot paths allocate nothing per value.
package rowcodec

import (
	"bytes"
	"fmt"

	"github.com/rowlift/rowlift/internal/mysqljson"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// Pack appends values (nil means NULL) to row, reusing row's storage.
func Pack(row *rowliftv1.Row, values [][]byte) {
	row.Lengths = row.Lengths[:0]
	row.Values = row.Values[:0]
	for _, v := range values {
		if v == nil {
			row.Lengths = append(row.Lengths, -1)
			continue
		}
		row.Lengths = append(row.Lengths, int64(len(v)))
		row.Values = append(row.Values, v...)
	}
}

// emptyValue is an empty string value: non-nil, so it is not taken for NULL.
var emptyValue = []byte{}

// Values splits a packed row into values (nil for NULL), appending to dst.
// The returned slices alias row.Values.
func Values(dst [][]byte, row *rowliftv1.Row) ([][]byte, error) {
	off := int64(0)
	for _, n := range row.GetLengths() {
		if n < 0 {
			dst = append(dst, nil)
			continue
		}
		if n == 0 {
			// Not a slice of row.Values: that is nil when no value has a byte (a
			// row of only empty strings and NULLs), and a slice of nil is nil.
			dst = append(dst, emptyValue[:0:0])
			continue
		}
		if off+n > int64(len(row.GetValues())) {
			return dst, fmt.Errorf("packed row is truncated: value of %d bytes at offset %d of %d", n, off, len(row.GetValues()))
		}
		dst = append(dst, row.Values[off:off+n:off+n])
		off += n
	}
	if off != int64(len(row.GetValues())) {
		return dst, fmt.Errorf("packed row has %d bytes after its last value", int64(len(row.GetValues()))-off)
	}
	return dst, nil
}

// Kind says how a column's values are written as SQL literals.
type Kind uint8

// The literal kinds.
const (
	// String values are written as escaped binary string literals; with
	// character_set_client=binary the server stores their bytes unconverted.
	String Kind = iota
	// Number values (integers, DECIMAL, YEAR) are written bare.
	Number
	// Temporal values (DATE, TIME, DATETIME, TIMESTAMP) are written quoted.
	Temporal
	// Bits (BIT) are written as hex literals; their text form is raw bytes.
	Bits
	// Float values (FLOAT, DOUBLE) are written as approximate-value literals
	// (with an exponent): MySQL reads a plain -0 as the integer 0 and would
	// store +0 for a DOUBLE's -0.
	Float
	// JSON values for a MySQL JSON column are typed values (see package
	// mysqljson) written as utf8mb4 string literals, through JSON_SET when
	// they carry patches: MySQL makes no JSON value of a binary string, which
	// every String literal is under SET NAMES binary (MariaDB's JSON is text
	// and takes String literals).
	JSON
	// JSONText values are a MySQL source's typed JSON values written into a
	// text column (MariaDB's JSON): their text alone, as a String.
	JSONText
)

// KindOf maps an information_schema DATA_TYPE to its literal kind.
func KindOf(dataType string) Kind {
	switch dataType {
	case "tinyint", "smallint", "mediumint", "int", "integer", "bigint",
		"decimal", "numeric", "year":
		return Number
	case "float", "double", "real":
		return Float
	case "date", "time", "datetime", "timestamp":
		return Temporal
	case "bit":
		return Bits
	}
	return String
}

// AppendLiteral appends v (nil for NULL) as a literal of the given kind, for a
// VALUES list: string bytes go in unconverted. Only a JSON value can fail: a
// patch that is not what its type says.
func AppendLiteral(buf []byte, kind Kind, v []byte) ([]byte, error) {
	if v == nil {
		return append(buf, "NULL"...), nil
	}
	switch kind {
	case Number:
		return append(buf, v...), nil
	case Float:
		buf = append(buf, v...)
		if !bytes.ContainsAny(v, "eE") {
			buf = append(buf, 'e', '0')
		}
		return buf, nil
	case Temporal:
		buf = append(buf, '\'')
		buf = append(buf, v...)
		return append(buf, '\''), nil
	case Bits:
		return appendHex(buf, v), nil
	case JSON:
		return mysqljson.AppendSQL(buf, v, appendEscaped)
	case JSONText:
		v, _ = mysqljson.Split(v)
	}
	return appendEscaped(buf, v), nil
}

// AppendComparable appends v as a literal to compare against a column of the given
// kind and character set in a WHERE clause. Strings carry the column's character
// set, so the comparison uses the column's collation, exactly like ORDER BY does;
// a binary literal would compare bytes instead and break key order for
// case-insensitive keys.
func AppendComparable(buf []byte, kind Kind, charset string, v []byte) []byte {
	if kind != String || charset == "" || charset == "binary" || v == nil {
		buf, _ = AppendLiteral(buf, kind, v) // keys hold no JSON
		return buf
	}
	buf = append(buf, '_')
	buf = append(buf, charset...)
	buf = append(buf, ' ')
	return appendHex(buf, v)
}

const hexDigits = "0123456789ABCDEF"

func appendHex(buf, v []byte) []byte {
	buf = append(buf, "X'"...)
	for _, b := range v {
		buf = append(buf, hexDigits[b>>4], hexDigits[b&15])
	}
	return append(buf, '\'')
}

// appendEscaped quotes v the way mysql_real_escape_string does for a binary
// connection character set, where every backslash byte is an escape.
func appendEscaped(buf, v []byte) []byte {
	buf = append(buf, '\'')
	buf = appendEscapes(buf, v, &literalEscapes)
	return append(buf, '\'')
}

// escapeTable maps a byte to the letter that follows its backslash, or 0 for a
// byte written as itself.
type escapeTable [256]byte

func newEscapeTable(pairs string) (t escapeTable) {
	for i := 0; i < len(pairs); i += 2 {
		t[pairs[i]] = pairs[i+1]
	}
	return t
}

var (
	// literalEscapes are the escapes of a quoted SQL string literal.
	literalEscapes = newEscapeTable("\x000\nn\rr\\\\''\x1aZ")
	// loadEscapes are the escapes of a LOAD DATA field (ESCAPED BY '\\').
	loadEscapes = newEscapeTable("\x000\tt\nn\rr\\\\")
)

func appendEscapes(buf, v []byte, table *escapeTable) []byte {
	start := 0
	for i, b := range v {
		if esc := table[b]; esc != 0 {
			buf = append(buf, v[start:i]...)
			buf = append(buf, '\\', esc)
			start = i + 1
		}
	}
	return append(buf, v[start:]...)
}

// AppendIdent appends a backtick-quoted identifier.
func AppendIdent(buf []byte, name string) []byte {
	buf = append(buf, '`')
	for i := 0; i < len(name); i++ {
		if name[i] == '`' {
			buf = append(buf, '`')
		}
		buf = append(buf, name[i])
	}
	return append(buf, '`')
}

// Ident returns a backtick-quoted identifier.
func Ident(name string) string {
	return string(AppendIdent(nil, name))
}

// QualifiedIdent returns `db`.`table`.
func QualifiedIdent(db, table string) string {
	return Ident(db) + "." + Ident(table)
}

// AppendLoadField appends v (nil for NULL) as one field of LOAD DATA input with
// FIELDS TERMINATED BY '\t' ESCAPED BY '\\' LINES TERMINATED BY '\n' and CHARACTER
// SET binary. Every kind is written as its raw bytes: the server parses numbers and
// temporals from text and stores string and BIT bytes as they are.
func AppendLoadField(buf []byte, v []byte) []byte {
	if v == nil {
		return append(buf, '\\', 'N')
	}
	return appendEscapes(buf, v, &loadEscapes)
}

// SelectExpr is how a column is selected to be streamed: its value as text
// that writes back exactly. A FLOAT's text has 6 significant digits, its
// DOUBLE all of them; a YEAR goes as text, since go-sql-driver parses "0000"
// to 0 and LOAD DATA reads the string '0' as 2000.
func SelectExpr(name, dataType string) string {
	switch dataType {
	case "float":
		return "CAST(" + Ident(name) + " AS DOUBLE)"
	case "year":
		return "CAST(" + Ident(name) + " AS CHAR)"
	}
	return Ident(name)
}

// Key is a table's key as WHERE clauses compare it: its columns quoted, with
// their literal kinds and character sets.
type Key struct {
	Idents   []string
	Kinds    []Kind
	Charsets []string
}

// AppendAfter appends the condition "key > v", written so that the server
// uses a range scan on the key: a leading `k1 >= v1` bounds the index, and
// the rest is the lexicographic "greater than" expanded per column (row
// constructors are not range-optimized by every server version).
func (k *Key) AppendAfter(buf []byte, v [][]byte) []byte {
	buf = append(buf, k.Idents[0]...)
	buf = append(buf, " >= "...)
	buf = AppendComparable(buf, k.Kinds[0], k.Charsets[0], v[0])
	buf = append(buf, " AND "...)
	return k.appendGreater(buf, v, 0)
}

// AppendUpTo appends the condition "key <= v", led by `k1 <= v1` for the
// range scan.
func (k *Key) AppendUpTo(buf []byte, v [][]byte) []byte {
	buf = append(buf, k.Idents[0]...)
	buf = append(buf, " <= "...)
	buf = AppendComparable(buf, k.Kinds[0], k.Charsets[0], v[0])
	buf = append(buf, " AND NOT "...)
	return k.appendGreater(buf, v, 0)
}

// appendGreater appends (k_i, ..., k_n) > (v_i, ..., v_n) as
// (k_i > v_i OR (k_i = v_i AND <greater from i+1>)).
func (k *Key) appendGreater(buf []byte, v [][]byte, i int) []byte {
	buf = append(buf, '(')
	buf = append(buf, k.Idents[i]...)
	buf = append(buf, " > "...)
	buf = AppendComparable(buf, k.Kinds[i], k.Charsets[i], v[i])
	if i+1 < len(v) {
		buf = append(buf, " OR ("...)
		buf = append(buf, k.Idents[i]...)
		buf = append(buf, " = "...)
		buf = AppendComparable(buf, k.Kinds[i], k.Charsets[i], v[i])
		buf = append(buf, " AND "...)
		buf = k.appendGreater(buf, v, i+1)
		buf = append(buf, ')')
	}
	return append(buf, ')')
}
