package keyorder

import (
	"bytes"
	"database/sql"
	"encoding/hex"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/schema"
)

// keyColumn is one key column of a test table and the values it takes, as SQL
// literals.
type keyColumn struct {
	def    string // column type with character set and collation
	prefix string // key prefix length, for TEXT and BLOB
	values []string
}

// col is a key column of type def taking values.
func col(def string, values ...string) keyColumn {
	return keyColumn{def: def, values: values}
}

// hexes writes raw byte strings as hex literals, which the server stores
// unconverted in any character set.
func hexes(values ...string) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = "X'" + hex.EncodeToString([]byte(v)) + "'"
	}
	return out
}

// quoted writes values as quoted literals.
func quoted(values ...string) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = "'" + v + "'"
	}
	return out
}

// integers are the edge values of an integer type of the given width.
func integers(bits uint, unsigned bool) []string {
	lo, hi := new(big.Int).Lsh(big.NewInt(-1), bits-1), new(big.Int).Lsh(big.NewInt(1), bits-1)
	if unsigned {
		lo, hi = big.NewInt(0), new(big.Int).Lsh(big.NewInt(1), bits)
	}
	hi.Sub(hi, big.NewInt(1))
	var out []string
	seen := map[string]bool{}
	add := func(v *big.Int) {
		if v.Cmp(lo) >= 0 && v.Cmp(hi) <= 0 && !seen[v.String()] {
			seen[v.String()] = true
			out = append(out, v.String())
		}
	}
	add(lo)
	add(new(big.Int).Add(lo, big.NewInt(1)))
	for _, v := range []int64{-100, -10, -9, -2, -1, 0, 1, 2, 9, 10, 99, 100} {
		add(big.NewInt(v))
	}
	signedMax := new(big.Int).Lsh(big.NewInt(1), bits-1)
	add(signedMax.Sub(signedMax, big.NewInt(1)))
	add(new(big.Int).Lsh(big.NewInt(1), bits-1))
	add(new(big.Int).Sub(hi, big.NewInt(1)))
	add(hi)
	return out
}

// utf8Values are strings that tell collations apart: empty, spaces, characters
// below the space, case and accents, ignorables, and the first and last code
// point of each UTF-8 length, surrogates included.
var utf8Values = []string{"", " ", "  ", "\t", "\n", "\x00", "\x1f", "!", "a", "a ", "a  ", "a\t", "a\x00", "a\x1f",
	"a!", "A", "A ", "b", "B", "ab", "aB", "Ab", "e", "E", "é", "É", "è", "ê", "e\u0301", "\u0301", "ß", "ss", "SS",
	"æ", "ae", "ı", "İ", "i", "\u00a0", "a\u00a0", "\u007f", "\u0080", "\u07ff", "\u0800", "€", "\ud7ff",
	"\xed\xa0\x80", "\xed\xbf\xbf", "\ue000", "\ufffd", "\uffff", "😀", "😁", "\U00010000", "\U0010ffff", "z", "~"}

// bmp are the values without 4-byte characters, for utf8mb3.
func bmp(values []string) []string {
	var out []string
	for _, v := range values {
		if !strings.ContainsFunc(v, func(r rune) bool { return r > 0xffff }) {
			out = append(out, v)
		}
	}
	return out
}

// latin1Values are latin1 bytes: accents, ß, bytes undefined in latin1, and the
// extremes.
var latin1Values = []string{"", " ", "  ", "\t", "\x00", "\x1f", "a", "a ", "a\t", "a\x00", "A", "b", "B", "e", "E",
	"\xe9", "\xc9", "\xe8", "\xdf", "ss", "\xe6", "ae", "\xa0", "a\xa0", "\x7f", "\x80", "\x81", "\x8d", "\x9f",
	"\xff", "\xd7", "\xf7", "z", "~", "\xc5", "\xc4", "\xd6", "\xfc", "u", "y", "Y"}

// asciiValues are the ASCII ones of latin1Values.
func asciiValues() []string {
	var out []string
	for _, v := range latin1Values {
		if !strings.ContainsFunc(v, func(r rune) bool { return r >= 0x80 }) {
			out = append(out, v)
		}
	}
	return out
}

var binaryValues = []string{"", "\x00", "\x00\x00", "\x01", "\x01\x00", "\x00\x01", " ", "  ", "\t", "a", "a ",
	"a\t", "a\x00", "A", "\x7f", "\x80", "\xff", "\xff\x00", "\xff\xff", "\xff\xff\xff\xff", "😀"}

// keyCase is a key of one or more columns whose order Compare must get right,
// and whether Compare needs no server for it.
type keyCase struct {
	name  string
	cols  []keyColumn
	exact bool
}

// keyCases are the keys to check on a flavor: every type and the collations
// of the flavor. MySQL refuses surrogates in UTF-8 and has neither MariaDB's
// NO PAD binary collations nor its unicode_nopad ones, but has its own UCA 9.0
// ones (utf8mb4_0900_*), the default.
func keyCases(flavor sandbox.Flavor) []keyCase {
	utf8Values := utf8Values
	if flavor == sandbox.MySQL {
		utf8Values = slices.DeleteFunc(slices.Clone(utf8Values), func(v string) bool { return strings.HasPrefix(v, "\xed\xa0") || strings.HasPrefix(v, "\xed\xbf") })
	}
	cases := []keyCase{
		{"tinyint", []keyColumn{col("TINYINT", integers(8, false)...)}, true},
		{"tinyint unsigned", []keyColumn{col("TINYINT UNSIGNED", integers(8, true)...)}, true},
		{"smallint", []keyColumn{col("SMALLINT", integers(16, false)...)}, true},
		{"smallint unsigned", []keyColumn{col("SMALLINT UNSIGNED", integers(16, true)...)}, true},
		{"mediumint", []keyColumn{col("MEDIUMINT", integers(24, false)...)}, true},
		{"mediumint unsigned", []keyColumn{col("MEDIUMINT UNSIGNED", integers(24, true)...)}, true},
		{"int", []keyColumn{col("INT", integers(32, false)...)}, true},
		{"int unsigned", []keyColumn{col("INT UNSIGNED", integers(32, true)...)}, true},
		{"bigint", []keyColumn{col("BIGINT", integers(64, false)...)}, true},
		{"bigint unsigned", []keyColumn{col("BIGINT UNSIGNED", integers(64, true)...)}, true},
		{"decimal(65,30)", []keyColumn{col("DECIMAL(65,30)",
			"-"+strings.Repeat("9", 35)+"."+strings.Repeat("9", 30), "-100", "-10", "-9.999999999999999999999999999999",
			"-1", "-0.5", "-0.000000000000000000000000000001", "0", "-0.0", "0.000000000000000000000000000001", "0.1", "0.5",
			"0.500000000000000000000000000001", "1", "1.000", "9", "10", "100",
			"12345678901234567890.123456789012345678901234567890", strings.Repeat("9", 35)+"."+strings.Repeat("9", 30))}, true},
		{"float", []keyColumn{col("FLOAT", "-3.4028234e38", "-1e30", "-16777217", "-2", "-1.5", "-1e-45", "-0e0", "0",
			"1e-45", "1.1754942e-38", "0.1", "0.5", "1", "1.0000001", "16777216", "16777217", "1e30", "3.4028234e38")}, true},
		{"double", []keyColumn{col("DOUBLE", "-1.7976931348623157e308", "-1e308", "-1", "-5e-324", "-0e0", "0", "5e-324",
			"2.2250738585072014e-308", "0.1", "0.30000000000000004", "0.3", "1", "1.0000000000000002", "9007199254740992",
			"9007199254740993", "1e308", "1.7976931348623157e308")}, true},
		{"year", []keyColumn{col("YEAR", "0", "1901", "69", "70", "1999", "2000", "2155")}, true},
		{"date", []keyColumn{col("DATE", quoted("0000-00-00", "0000-01-00", "0000-01-01", "0001-01-01", "0999-12-31",
			"1000-01-01", "1969-12-31", "2024-00-00", "2024-02-00", "2024-02-29", "9999-12-31")...)}, true},
		{"datetime(6)", []keyColumn{col("DATETIME(6)", quoted("0000-00-00 00:00:00", "0000-00-00 00:00:00.000001",
			"0000-00-00 23:59:59", "0001-01-01 00:00:00", "1000-01-01 00:00:00", "1969-12-31 23:59:59.999999",
			"1970-01-01 00:00:00", "2000-01-01 00:00:00", "2000-01-01 00:00:00.000001", "2000-01-01 00:00:01",
			"2000-01-01 00:01:00", "2000-01-01 01:00:00", "2000-01-01 09:59:59.999999", "2000-01-01 10:00:00",
			"2000-01-02 00:00:00", "2000-02-01 00:00:00", "2024-00-00 00:00:00", "9999-12-31 23:59:59.999999")...)}, true},
		{"datetime", []keyColumn{col("DATETIME", quoted("0000-00-00 00:00:00", "1000-01-01 00:00:00",
			"1999-12-31 23:59:59", "2000-01-01 00:00:00", "9999-12-31 23:59:59")...)}, true},
		{"timestamp(6)", []keyColumn{col("TIMESTAMP(6)", quoted("0000-00-00 00:00:00", "1970-01-01 00:00:01",
			"1970-01-01 00:00:01.000001", "1999-12-31 23:59:59.999999", "2000-01-01 00:00:00", "2000-01-01 09:59:59.999999",
			"2000-01-01 10:00:00", "2038-01-19 03:14:07.999999")...)}, true},
		{"time(6)", []keyColumn{col("TIME(6)", quoted("-838:59:59", "-838:59:58.999999", "-100:00:00", "-99:59:59.999999",
			"-10:00:00", "-9:59:59", "-1:00:00", "-00:00:01", "-00:00:00.5", "-00:00:00.000001", "00:00:00",
			"00:00:00.000001", "00:00:01", "09:59:59.999999", "10:00:00", "99:59:59.999999", "100:00:00",
			"100:00:00.000001", "838:59:59")...)}, true},
		{"time", []keyColumn{col("TIME", quoted("-838:59:59", "-100:00:00", "-1:00:00", "00:00:00", "9:59:59",
			"10:00:00", "100:00:00", "838:59:59")...)}, true},
		{"bit(64)", []keyColumn{col("BIT(64)", hexes("\x00\x00\x00\x00\x00\x00\x00\x00", "\x00\x00\x00\x00\x00\x00\x00\x01",
			"\x00\x00\x00\x00\x00\x00\x00\x7f", "\x00\x00\x00\x00\x00\x00\x00\x80", "\x00\x00\x00\x00\x00\x00\x00\xff",
			"\x00\x00\x00\x00\x00\x00\x01\x00", "\x7f\xff\xff\xff\xff\xff\xff\xff", "\x80\x00\x00\x00\x00\x00\x00\x00",
			"\xff\xff\xff\xff\xff\xff\xff\xfe", "\xff\xff\xff\xff\xff\xff\xff\xff")...)}, true},
		{"bit(10)", []keyColumn{col("BIT(10)", "b'0'", "b'1'", "b'11111111'", "b'100000000'", "b'1111111111'")}, true},
		{"binary(4)", []keyColumn{col("BINARY(4)", hexes(binaryValues...)...)}, true},
		{"varbinary", []keyColumn{col("VARBINARY(16)", hexes(binaryValues...)...)}, true},
		{"blob", []keyColumn{{def: "BLOB", prefix: "(10)", values: hexes(binaryValues...)}}, true},
		{"varchar utf8mb4_bin", []keyColumn{col("VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin", hexes(utf8Values...)...)}, true},
		{"char utf8mb4_bin", []keyColumn{col("CHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin", hexes(utf8Values...)...)}, true},
		{"text utf8mb4_bin", []keyColumn{{def: "TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin", prefix: "(10)", values: hexes(utf8Values...)}}, true},
		{"varchar utf8mb3_bin", []keyColumn{col("VARCHAR(20) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin", hexes(bmp(utf8Values)...)...)}, true},
		{"varchar latin1_bin", []keyColumn{col("VARCHAR(20) CHARACTER SET latin1 COLLATE latin1_bin", hexes(latin1Values...)...)}, true},
		{"char latin1_bin", []keyColumn{col("CHAR(10) CHARACTER SET latin1 COLLATE latin1_bin", hexes(latin1Values...)...)}, true},
		{"varchar ascii_bin", []keyColumn{col("VARCHAR(20) CHARACTER SET ascii COLLATE ascii_bin", hexes(asciiValues()...)...)}, true},
		{"varchar utf8mb4_general_ci", []keyColumn{col("VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci", hexes(utf8Values...)...)}, false},
		{"varchar utf8mb4_unicode_ci", []keyColumn{col("VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci", hexes(utf8Values...)...)}, false},
		{"text utf8mb4_unicode_ci", []keyColumn{{def: "TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci", prefix: "(10)", values: hexes(utf8Values...)}}, false},
		{"varchar latin1_swedish_ci", []keyColumn{col("VARCHAR(20) CHARACTER SET latin1 COLLATE latin1_swedish_ci", hexes(latin1Values...)...)}, false},
		{"char latin1_swedish_ci", []keyColumn{col("CHAR(10) CHARACTER SET latin1 COLLATE latin1_swedish_ci", hexes(latin1Values...)...)}, false},
		{"varchar latin1_german2_ci", []keyColumn{col("VARCHAR(20) CHARACTER SET latin1 COLLATE latin1_german2_ci", hexes(latin1Values...)...)}, false},
		{"int, utf8mb4_general_ci", []keyColumn{
			col("INT", "-1", "0", "10"),
			col("VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci", hexes("", "a", "A", "a ", "a\t", "b", "é", "😀")...),
		}, false},
		{"utf8mb4_bin, datetime(6), bigint unsigned", []keyColumn{
			col("VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin", hexes("a", "a ", "a\t", "b")...),
			col("DATETIME(6)", quoted("0000-00-00 00:00:00", "2000-01-01 00:00:00.000001", "2000-01-01 00:00:01")...),
			col("BIGINT UNSIGNED", "0", "9", "10", "18446744073709551615"),
		}, true},
		{"decimal, time(6), varbinary", []keyColumn{
			col("DECIMAL(20,5)", "-1.5", "0", "2", "10.00001"),
			col("TIME(6)", quoted("-100:00:00", "-00:00:00.000001", "99:59:59.999999", "100:00:00")...),
			col("VARBINARY(4)", hexes("", "\x00", "\xff")...),
		}, true},
		{"latin1_swedish_ci, double, bit(8)", []keyColumn{
			col("CHAR(4) CHARACTER SET latin1 COLLATE latin1_swedish_ci", hexes("a", "A", "\xe9", "e", "a\t")...),
			col("DOUBLE", "-1e10", "0", "0.1", "1e10"),
			col("BIT(8)", "b'0'", "b'1111111'", "b'10000000'"),
		}, false},
		{"binary(2), year, float, date", []keyColumn{
			col("BINARY(2)", hexes("", "\x01", "\xff\xff")...),
			col("YEAR", "0", "1999", "2000"),
			col("FLOAT", "-1", "0.1", "1e30"),
			col("DATE", quoted("0000-00-00", "2024-00-00", "2024-01-01")...),
		}, true},
	}
	mariaDB := []keyCase{
		{"varchar utf8mb4_nopad_bin", []keyColumn{col("VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin", hexes(utf8Values...)...)}, true},
		{"text utf8mb4_nopad_bin", []keyColumn{{def: "TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin", prefix: "(10)", values: hexes(utf8Values...)}}, true},
		{"varchar utf8mb3_nopad_bin", []keyColumn{col("VARCHAR(20) CHARACTER SET utf8mb3 COLLATE utf8mb3_nopad_bin", hexes(bmp(utf8Values)...)...)}, true},
		{"varchar latin1_nopad_bin", []keyColumn{col("VARCHAR(20) CHARACTER SET latin1 COLLATE latin1_nopad_bin", hexes(latin1Values...)...)}, true},
		{"varchar utf8mb4_unicode_nopad_ci", []keyColumn{col("VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_nopad_ci", hexes(utf8Values...)...)}, false},
		{"utf8mb4_unicode_nopad_ci, tinyint, timestamp(6), latin1_bin", []keyColumn{
			col("VARCHAR(4) CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_nopad_ci", hexes("a", "A", "a\t", "b")...),
			col("TINYINT", "-128", "0", "127"),
			col("TIMESTAMP(6)", quoted("0000-00-00 00:00:00", "2000-01-01 00:00:00.5")...),
			col("VARCHAR(4) CHARACTER SET latin1 COLLATE latin1_bin", hexes("", "\t", " ")...),
		}, false},
	}
	mySQL := []keyCase{
		{"varchar utf8mb4_0900_bin", []keyColumn{col("VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin", hexes(utf8Values...)...)}, true},
		{"text utf8mb4_0900_bin", []keyColumn{{def: "TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin", prefix: "(10)", values: hexes(utf8Values...)}}, true},
		{"char utf8mb4_0900_bin", []keyColumn{col("CHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin", hexes(utf8Values...)...)}, false},
		{"varchar utf8mb4_0900_ai_ci", []keyColumn{col("VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_ai_ci", hexes(utf8Values...)...)}, false},
		{"char utf8mb4_0900_ai_ci", []keyColumn{col("CHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_ai_ci", hexes(utf8Values...)...)}, false},
		{"varchar utf8mb4_0900_as_cs", []keyColumn{col("VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_as_cs", hexes(utf8Values...)...)}, false},
		{"varchar utf8mb4_0900_as_ci", []keyColumn{col("VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_as_ci", hexes(utf8Values...)...)}, false},
		{"varchar utf8mb4_de_pb_0900_ai_ci", []keyColumn{col("VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_de_pb_0900_ai_ci", hexes(utf8Values...)...)}, false},
		{"varchar utf8mb4_ja_0900_as_cs_ks", []keyColumn{col("VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_ja_0900_as_cs_ks", hexes(append(utf8Values, "あ", "ア", "ｱ", "か", "が")...)...)}, false},
		{"text utf8mb4_0900_ai_ci", []keyColumn{{def: "TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_ai_ci", prefix: "(10)", values: hexes(utf8Values...)}}, false},
		{"utf8mb4_0900_ai_ci, tinyint, timestamp(6), utf8mb4_0900_bin", []keyColumn{
			col("VARCHAR(4) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_ai_ci", hexes("a", "A", "a\t", "b")...),
			col("TINYINT", "-128", "0", "127"),
			col("TIMESTAMP(6)", quoted("0000-00-00 00:00:00", "2000-01-01 00:00:00.5")...),
			col("VARCHAR(4) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin", hexes("", "\t", " ", "a ")...),
		}, false},
	}
	if flavor == sandbox.MySQL {
		return append(cases, mySQL...)
	}
	return append(cases, mariaDB...)
}

// TestCompareAgreesWithServer stores tricky values of every key type and
// collation, reads them in the Row encoding as the streamer does, and requires
// that Compare agrees with the server on every pair: with the server's < and =
// on the stored values, and with the order in which ORDER BY returns them from a
// table keyed by them.
func TestCompareAgreesWithServer(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		srv := sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
		// Zero dates, which MySQL's default SQL mode refuses.
		sandboxtest.Exec(t, sandboxtest.Open(t, srv, ""), "CREATE DATABASE db",
			"SET GLOBAL sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION'")
		db, _, err := dbconn.Open(srv.DSN("db"), dbconn.Source)
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		for i, c := range keyCases(flavor) {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				checkAgainstServer(t, db, flavor, fmt.Sprintf("t%d", i), c.cols, c.exact)
			})
		}
	})
}

// checkAgainstServer fills table v<name> with every combination of the columns'
// values and table p<name>, keyed by the columns, with each key the server tells
// apart, and compares Compare's answers with the server's.
func checkAgainstServer(t *testing.T, db *sql.DB, flavor sandbox.Flavor, name string, cols []keyColumn, exact bool) {
	var defs, names, key []string
	for i, c := range cols {
		n := fmt.Sprintf("k%d", i)
		defs = append(defs, n+" "+c.def+" NOT NULL")
		names = append(names, n)
		key = append(key, n+c.prefix)
	}
	tuples := [][]string{nil}
	for _, c := range cols {
		var next [][]string
		for _, tuple := range tuples {
			for _, v := range c.values {
				next = append(next, append(tuple[:len(tuple):len(tuple)], v))
			}
		}
		tuples = next
	}
	var values []string
	for id, tuple := range tuples {
		values = append(values, fmt.Sprintf("(%d, %s)", id, strings.Join(tuple, ", ")))
	}
	sandboxtest.Exec(t, db,
		fmt.Sprintf("CREATE TABLE v%s (id INT PRIMARY KEY, %s)", name, strings.Join(defs, ", ")),
		fmt.Sprintf("CREATE TABLE p%s (%s, PRIMARY KEY (%s))", name, strings.Join(defs, ", "), strings.Join(key, ", ")),
		fmt.Sprintf("INSERT INTO v%s (id, %s) VALUES %s", name, strings.Join(names, ", "), strings.Join(values, ", ")),
		fmt.Sprintf("INSERT IGNORE INTO p%s SELECT %s FROM v%s ORDER BY id", name, strings.Join(names, ", "), name))

	table, err := schema.Load(t.Context(), db, "db", "p"+name)
	require.NoError(t, err)
	var keyCols []schema.Column
	var reads, compared []string
	for _, n := range table.Key {
		c := table.Column(n)
		keyCols = append(keyCols, *c)
		switch c.DataType { // as the streamer reads them
		case "float":
			reads = append(reads, "CAST("+n+" AS DOUBLE)")
		case "year":
			reads = append(reads, "CAST("+n+" AS CHAR)")
		default:
			reads = append(reads, n)
		}
		// MariaDB orders CHAR values padded to the column's length, also under
		// NO PAD collations, where its < and = trim them instead: the server
		// disagrees with itself, and ORDER BY is what Compare must agree with.
		// MySQL trims CHAR values, and its < and = agree with its ORDER BY.
		if m := charLength.FindStringSubmatch(c.ColumnType); m != nil && flavor == sandbox.MariaDB {
			compared = append(compared, fmt.Sprintf("RPAD(%%[1]s.%s, %s, ' ')", n, m[1]))
		} else {
			compared = append(compared, "%[1]s."+n)
		}
	}
	order, err := New(t.Context(), db, keyCols)
	require.NoError(t, err)
	require.Equal(t, exact, order.Exact(), order.Fallback())
	require.Equal(t, exact, order.Fallback() == "", order.Fallback())

	var mismatches []string
	check := func(a, b [][]byte, want int, why string) {
		got, err := order.Compare(t.Context(), a, b)
		require.NoError(t, err)
		if got != want {
			mismatches = append(mismatches, fmt.Sprintf("Compare(%q, %q) = %d, server: %d (%s)", a, b, got, want, why))
		}
	}

	// Every pair of stored values, against the server's < and = (on CHAR values
	// padded).
	stored := readKeys(t, db, fmt.Sprintf("SELECT %s FROM v%s ORDER BY id", strings.Join(reads, ", "), name))
	require.Len(t, stored, len(tuples))
	row := func(alias string) string {
		out := make([]string, len(compared))
		for i, c := range compared {
			out[i] = fmt.Sprintf(c, alias)
		}
		return "(" + strings.Join(out, ", ") + ")"
	}
	rows, err := db.Query(fmt.Sprintf("SELECT a.id, b.id, %[1]s < %[2]s, %[1]s = %[2]s FROM v%[3]s a JOIN v%[3]s b",
		row("a"), row("b"), name))
	require.NoError(t, err)
	distinct := len(tuples) // keys with no equal key of a lower id
	equalToEarlier := make([]bool, len(tuples))
	for rows.Next() {
		var a, b int
		var less, equal bool
		require.NoError(t, rows.Scan(&a, &b, &less, &equal))
		want := 1
		switch {
		case less:
			want = -1
		case equal:
			want = 0
		}
		if equal && b < a && !equalToEarlier[a] {
			equalToEarlier[a] = true
			distinct--
		}
		check(stored[a], stored[b], want, "< and =")
	}
	require.NoError(t, rows.Err())
	require.NoError(t, rows.Close())

	// Every pair of keys in ORDER BY order.
	sorted := readKeys(t, db, fmt.Sprintf("SELECT %s FROM p%s ORDER BY %s", strings.Join(reads, ", "), name, strings.Join(names, ", ")))
	require.Len(t, sorted, distinct, "the key holds as many values as the server's = tells apart")
	for i := range sorted {
		for j := range sorted {
			check(sorted[i], sorted[j], cmpInt(i, j), "ORDER BY")
		}
	}
	require.Empty(t, mismatches, "%d of %d comparisons disagree", len(mismatches), len(tuples)*len(tuples)+len(sorted)*len(sorted))
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// readKeys reads rows of key values in the Row encoding.
func readKeys(t *testing.T, db *sql.DB, query string) [][][]byte {
	rows, err := db.Query(query)
	require.NoError(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	raw := make([]sql.RawBytes, len(cols))
	dest := make([]any, len(cols))
	for i := range raw {
		dest[i] = &raw[i]
	}
	var out [][][]byte
	for rows.Next() {
		require.NoError(t, rows.Scan(dest...))
		key := make([][]byte, len(raw))
		for i, v := range raw {
			require.NotNil(t, v)
			key[i] = append([]byte{}, v...)
		}
		out = append(out, key)
	}
	require.NoError(t, rows.Err())
	return out
}

// encodeUTF8 encodes any code point up to U+10FFFF, surrogates included (which
// utf8.AppendRune replaces), by the UTF-8 bit patterns.
func encodeUTF8(r rune) []byte {
	switch {
	case r < 0x80:
		return []byte{byte(r)}
	case r < 0x800:
		return []byte{0xC0 | byte(r>>6), 0x80 | byte(r&0x3F)}
	case r < 0x10000:
		return []byte{0xE0 | byte(r>>12), 0x80 | byte(r>>6&0x3F), 0x80 | byte(r&0x3F)}
	}
	return []byte{0xF0 | byte(r>>18), 0x80 | byte(r>>12&0x3F), 0x80 | byte(r>>6&0x3F), 0x80 | byte(r&0x3F)}
}

// TestUTF8ByteOrderIsCodePointOrder proves that comparing UTF-8 text bytewise is
// comparing it by code points, which utf8mb4_bin and utf8mb3_bin do: the
// encodings of all code points, in order, are in strictly increasing byte order
// (so for single characters byte order is code point order), and UTF-8 is
// prefix-free (so two strings first differ in bytes inside their first differing
// characters, which start at the same offset). It also checks that wellFormed
// accepts exactly these encodings.
func TestUTF8ByteOrderIsCodePointOrder(t *testing.T) {
	prev := encodeUTF8(0)
	for r := rune(1); r <= 0x10FFFF; r++ {
		e := encodeUTF8(r)
		if bytes.Compare(prev, e) >= 0 {
			t.Fatalf("U+%04X encodes as %X, not above U+%04X's %X", r, e, r-1, prev)
		}
		if utf8.ValidRune(r) && !bytes.Equal(utf8.AppendRune(nil, r), e) {
			t.Fatalf("U+%04X encodes as %X, Go as %X", r, e, utf8.AppendRune(nil, r))
		}
		if !wellFormed(e, 4) || wellFormed(e, 3) != (len(e) <= 3) {
			t.Fatalf("wellFormed(%X) is wrong", e)
		}
		for i := 1; i < len(e); i++ {
			if wellFormed(e[:i], 4) {
				t.Fatalf("wellFormed accepts %X, a cut U+%04X", e[:i], r)
			}
		}
		prev = e
	}
	for _, bad := range []string{"\x80", "\xbf", "\xc0\xaf", "\xc1\xbf", "\xe0\x80\x80", "\xe0\x9f\xbf", "\xf0\x80\x80\x80",
		"\xf0\x8f\xbf\xbf", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xff", "\xc3\x28", "\xe2\x28\xa1", "a\xc3"} {
		require.False(t, wellFormed([]byte(bad), 4), "%X", bad)
	}
}

func TestCompareDecimal(t *testing.T) {
	ordered := []string{"-18446744073709551615", "-10", "-9.5", "-9.25", "-9", "-1", "-0.5", "-0.05", "0",
		"0.0000001", "0.5", "0.51", "1", "9", "9.99", "10", "100", "18446744073709551615", "18446744073709551616"}
	for i, a := range ordered {
		for j, b := range ordered {
			require.Equal(t, cmpInt(i, j), CompareDecimal([]byte(a), []byte(b)), "%s vs %s", a, b)
		}
	}
	for _, eq := range [][2]string{{"0", "-0.00"}, {"1.5", "1.500"}, {"007", "7"}, {"-0", "0.0"}, {"", "0"}} {
		require.Zero(t, CompareDecimal([]byte(eq[0]), []byte(eq[1])), "%s vs %s", eq[0], eq[1])
	}
}

// TestCompareOtherForms covers values the server does not print but the binlog
// can give: BINARY without its trailing zero bytes, CHAR with trailing spaces,
// BIT of a shorter width, and -0.
func TestCompareOtherForms(t *testing.T) {
	order := func(cols ...schema.Column) *Order {
		o, err := New(t.Context(), nil, cols)
		require.NoError(t, err)
		require.True(t, o.Exact())
		return o
	}
	binary := order(schema.Column{Name: "b", DataType: "binary", ColumnType: "binary(4)"})
	char := order(schema.Column{Name: "c", DataType: "char", ColumnType: "char(4)", Charset: "utf8mb4", Collation: "utf8mb4_nopad_bin"})
	bits := order(schema.Column{Name: "b", DataType: "bit", ColumnType: "bit(16)"})
	double := order(schema.Column{Name: "d", DataType: "double", ColumnType: "double"})
	for _, c := range []struct {
		order *Order
		a, b  string
		want  int
	}{
		{binary, "\x01\x02", "\x01\x02\x00\x00", 0},
		{binary, "\x01\x02", "\x01\x02\x00\x01", -1},
		{binary, "", "\x00\x00\x00\x00", 0},
		{char, "a  ", "a", 0},
		{char, "a\t", "a ", -1},
		{bits, "\x01", "\x00\x01", 0},
		{bits, "\x02", "\x01\x00", -1},
		{double, "-0", "0", 0},
		{double, "-0", "5e-324", -1},
	} {
		got, err := c.order.Compare(t.Context(), [][]byte{[]byte(c.a)}, [][]byte{[]byte(c.b)})
		require.NoError(t, err)
		require.Equal(t, c.want, got, "%q vs %q", c.a, c.b)
		got, err = c.order.Compare(t.Context(), [][]byte{[]byte(c.b)}, [][]byte{[]byte(c.a)})
		require.NoError(t, err)
		require.Equal(t, -c.want, got, "%q vs %q", c.b, c.a)
	}
}

func TestCompareRejectsValuesOutsideTheRowEncoding(t *testing.T) {
	cols := []schema.Column{
		{Name: "i", DataType: "int", ColumnType: "int(11)"},
		{Name: "f", DataType: "float", ColumnType: "float"},
		{Name: "d", DataType: "date", ColumnType: "date"},
		{Name: "dt", DataType: "datetime", ColumnType: "datetime(6)"},
		{Name: "t", DataType: "time", ColumnType: "time(6)"},
		{Name: "s", DataType: "varchar", ColumnType: "varchar(5)", Charset: "utf8mb3", Collation: "utf8mb3_bin"},
	}
	o, err := New(t.Context(), nil, cols)
	require.NoError(t, err)
	good := []string{"-5", "0.1", "2024-01-02", "2024-01-02 03:04:05.000006", "-100:00:00.5", "é"}
	key := func(i int, v string) [][]byte {
		k := make([][]byte, len(good))
		for j, g := range good {
			k[j] = []byte(g)
		}
		k[i] = []byte(v)
		return k
	}
	c, err := o.Compare(t.Context(), key(0, "-5"), key(0, "10"))
	require.NoError(t, err)
	require.Equal(t, -1, c)
	for _, bad := range []struct {
		col   int
		value string
		err   string
	}{
		{0, "", `compare key column i: "" is not INT text`},
		{0, "1e3", `"1e3" is not INT text`},
		{0, "--1", `"--1" is not INT text`},
		{0, "1.", `"1." is not INT text`},
		{1, "x", `compare key column f: "x" is not FLOAT or DOUBLE text`},
		{1, "NaN", `"NaN" is not FLOAT or DOUBLE text`},
		{1, "1e999", `"1e999" is not FLOAT or DOUBLE text`},
		{2, "2024-1-02", `compare key column d: "2024-1-02" is not DATE text`},
		{2, "2024-01-02.5", `"2024-01-02.5" is not DATE text`},
		{3, "2024-01-02T03:04:05", `"2024-01-02T03:04:05" is not DATETIME text`},
		{3, "2024-01-02 03:04:05.", `"2024-01-02 03:04:05." is not DATETIME text`},
		{3, "2024-01-02 03:04:05.1234567", `"2024-01-02 03:04:05.1234567" is not DATETIME text`},
		{4, "1:00:00", `compare key column t: "1:00:00" is not TIME text`},
		{4, "1000:00:00", `"1000:00:00" is not TIME text`},
		{5, "\xf0\x9f\x98\x80", `compare key column s: "😀" is not well-formed utf8mb3`},
		{5, "\xed\xa0", `"\xed\xa0" is not well-formed utf8mb3`},
	} {
		// The other key equals good, so the comparison reaches the bad column.
		_, err := o.Compare(t.Context(), key(bad.col, bad.value), key(0, good[0]))
		require.ErrorContains(t, err, bad.err)
		_, err = o.Compare(t.Context(), key(0, good[0]), key(bad.col, bad.value))
		require.ErrorContains(t, err, bad.err)
	}
	c, err = o.Compare(t.Context(), key(0, good[0]), key(0, good[0]))
	require.NoError(t, err)
	require.Zero(t, c)
	_, err = o.Compare(t.Context(), key(0, "1")[:1], key(0, "1"))
	require.EqualError(t, err, "compare keys of 1 and 6 values, key has 6 columns")
	nullKey := key(0, good[0])
	nullKey[2] = nil
	_, err = o.Compare(t.Context(), nullKey, key(0, good[0]))
	require.EqualError(t, err, "compare key column d: NULL in a key")

	_, err = New(t.Context(), nil, []schema.Column{{Name: "u", DataType: "uuid", ColumnType: "uuid"}})
	require.ErrorIs(t, err, schema.ErrNoKey)
	require.EqualError(t, err, "table has no usable key: key column u is uuid; rowlift cannot compare its order")
	_, err = New(t.Context(), nil, nil)
	require.ErrorIs(t, err, schema.ErrNoKey)
}

func TestFallback(t *testing.T) {
	o, err := New(t.Context(), nil, []schema.Column{
		{Name: "name", DataType: "varchar", ColumnType: "varchar(10)", Charset: "utf8mb4", Collation: "utf8mb4_general_ci"},
		{Name: "id", DataType: "bigint", ColumnType: "bigint(20)"},
	})
	require.NoError(t, err)
	require.False(t, o.Exact())
	require.Equal(t, "key column name (utf8mb4_general_ci) is compared by the source server", o.Fallback())

	o, err = New(t.Context(), nil, []schema.Column{
		{Name: "a", DataType: "text", ColumnType: "text", Charset: "utf8mb4", Collation: "utf8mb4_unicode_ci"},
		{Name: "b", DataType: "varchar", ColumnType: "varchar(10)", Charset: "latin1", Collation: "latin1_bin"},
		{Name: "c", DataType: "varchar", ColumnType: "varchar(10)", Charset: "latin1", Collation: "latin1_swedish_ci"},
	})
	require.NoError(t, err)
	require.False(t, o.Exact())
	require.Equal(t, "key columns a (utf8mb4_unicode_ci), c (latin1_swedish_ci) are compared by the source server", o.Fallback())

	_, err = New(t.Context(), nil, []schema.Column{{Name: "a", DataType: "varchar", Charset: "utf8mb4", Collation: "x'; DROP"}})
	require.ErrorContains(t, err, `key column a has unexpected character set "utf8mb4" or collation "x'; DROP"`)
}
