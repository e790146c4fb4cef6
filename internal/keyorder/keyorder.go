// Package keyorder compares key values of one table exactly as the source server's
// ORDER BY on the key columns orders them. The streamer forwards a binlog change
// of a table still being copied only when its key is at or below the last copied
// key, so a comparison that disagreed with the server on a single pair would lose
// or double a row.
//
// Values are in the stream's Row encoding (see rowlift.v1.Row). Every type whose
// order follows from that text or those bytes alone is compared in Go: numbers by
// value, temporal values by their digits, BIT and binary strings by bytes, and
// strings under the binary collations of latin1, ascii and UTF-8 (MySQL's
// utf8mb4_0900_bin too, except for CHAR) by bytes, padded with spaces under PAD
// SPACE. Strings under any other collation are compared by
// the source server itself, which is exact by construction but costs a query.
package keyorder

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/schema"
)

// method is how one key column is compared.
type method uint8

const (
	// byDecimal compares decimal text by value: integers, DECIMAL, YEAR.
	byDecimal method = iota
	// byFloat parses FLOAT (as its DOUBLE widening) and DOUBLE text.
	byFloat
	// byTemporal compares DATE, DATETIME, TIMESTAMP and TIME text by value.
	byTemporal
	// byBits compares BIT's raw big-endian bytes as an unsigned number.
	byBits
	// byBytes compares bytes, a prefix first: VARBINARY, BLOB, and strings
	// under NO PAD binary collations.
	byBytes
	// byPadded compares bytes as if the shorter value went on with pad bytes:
	// BINARY (zero bytes), CHAR and strings under PAD SPACE binary collations
	// (spaces).
	byPadded
	// byServer asks the source server.
	byServer
)

// column is one key column and how it is compared.
type column struct {
	name     string
	dataType string
	how      method
	// pad is the byte byPadded pads with.
	pad byte
	// utf8Max is the longest character in bytes of a UTF-8 character set, whose
	// values are checked to be well-formed before a byte comparison; 0 for
	// single-byte character sets.
	utf8Max int
	// charset and collation of a string column; a byServer column's literals
	// carry them.
	charset, collation string
	// padChars is the length a byServer CHAR column's values are padded to, as
	// MariaDB does before comparing them; 0 for no padding.
	padChars int
}

// Order compares key values of one table as the server's ORDER BY on the key
// columns does, so the streamer's "at or below the last copied key" decision
// agrees with the order in which chunks copy the rows.
type Order struct {
	db       *sql.DB
	cols     []column
	fallback string
}

// bytewiseCharsets maps each character set whose binary collations order values
// like their bytes to its longest character in bytes, 0 for single-byte sets.
// UTF-8 bytes sort like their code points, which is what the UTF-8 binary
// collations compare (see TestUTF8ByteOrderIsCodePointOrder).
var bytewiseCharsets = map[string]int{"latin1": 0, "ascii": 0, "utf8": 3, "utf8mb3": 3, "utf8mb4": 4}

var (
	sqlName    = regexp.MustCompile(`^[0-9A-Za-z_]+$`)
	charLength = regexp.MustCompile(`^(?i)char\((\d+)\)`)
)

// New prepares the comparison of keys made of cols, the key columns in key
// order, so that each Compare needs no metadata. db is the source server; it is
// used only for columns compared by the server. It fails with schema.ErrNoKey
// for a key column type whose order it does not know.
func New(ctx context.Context, db *sql.DB, cols []schema.Column) (*Order, error) {
	if len(cols) == 0 {
		return nil, fmt.Errorf("%w: no key columns to compare", schema.ErrNoKey)
	}
	o := &Order{db: db}
	mariaDB := sync.OnceValues(func() (bool, error) {
		var version string
		if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
			return false, fmt.Errorf("source server version: %w", err)
		}
		return strings.Contains(version, "MariaDB"), nil
	})
	var byServerNames []string
	for _, sc := range cols {
		c := column{name: sc.Name, dataType: sc.DataType, charset: sc.Charset, collation: sc.Collation}
		switch sc.DataType {
		case "tinyint", "smallint", "mediumint", "int", "bigint", "decimal", "year":
			c.how = byDecimal
		case "float", "double":
			c.how = byFloat
		case "date", "datetime", "timestamp", "time":
			c.how = byTemporal
		case "bit":
			c.how = byBits
		case "binary":
			// The binlog gives BINARY values without their trailing zero bytes,
			// SELECT with them; the server compares them padded.
			c.how, c.pad = byPadded, 0
		case "varbinary", "tinyblob", "blob", "mediumblob", "longblob":
			c.how = byBytes
		case "char", "varchar", "tinytext", "text", "mediumtext", "longtext":
			bytewise, padSpace := Bytewise(sc.DataType, sc.Charset, sc.Collation)
			switch {
			case bytewise && padSpace:
				c.how, c.pad, c.utf8Max = byPadded, ' ', bytewiseCharsets[sc.Charset]
			case bytewise:
				c.how, c.utf8Max = byBytes, bytewiseCharsets[sc.Charset]
			default:
				if err := serverColumn(&c, sc, mariaDB); err != nil {
					return nil, err
				}
				byServerNames = append(byServerNames, fmt.Sprintf("%s (%s)", sc.Name, sc.Collation))
			}
		default:
			return nil, fmt.Errorf("%w: key column %s is %s; rowlift cannot compare its order", schema.ErrNoKey, sc.Name, sc.ColumnType)
		}
		o.cols = append(o.cols, c)
	}
	switch len(byServerNames) {
	case 0:
	case 1:
		o.fallback = "key column " + byServerNames[0] + " is compared by the source server"
	default:
		o.fallback = "key columns " + strings.Join(byServerNames, ", ") + " are compared by the source server"
	}
	return o, nil
}

// Bytewise reports whether the server compares values of a CHAR, VARCHAR or
// TEXT column of this character set and collation by their bytes alone, so a
// caller can order them, or tell equal ones, without asking it; and if so,
// whether as if the shorter value went on with spaces (padSpace), which makes
// values that differ only in trailing spaces equal. It is true only for the
// binary collations of latin1, ascii and UTF-8, whose byte order is code point
// order; every other collation (case- or accent-insensitive ones, other
// character sets) is the server's to apply. UTF-8 values must be well-formed
// for the byte comparison to hold; the server stores no other.
func Bytewise(dataType, charset, collation string) (bytewise, padSpace bool) {
	if _, known := bytewiseCharsets[charset]; !known {
		return false, false
	}
	switch collation {
	case charset + "_bin":
		return true, true
	case charset + "_nopad_bin":
		// MariaDB orders CHAR values padded to the column's length even
		// under NO PAD collations: 'a\t' sorts before 'a' (its < and = trim
		// them instead and disagree with that order, but both make values
		// that differ only in trailing spaces equal).
		return true, dataType == "char"
	case "utf8mb4_0900_bin":
		// MySQL's NO PAD binary collation. Its CHAR values are left to the
		// server: MySQL compares them with trailing spaces removed, and a
		// MariaDB that knows the name treats CHAR as above.
		return dataType != "char", false
	}
	return false, false
}

// serverColumn sets c up for comparison by the server. MariaDB orders CHAR
// values padded to the column's length, which matters under NO PAD collations,
// and literals do not carry that length, so a CHAR column's literals are padded
// with RPAD there; MySQL trims CHAR values instead, as they arrive.
// mariaDB tells the flavor, asking the server at most once per New.
func serverColumn(c *column, sc schema.Column, mariaDB func() (bool, error)) error {
	if !sqlName.MatchString(sc.Charset) || !sqlName.MatchString(sc.Collation) {
		return fmt.Errorf("key column %s has unexpected character set %q or collation %q", sc.Name, sc.Charset, sc.Collation)
	}
	c.how = byServer
	if sc.DataType != "char" {
		return nil
	}
	m := charLength.FindStringSubmatch(sc.ColumnType)
	if m == nil {
		return fmt.Errorf("key column %s is CHAR but its type is %q", sc.Name, sc.ColumnType)
	}
	isMariaDB, err := mariaDB()
	if err != nil {
		return fmt.Errorf("key column %s: %w", sc.Name, err)
	}
	if isMariaDB {
		n, err := strconv.Atoi(m[1])
		if err != nil {
			return fmt.Errorf("key column %s: length of %s: %w", sc.Name, sc.ColumnType, err)
		}
		c.padChars = n
	}
	return nil
}

// Exact reports whether every key column is compared in Go, so Compare never
// waits for the server; status shows Fallback otherwise.
func (o *Order) Exact() bool {
	return o.fallback == ""
}

// Fallback says, for status, which key columns the source server compares and
// why Compare costs a query; empty when Exact.
func (o *Order) Fallback() string {
	return o.fallback
}

// Compare compares two keys in Row encoding, values in key column order, and
// returns -1, 0 or +1 as the server's ORDER BY would order them. It fails on a
// value that is not in the Row encoding of its column, because the order is
// proven only for those forms, and when the server cannot be asked.
func (o *Order) Compare(ctx context.Context, a, b [][]byte) (int, error) {
	if len(a) != len(o.cols) || len(b) != len(o.cols) {
		return 0, fmt.Errorf("compare keys of %d and %d values, key has %d columns", len(a), len(b), len(o.cols))
	}
	for i := range o.cols {
		c, err := o.compareColumn(ctx, &o.cols[i], a[i], b[i])
		if err != nil {
			return 0, fmt.Errorf("compare key column %s: %w", o.cols[i].name, err)
		}
		if c != 0 {
			return c, nil
		}
	}
	return 0, nil
}

func (o *Order) compareColumn(ctx context.Context, c *column, a, b []byte) (int, error) {
	if err := c.check(a); err != nil {
		return 0, err
	}
	if err := c.check(b); err != nil {
		return 0, err
	}
	switch c.how {
	case byDecimal:
		return CompareDecimal(a, b), nil
	case byFloat:
		return compareFloat(a, b)
	case byTemporal:
		return CompareTemporal(a, b), nil
	case byBits:
		return compareBits(a, b), nil
	case byBytes:
		return bytes.Compare(a, b), nil
	case byPadded:
		return comparePadded(a, b, c.pad), nil
	}
	if bytes.Equal(a, b) {
		return 0, nil // equal under every collation: no need to ask
	}
	return o.serverCompare(ctx, c, a, b)
}

// check returns an error when v cannot be a value of c in the Row encoding.
func (c *column) check(v []byte) error {
	switch {
	case v == nil:
		return errors.New("NULL in a key")
	case c.how == byDecimal && !isDecimal(v), c.how == byTemporal && !isTemporal(c.dataType, v):
		return fmt.Errorf("%q is not %s text", v, strings.ToUpper(c.dataType))
	case c.utf8Max > 0 && !wellFormed(v, c.utf8Max):
		return fmt.Errorf("%q is not well-formed %s", v, c.charset)
	}
	return nil
}

// serverCompare asks the source server to compare a and b under c's collation.
func (o *Order) serverCompare(ctx context.Context, c *column, a, b []byte) (int, error) {
	la, lb := string(c.appendLiteral(nil, a)), string(c.appendLiteral(nil, b))
	var less, equal bool
	if err := o.db.QueryRowContext(ctx, "SELECT "+la+" < "+lb+", "+la+" = "+lb).Scan(&less, &equal); err != nil {
		return 0, fmt.Errorf("source server: %w", err)
	}
	switch {
	case less:
		return -1, nil
	case equal:
		return 0, nil
	}
	return 1, nil
}

// appendLiteral appends v as a string literal in c's character set and collation,
// padded like the server pads the column's values.
func (c *column) appendLiteral(buf, v []byte) []byte {
	if c.padChars > 0 {
		buf = append(buf, "RPAD("...)
	}
	buf = rowcodec.AppendComparable(buf, rowcodec.String, c.charset, v)
	buf = append(buf, " COLLATE "...)
	buf = append(buf, c.collation...)
	if c.padChars > 0 {
		buf = append(buf, ", "...)
		buf = strconv.AppendInt(buf, int64(c.padChars), 10)
		buf = append(buf, ", ' ')"...)
	}
	return buf
}

// CompareDecimal compares two decimal numbers in text, like "-12.50" and "3", by
// value and without limits on their size, as the server orders integers,
// DECIMAL and YEAR; verify merges its key streams with it too.
func CompareDecimal(a, b []byte) int {
	aNeg, aInt, aFrac := splitNumber(a)
	bNeg, bInt, bFrac := splitNumber(b)
	if aNeg != bNeg {
		if aNeg {
			return -1
		}
		return 1
	}
	c := len(aInt) - len(bInt)
	if c == 0 {
		c = bytes.Compare(aInt, bInt)
	}
	if c == 0 {
		c = bytes.Compare(aFrac, bFrac)
	}
	c = min(max(c, -1), 1)
	if aNeg {
		return -c
	}
	return c
}

// splitNumber splits decimal text into its sign, its integer digits without
// leading zeros and its fraction digits without trailing zeros; zero is never
// negative.
func splitNumber(v []byte) (neg bool, intPart, frac []byte) {
	if len(v) > 0 && v[0] == '-' {
		neg, v = true, v[1:]
	}
	intPart, frac, _ = bytes.Cut(v, []byte{'.'})
	intPart = bytes.TrimLeft(intPart, "0")
	frac = bytes.TrimRight(frac, "0")
	if len(intPart) == 0 && len(frac) == 0 {
		neg = false
	}
	return neg, intPart, frac
}

// CompareTemporal compares two DATE, DATETIME, TIMESTAMP or TIME values in the
// server's text by value; verify merges its key streams with it too. Left
// without separators, "-838:59:59.5" is -8385959.5 and "2024-01-02 03:04:05" is
// 20240102030405: every field after the first has a fixed width, so the digits
// form a number that sorts like the value, zero dates ("0000-00-00") first. Only
// TIME can be negative, with a leading '-'. With time_zone '+00:00', TIMESTAMP
// text has no gaps or repeats, so it sorts like the stored instant.
func CompareTemporal(a, b []byte) int {
	var aBuf, bBuf [32]byte
	return CompareDecimal(temporalDigits(aBuf[:0], a), temporalDigits(bBuf[:0], b))
}

// temporalDigits appends v without its separators.
func temporalDigits(dst, v []byte) []byte {
	for i, ch := range v {
		if ch == ':' || ch == ' ' || (ch == '-' && i > 0) {
			continue
		}
		dst = append(dst, ch)
	}
	return dst
}

// compareFloat compares FLOAT or DOUBLE text by value; -0 equals 0, as on the
// server (which stores -0 as 0 anyway).
func compareFloat(a, b []byte) (int, error) {
	x, err := parseFloat(a)
	if err != nil {
		return 0, err
	}
	y, err := parseFloat(b)
	if err != nil {
		return 0, err
	}
	return cmp.Compare(x, y), nil
}

func parseFloat(v []byte) (float64, error) {
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("%q is not FLOAT or DOUBLE text", v)
	}
	return f, nil
}

// compareBits compares BIT values, raw big-endian bytes, as unsigned numbers.
func compareBits(a, b []byte) int {
	a, b = bytes.TrimLeft(a, "\x00"), bytes.TrimLeft(b, "\x00")
	if c := cmp.Compare(len(a), len(b)); c != 0 {
		return c
	}
	return bytes.Compare(a, b)
}

// comparePadded compares a and b as if the shorter one went on with pad bytes.
// For well-formed UTF-8 this is PAD SPACE on code points: every byte of a
// multi-byte character is above the space, so the first character after the
// shorter value that is not a space decides, as in the server's comparison.
func comparePadded(a, b []byte, pad byte) int {
	n := min(len(a), len(b))
	if c := bytes.Compare(a[:n], b[:n]); c != 0 {
		return c
	}
	// At most one of the rests is not empty.
	return padSign(a[n:], pad) - padSign(b[n:], pad)
}

// padSign compares rest with as many pad bytes.
func padSign(rest []byte, pad byte) int {
	for _, ch := range rest {
		if ch != pad {
			return cmp.Compare(ch, pad)
		}
	}
	return 0
}

// isDecimal reports whether v is decimal text: an optional '-', digits, and
// optionally '.' and more digits.
func isDecimal(v []byte) bool {
	v = bytes.TrimPrefix(v, []byte{'-'})
	intPart, frac, hasFrac := bytes.Cut(v, []byte{'.'})
	return isDigits(intPart) && (!hasFrac || isDigits(frac))
}

// isTemporal reports whether v is the server's text of a value of dataType:
// 'YYYY-MM-DD', 'YYYY-MM-DD hh:mm:ss' or '[-]hh:mm:ss' with two or three hour
// digits, the last two with up to six fraction digits.
func isTemporal(dataType string, v []byte) bool {
	if i := bytes.IndexByte(v, '.'); i >= 0 {
		if frac := v[i+1:]; dataType == "date" || len(frac) > 6 || !isDigits(frac) {
			return false
		}
		v = v[:i]
	}
	layout := "dddd-dd-dd dd:dd:dd"
	switch dataType {
	case "date":
		layout = "dddd-dd-dd"
	case "time":
		v = bytes.TrimPrefix(v, []byte{'-'})
		layout = "dd:dd:dd"
		if len(v) == len("ddd:dd:dd") {
			layout = "ddd:dd:dd"
		}
	}
	if len(v) != len(layout) {
		return false
	}
	for i, ch := range v {
		if layout[i] == 'd' && (ch < '0' || ch > '9') || layout[i] != 'd' && ch != layout[i] {
			return false
		}
	}
	return true
}

// isDigits reports whether v is one or more ASCII digits.
func isDigits(v []byte) bool {
	for _, ch := range v {
		if ch < '0' || ch > '9' {
			return false
		}
	}
	return len(v) > 0
}

// wellFormed reports whether v is UTF-8 as the server accepts it in a column:
// shortest forms of code points up to U+10FFFF, surrogates included (MariaDB
// stores them), of at most maxLen bytes each (3 for utf8mb3). Byte order is code
// point order only for such text.
func wellFormed(v []byte, maxLen int) bool {
	for len(v) > 0 {
		var n int
		switch b := v[0]; {
		case b < 0x80:
			n = 1
		case b < 0xC2:
			return false
		case b < 0xE0:
			n = 2
		case b < 0xF0:
			n = 3
		case b < 0xF5:
			n = 4
		default:
			return false
		}
		if n > maxLen || len(v) < n {
			return false
		}
		for _, ch := range v[1:n] {
			if ch&0xC0 != 0x80 {
				return false
			}
		}
		if n > 2 && (v[0] == 0xE0 && v[1] < 0xA0 || v[0] == 0xF0 && v[1] < 0x90 || v[0] == 0xF4 && v[1] >= 0x90) {
			return false
		}
		v = v[n:]
	}
	return true
}
