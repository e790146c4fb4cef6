package binlogrow

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/mysqljson"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/schema"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// serverZone is the sandbox's default time zone: not UTC and not a whole number
// of hours, so a TIMESTAMP decoded in the wrong zone shifts visibly.
const serverZone = "+05:30"

// writeSQLMode is the writing session's SQL mode: strict, but allowing zero
// dates and zero parts in dates.
const writeSQLMode = "STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION"

// allTypesDDL has a column of every type of the flavor, several precisions of
// the temporal types, generated columns of both kinds between the others, and
// unsigned columns after them, so a shifted signedness bitmap shows. JSON is
// MariaDB's LONGTEXT and MySQL's binary JSON; MySQL has VECTOR too.
func allTypesDDL(flavor sandbox.Flavor) string {
	ddl := allTypesCommonDDL
	if flavor == sandbox.MySQL {
		ddl += ",\n  vec VECTOR(3)"
	}
	return ddl + "\n) DEFAULT CHARSET=utf8mb4"
}

// allTypesCommonDDL is allTypesDDL without the flavor's own types.
var allTypesCommonDDL = `CREATE TABLE binlogrow.alltypes (
  id INT NOT NULL PRIMARY KEY,
  ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED,
  mi MEDIUMINT, miu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED,
  zf INT(5) UNSIGNED ZEROFILL, boo BOOLEAN,
  dec65 DECIMAL(65,30), dec52 DECIMAL(5,2), dec10 DECIMAL(10,0), f FLOAT, d DOUBLE,
  bit1 BIT(1), bit12 BIT(12), bit64 BIT(64),
  ch CHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci,
  vc VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
  bigch CHAR(100) CHARACTER SET utf8mb4,
  lch CHAR(10) CHARACTER SET latin1,
  lvc VARCHAR(64) CHARACTER SET latin1,
  len ENUM('é', 'ÿ', 'plain') CHARACTER SET latin1,
  bin8 BINARY(8), vb VARBINARY(300),
  tt TINYTEXT CHARACTER SET utf8mb4, txt TEXT CHARACTER SET utf8mb4, ltxt LONGTEXT CHARACTER SET utf8mb4,
  tb TINYBLOB, bl BLOB, mb MEDIUMBLOB, lbl LONGBLOB,
  g_virt VARCHAR(200) CHARACTER SET utf8mb4 AS (CONCAT(IFNULL(vc, '∅'), '|', IFNULL(lvc, 'ñ'))) VIRTUAL,
  en ENUM('a', 'b', 'ü', '€') CHARACTER SET utf8mb4,
  e4 ENUM('a', '😀', 'b') CHARACTER SET utf8mb4,
  st SET('x', 'y', 'z', 'ü') CHARACTER SET utf8mb4,
  st64 SET('` + strings.Join(set64, "', '") + `'),
  g_lat VARCHAR(80) CHARACTER SET latin1 AS (CONCAT(IFNULL(lvc, ''), 'é')) STORED,
  dt DATE, dtm DATETIME(6), dtm0 DATETIME, dtm3 DATETIME(3),
  ts TIMESTAMP(6) NULL DEFAULT NULL, ts0 TIMESTAMP NULL DEFAULT NULL, ts3 TIMESTAMP(3) NULL DEFAULT NULL,
  tm TIME(6), tm0 TIME, tm2 TIME(2), tm3 TIME(3), yr YEAR,
  js JSON, pt POINT, geo GEOMETRY, ls LINESTRING, mpt MULTIPOINT, gc GEOMETRYCOLLECTION,
  pg POLYGON, mls MULTILINESTRING, mpg MULTIPOLYGON, dm DOUBLE(10,2), fm FLOAT(7,3), du DOUBLE UNSIGNED,
  g_sum BIGINT AS (IFNULL(i, 0) + IFNULL(si, 0)) STORED,
  g_len BIGINT AS (LENGTH(lbl)) VIRTUAL,
  g_js VARCHAR(100) CHARACTER SET utf8mb4 AS (JSON_VALUE(js, '$.k')) VIRTUAL,
  biu2 BIGINT UNSIGNED, tiu2 TINYINT UNSIGNED`

// set64 are the 64 members m0..m63 of st64, the most a SET has: its bitmask
// fills an int64 whose top bit is the sign.
var set64 = func() []string {
	var m []string
	for i := range 64 {
		m = append(m, fmt.Sprintf("m%d", i))
	}
	return m
}()

// generatedColumns are alltypes' generated columns: in the binlog image, never
// streamed.
var generatedColumns = []string{"g_virt", "g_lat", "g_sum", "g_len", "g_js"}

// subsetColumns is a streamed column list in an order of its own.
var subsetColumns = []string{"st64", "ts", "lch", "id", "bit64", "biu2", "f", "tm2", "bin8", "e4", "yr", "dec52"}

// Sizes of the large values: LONGTEXT and LONGBLOB over 1 MiB, TEXT and BLOB at
// their 65,535-byte maximum.
const (
	bigBytes  = 3 << 19 // 1.5 MiB
	textBytes = 65535
)

// typeRow is one row of alltypes: SQL expressions by column, NULL for the rest.
type typeRow struct {
	what string
	vals map[string]string
}

// typeRows are the rows of alltypes on the flavor; row i has id i+1.
func typeRows(flavor sandbox.Flavor) []typeRow {
	// MariaDB keeps JSON as text, so an out-of-range number stays; MySQL
	// stores JSON as values and refuses it.
	huge := "1e400"
	if flavor == sandbox.MySQL {
		huge = "1.7976931348623157e308"
	}
	empty := map[string]string{}
	for _, c := range []string{"ch", "vc", "bigch", "lch", "lvc", "bin8", "vb", "tt", "txt", "ltxt", "tb", "bl", "mb", "lbl", "st", "st64"} {
		empty[c] = "''"
	}
	empty["js"] = `'""'`
	every := sandboxtest.EveryByte(256, 1)
	rows := []typeRow{
		{"minimums", map[string]string{
			"ti": "-128", "tiu": "0", "si": "-32768", "siu": "0", "mi": "-8388608", "miu": "0",
			"i": "-2147483648", "iu": "0", "bi": "-9223372036854775808", "biu": "0", "zf": "0", "boo": "FALSE",
			"dec65": "-99999999999999999999999999999999999.999999999999999999999999999999",
			"dec52": "-999.99", "dec10": "-9999999999",
			"f": "-3.4028234663852886e38", "d": "-1.7976931348623157e308",
			"bit1": "b'0'", "bit12": "b'0'", "bit64": "b'0'",
			"en": "'a'", "e4": "'a'", "st": "''", "st64": "''", "len": "'é'",
			"dt": "'1000-01-01'", "dtm": "'1000-01-01 00:00:00.000000'", "dtm0": "'1000-01-01 00:00:00'",
			"dtm3": "'1000-01-01 00:00:00.000'",
			// The smallest TIMESTAMP, 1970-01-01 00:00:01 UTC, in the +05:30 session.
			"ts": "'1970-01-01 05:30:01.000000'", "ts0": "'1970-01-01 05:30:01'", "ts3": "'1970-01-01 05:30:01.000'",
			"tm": "'-838:59:59.000000'", "tm0": "'-838:59:59'", "tm2": "'-838:59:59.00'", "tm3": "'-838:59:59.000'",
			"yr": "1901", "js": "'{}'", "biu2": "0", "tiu2": "0",
		}},
		{"maximums", map[string]string{
			"ti": "127", "tiu": "255", "si": "32767", "siu": "65535", "mi": "8388607", "miu": "16777215",
			"i": "2147483647", "iu": "4294967295", "bi": "9223372036854775807", "biu": "18446744073709551615",
			"zf": "4294967295", "boo": "TRUE",
			"dec65": "99999999999999999999999999999999999.999999999999999999999999999999",
			"dec52": "999.99", "dec10": "9999999999",
			"f": "3.4028234663852886e38", "d": "1.7976931348623157e308",
			"bit1": "b'1'", "bit12": "b'111111111111'", "bit64": "X'FFFFFFFFFFFFFFFF'",
			"ch": "'😀😁🤖🇫🇷x'", "vc": "REPEAT('🦀', 64)", "bigch": "REPEAT('😀', 100)",
			"lch": "_latin1 X'FFFFFFFFFFFFFFFFFFFF'", "lvc": "REPEAT(_latin1 X'FF', 64)",
			"bin8": "X'FFFFFFFFFFFFFFFF'", "vb": sandboxtest.HexLiteral(sandboxtest.EveryByte(300, 2)),
			"tt": "REPEAT('é', 127)", "txt": "CONCAT(REPEAT('é', 32767), 'x')", "ltxt": `REPEAT('😀 é\\n\'', 157287)`,
			"tb": sandboxtest.HexLiteral(sandboxtest.EveryByte(255, 5)), "bl": sandboxtest.HexLiteral(sandboxtest.EveryByte(textBytes, 3)),
			"mb": sandboxtest.HexLiteral(sandboxtest.EveryByte(70000, 6)), "lbl": sandboxtest.HexLiteral(sandboxtest.EveryByte(bigBytes, 4)),
			"en": "'€'", "e4": "'b'", "st": "'x,y,z,ü'", "st64": "'" + strings.Join(set64, ",") + "'",
			"len": "'plain'",
			"dt":  "'9999-12-31'", "dtm": "'9999-12-31 23:59:59.999999'", "dtm0": "'9999-12-31 23:59:59'",
			"dtm3": "'9999-12-31 23:59:59.999'",
			// The largest TIMESTAMP, 2038-01-19 03:14:07.999999 UTC, in the +05:30 session.
			"ts": "'2038-01-19 08:44:07.999999'", "ts0": "'2038-01-19 08:44:07'", "ts3": "'2038-01-19 08:44:07.999'",
			"tm": "'838:59:59.000000'", "tm0": "'838:59:59'", "tm2": "'838:59:59.00'", "tm3": "'838:59:59.000'",
			"yr":   "2155",
			"js":   `'{"k": "v😀", "a": [1, 2.50, null, true, -0.0, ` + huge + `], "s": "q\\" b\\\\ n\\n"}'`,
			"biu2": "18446744073709551615", "tiu2": "255",
		}},
		{"all NULL", map[string]string{}},
		{"0.1", map[string]string{"f": "0.1", "d": "0.1", "dec65": "0.1", "dec52": "0.1"}},
		{"1/3", map[string]string{"f": "1e0/3", "d": "1e0/3", "dec65": "0.333333333333333333333333333333", "dec52": "-0.33"}},
		{"smallest magnitudes", map[string]string{"f": "1.401298464324817e-45", "d": "5e-324",
			"dec65": "0.000000000000000000000000000001", "dec52": "0.01", "dec10": "1"}},
		{"1e-38 and the smallest normal DOUBLE", map[string]string{"f": "1e-38", "d": "2.2250738585072014e-308"}},
		{"negative zero", map[string]string{"f": "-0e0", "d": "-0e0", "dec65": "-0.0", "dec52": "-0.00", "dec10": "-0"}},
		{"values needing all their digits", map[string]string{"f": "16777215", "d": "0.30000000000000004",
			"dec65": "-0.000000000000000000000000000001", "dec52": "-0.01"}},
		{"negative small and FLT_MIN", map[string]string{"f": "-1.1754943508222875e-38", "d": "-2.2250738585072014e-308"}},
		{"large integers", map[string]string{"f": "-16777216", "d": "9007199254740993",
			"bi": "-1", "biu": "9223372036854775808", "iu": "2147483648", "miu": "8388608", "tiu": "128", "siu": "32768",
			"zf": "42", "biu2": "9223372036854775808", "tiu2": "128"}},
		{"utf8mb4 with 4-byte characters", map[string]string{
			"ch": "'😀😁🤖🇫🇷'", "vc": `'tab\there ''q'' back\\slash nul\0 😀 end'`, "bigch": "'😀 x'",
			"en": "'ü'", "e4": "'😀'", "st": "'ü,x'",
			"tt": "'🦀'", "txt": "'🦀 crab\r\n'", "ltxt": "'𝄞 clef'", "js": `'{"k": "🎉", "n": "ü"}'`}},
		{"latin1 non-ASCII bytes", map[string]string{
			"lch": "_latin1 X'E9FFE0'", "lvc": "_latin1 X'C9E9FFA0B5D7F7'", "len": "'ÿ'",
			"ch": "'é'", "vc": "'é'"}},
		{"binary escapes", map[string]string{
			"bin8": "X'6162'", "vb": "X'005C27000A0D1A22255F5C5C2700'", "bl": "X'00005C2700'", "tb": "X'00'",
			"lch": "'a''b'", "lvc": `'back\\slash ''quote'' "dq"'`}},
		{"every byte", map[string]string{
			"bin8": "X'0000000000000000'", "vb": sandboxtest.HexLiteral(every), "bl": sandboxtest.HexLiteral(every), "tb": sandboxtest.HexLiteral(every[:255]),
			"mb": sandboxtest.HexLiteral(append(every, every...)), "lbl": sandboxtest.HexLiteral(append(every, every...))}},
		{"trailing zeros and spaces", map[string]string{
			"bin8": "X'6162202000'", "vb": "X'616200'", "ch": "'ab  '", "vc": "'ab  '", "bigch": "'ab  '",
			"lch": "'é '", "lvc": "'é '", "tt": "'t  '", "tb": "X'6100'"}},
		{"leading and inner spaces and zero bytes", map[string]string{
			"bin8": "X'0000610000620000'", "ch": "'  a b'", "lch": "_latin1 X'20A020'", "bigch": "' '"}},
		{"empty strings", empty},
		{"temporal fractions", map[string]string{
			"dt": "'2024-02-29'", "dtm": "'1969-12-31 23:59:59.999999'", "ts": "'2000-01-01 00:00:00.000001'",
			"dtm3": "'1969-12-31 23:59:59.001'", "ts3": "'2000-01-01 05:30:00.010'",
			"tm": "'-00:00:00.000001'", "tm2": "'-00:00:00.01'", "tm3": "'-00:00:00.999'", "yr": "2000"}},
		{"negative TIME and late TIMESTAMP", map[string]string{
			"dt": "'1000-01-01'", "dtm": "'2038-01-19 03:14:08.000000'", "ts": "'2024-03-31 02:30:00.500000'",
			"ts0": "'2024-03-31 02:30:00'", "tm": "'-12:34:56.789012'", "tm0": "'-12:34:56'",
			"tm2": "'-12:34:56.78'", "tm3": "'-00:00:01.000'", "yr": "1970"}},
		{"TIME fractions that end in zeros", map[string]string{
			"tm": "'-00:00:01.500000'", "tm2": "'00:00:00.50'", "tm3": "'-01:00:00.100'", "tm0": "'00:00:00'",
			"dtm": "'2020-01-01 00:00:00.100000'", "dtm3": "'2020-01-01 00:00:00.000'"}},
		{"zero dates", map[string]string{
			"dt": "'0000-00-00'", "dtm": "'0000-00-00 00:00:00.000000'", "dtm0": "'0000-00-00 00:00:00'",
			"dtm3": "'0000-00-00 00:00:00.000'", "ts": "'0000-00-00 00:00:00.000000'", "ts0": "'0000-00-00 00:00:00'",
			"ts3": "'0000-00-00 00:00:00.000'", "tm": "'00:00:00'", "tm0": "'00:00:00'", "tm2": "'00:00:00'",
			"tm3": "'00:00:00'", "yr": "0"}},
		{"zero parts in dates", map[string]string{
			"dt": "'2020-00-15'", "dtm": "'2020-02-00 10:00:00.000001'", "dtm0": "'0000-01-00 00:00:00'", "yr": "'00'"}},
		{"JSON", map[string]string{
			"js": `'{"k": "line\\nbreak", "nested": {"a": [1, {"b": null}]}, "u": "\\u00e9"}'`}},
		{"ENUM and SET", map[string]string{"en": "'b'", "e4": "'😀'", "st": "'z,x'", "st64": "'m63,m0,m31,m32'", "len": "'plain'"}},
		{"large negative DECIMAL", map[string]string{
			"dec65": "-12345678901234567890123456789012345.000000000000000000000000000001", "i": "-1", "si": "-1",
			"dec52": "-1.5", "dec10": "-123456789"}},
		{"BIT patterns", map[string]string{"bit1": "b'1'", "bit12": "b'100000000001'", "bit64": "X'8000000000000001'"}},
		{"BIT with leading zero bytes", map[string]string{"bit1": "b'0'", "bit12": "b'000000000001'", "bit64": "X'00000000000000FF'"}},
		{"geometry", map[string]string{"pt": "POINT(1.5, -2)", "geo": "ST_GeomFromText('POLYGON((0 0, 10 0, 10 10, 0 10, 0 0))', 4326)",
			"ls": "ST_GeomFromText('LINESTRING(0 0, 1 1, 2 0)')", "mpt": "ST_GeomFromText('MULTIPOINT((1 1), (2 2))')",
			"gc": "ST_GeomFromText('GEOMETRYCOLLECTION(POINT(1 1), LINESTRING(0 0, 1 1))')",
			"pg": "ST_GeomFromText('POLYGON((0 0, 3 0, 3 3, 0 0))')", "mls": "ST_GeomFromText('MULTILINESTRING((0 0, 1 1), (2 2, 3 3))')",
			"mpg": "ST_GeomFromText('MULTIPOLYGON(((0 0, 3 0, 3 3, 0 0)), ((5 5, 6 5, 6 6, 5 5)))')"}},
		{"DOUBLE and FLOAT with a scale", map[string]string{"dm": "1.5", "fm": "-2.25", "du": "0.1"}},
		{"DOUBLE and FLOAT with a scale, whole", map[string]string{"dm": "-12345678.00", "fm": "1", "du": "1e300"}},
	}
	if flavor != sandbox.MySQL {
		return rows
	}
	for _, d := range jsonDocs {
		rows = append(rows, typeRow{"MySQL JSON: " + d.what, map[string]string{"js": d.sql}})
	}
	return append(rows,
		typeRow{"VECTOR", map[string]string{"vec": "STRING_TO_VECTOR('[1.5, -2, 3.25]')"}},
		typeRow{"VECTOR extremes", map[string]string{"vec": "STRING_TO_VECTOR('[3.4028234e38, -1.1754944e-38, -0]')"}},
		typeRow{"VECTOR of zeros", map[string]string{"vec": "STRING_TO_VECTOR('[0, 0, 0]')"}},
	)
}

// jsonDocs are MySQL JSON values, as SQL expressions, whose every number,
// string escape and structure the binlog must give as SELECT prints it.
var jsonDocs = []struct{ what, sql string }{
	{"scalars", `'[null, true, false, 0, -1, "", "s"]'`},
	{"integer extremes", `'[-9223372036854775808, 9223372036854775807, 18446744073709551615, -32768, 65535, -2147483648, 4294967295]'`},
	{"integer beyond uint64 becomes a double", `'[18446744073709551616, 123456789012345678901234, -99999999999999999999]'`},
	{"doubles in plain notation", `'[0.5, -0.5, 2.50, 3.0, -0.0, 0.1, 0.30000000000000004, 12345678.9, 1e14, 123456789012345.67, 1.2345678901234567e15, 0.000123, 1e-7, 1.5e-15, 1.2345678901234567e-15]'`},
	{"doubles in exponent notation", `'[1e15, -1e15, 1.5e15, 1e16, 1.2345678901234567e16, 1e20, 1e21, 1.5e300, 1e-16, -1e-16, 1.2345678901234567e-16, -1e-300, 5e-324, 1.7976931348623157e308, 2.2250738585072014e-308]'`},
	{"string escapes", `'["q\\"b\\\\s/\\/", "\\b\\f\\n\\r\\t", "\\u0000\\u0001\\u001f\\u007f\\u0080", "<>&\\u2028\\u2029", "é😀\\ud83d\\ude00", "\\u00e9"]'`},
	{"keys are sorted and need escaping", `'{"zz": 1, "a": 2, "b\\"q": 3, "": 4, "é": 5, "\\n": 6, "aa": 7}'`},
	{"duplicate keys: the last wins", `'{"k": 1, "k": 2}'`},
	{"nesting", `'{"a": [[[], {}], {"b": {"c": [1, [2, [3, {"d": null}]]]}}], "e": {"f": {}}}'`},
	{"spacing is normalized", `' {  "a" :[1 ,2] , "b":{ }}  '`},
	{"top-level string", `'"just text"'`},
	{"top-level double", `'-1.25e-10'`},
	{"opaque DECIMAL, DATE, DATETIME, TIME and BINARY", "JSON_OBJECT('d', CAST(1.50 AS DECIMAL(5,2)), 'n', CAST(-0.001 AS DECIMAL(10,3)), " +
		"'z', CAST(0 AS DECIMAL(3,1)), 'dt', CAST('2024-01-02' AS DATE), 'dtm', CAST('2024-01-02 03:04:05.5' AS DATETIME(6)), " +
		"'dtm0', CAST('1999-12-31 23:59:59' AS DATETIME), 't', CAST('-01:02:03' AS TIME), 'bin', CAST(X'00FF' AS BINARY))"},
	{"large object and array (over 64 KiB)", "JSON_OBJECT('big', REPEAT('x', 70000), 'arr', JSON_ARRAY(1, 2.5, REPEAT('é', 40000)))"},
}

// nonStrictRows are rows of alltypes written in nonStrictSQLMode, after those of
// typeRows: a non-strict server stores an invalid ENUM value as index 0, the
// empty string, and drops an invalid SET member.
func nonStrictRows() []typeRow {
	return []typeRow{
		{"invalid ENUM and SET values", map[string]string{"en": "'nope'", "len": "'x'", "st": "'y,bogus'"}},
	}
}

// nonStrictSQLMode is the SQL mode of nonStrictRows.
const nonStrictSQLMode = "NO_ENGINE_SUBSTITUTION"

// phase is the state of the table a SELECT snapshot shows: after the inserts, or
// after the update.
type phase int

const (
	inserted phase = iota
	updated
)

// image is one row image of alltypes from the binlog, with what it must equal.
type image struct {
	kind    string // "insert", "update before", "update after", "delete"
	state   phase  // which SELECT snapshot holds the same row
	table   *replication.TableMapEvent
	values  []any
	skipped []int
	// compressed is whether the image came in a TRANSACTION_PAYLOAD event.
	compressed bool
}

// TestConvertMatchesSelect writes rows of every type, updates and deletes them,
// reads the binlog with a real BinlogSyncer, and requires every converted image
// to be byte for byte what the copy's SELECT returns for the same row, for all
// streamed columns and for a subset in another order. On MySQL the update is
// logged compressed (binlog_transaction_compression=ON), so its images come
// from a TRANSACTION_PAYLOAD event.
func TestConvertMatchesSelect(t *testing.T) {
	sandboxtest.EachFlavor(t, testConvertMatchesSelect)
}

func testConvertMatchesSelect(t *testing.T, flavor sandbox.Flavor) {
	ctx := context.Background()
	srv := sandboxtest.Start(t, sandbox.Options{Flavor: flavor, Args: []string{"--default-time-zone=" + serverZone}})
	src, _, err := dbconn.Open(srv.DSN(""), dbconn.Source)
	require.NoError(t, err)
	t.Cleanup(func() { src.Close() })
	var zone string
	require.NoError(t, src.QueryRow("SELECT @@global.time_zone").Scan(&zone))
	require.Equal(t, serverZone, zone)

	// Write on one session in +05:30, with zero dates allowed.
	w, err := sandboxtest.Open(t, srv, "").Conn(ctx)
	require.NoError(t, err)
	defer w.Close()
	exec := func(q string) {
		t.Helper()
		if _, err := w.ExecContext(ctx, q); err != nil {
			if len(q) > 300 {
				q = q[:300] + "..."
			}
			t.Fatalf("exec %s: %v", q, err)
		}
	}
	exec("SET SESSION sql_mode = '" + writeSQLMode + "'")
	exec("CREATE DATABASE binlogrow")
	exec(allTypesDDL(flavor))
	tbl, err := schema.Load(ctx, src, "binlogrow", "alltypes")
	require.NoError(t, err)
	var written []string
	for _, c := range tbl.Columns {
		if !c.Generated && c.Name != "id" {
			written = append(written, c.Name)
		}
	}
	strict := typeRows(flavor)
	rows := append(strict[:len(strict):len(strict)], nonStrictRows()...)
	for i, r := range rows {
		vals := []string{strconv.Itoa(i + 1)}
		for _, c := range written {
			v, ok := r.vals[c]
			if !ok {
				v = "NULL"
			}
			vals = append(vals, v)
		}
		if i == len(strict) {
			exec("SET SESSION sql_mode = '" + nonStrictSQLMode + "'")
		}
		exec("INSERT INTO binlogrow.alltypes (id, " + strings.Join(written, ", ") + ") VALUES (" + strings.Join(vals, ", ") + ")")
	}
	exec("SET SESSION sql_mode = '" + writeSQLMode + "'")

	full, err := tbl.Streamed(nil)
	require.NoError(t, err)
	subset, err := tbl.Streamed(subsetColumns)
	require.NoError(t, err)
	views := []struct {
		name string
		cols []schema.Column
	}{{"all streamed columns", full}, {"column subset in another order", subset}}
	// snapshots[view][phase] maps an id to the SELECT's values of its row.
	snapshots := make([][2]map[string][][]byte, len(views))
	for v, view := range views {
		snapshots[v][inserted] = selectRows(t, src, "alltypes", view.cols)
	}
	checkSourceValues(t, flavor, rows, full, snapshots[0][inserted])

	// Each row takes the values of the next one, the last those of the first.
	var set []string
	for _, c := range written {
		set = append(set, fmt.Sprintf("a.%s = b.%s", c, c))
	}
	exec("CREATE TABLE binlogrow.next AS SELECT id, " + strings.Join(written, ", ") + " FROM binlogrow.alltypes")
	if flavor == sandbox.MySQL {
		exec("SET SESSION binlog_transaction_compression = ON")
	}
	exec(fmt.Sprintf("UPDATE binlogrow.alltypes a JOIN binlogrow.next b ON b.id = a.id %% %d + 1 SET %s", len(rows), strings.Join(set, ", ")))
	for v, view := range views {
		snapshots[v][updated] = selectRows(t, src, "alltypes", view.cols)
	}
	if flavor == sandbox.MySQL {
		exec("SET SESSION binlog_transaction_compression = DEFAULT")
	}
	exec("DELETE FROM binlogrow.alltypes")
	exec("CREATE TABLE binlogrow.done (id INT PRIMARY KEY)")
	exec("INSERT INTO binlogrow.done VALUES (1)")

	images := readImages(t, srv, "alltypes", "done")
	counts := map[string]int{}
	for _, im := range images {
		counts[im.kind]++
		if im.compressed {
			counts["compressed "+im.kind]++
		}
	}
	n := len(rows)
	want := map[string]int{"insert": n, "update before": n, "update after": n, "delete": n}
	if flavor == sandbox.MySQL {
		want["compressed update before"], want["compressed update after"] = n, n
	}
	require.Equal(t, want, counts)
	names := images[0].table.ColumnNameString()
	require.Subset(t, names, generatedColumns, "both flavors log generated columns, VIRTUAL ones too, in FULL images")

	for v, view := range views {
		t.Run(view.name, func(t *testing.T) {
			idAt := -1
			for i, c := range view.cols {
				if c.Name == "id" {
					idAt = i
				}
			}
			require.GreaterOrEqual(t, idAt, 0)
			for _, kind := range []string{"insert", "update before", "update after", "delete"} {
				t.Run(kind, func(t *testing.T) {
					row := &rowliftv1.Row{}
					seen := map[string]bool{}
					for _, im := range images {
						if im.kind != kind {
							continue
						}
						conv, err := NewConverter(im.table, view.cols)
						require.NoError(t, err)
						require.NoError(t, conv.CheckSkipped(im.skipped))
						require.NoError(t, conv.Convert(row, im.values))
						got, err := rowcodec.Values(nil, row)
						require.NoError(t, err)
						require.Len(t, got, len(view.cols))
						id := string(got[idAt])
						want, ok := snapshots[v][im.state][id]
						require.True(t, ok, "no SELECT row with id %q", id)
						requireSameValues(t, fmt.Sprintf("%s image of row %s (%s)", kind, id, rowWhat(rows, id)), view.cols, got, want)
						seen[id] = true
					}
					require.Len(t, seen, n, "every row has its image")
				})
			}
		})
	}
}

// checkSourceValues makes sure the source holds the extremes the rows mean, so
// the test runs on the values intended (a value the server clamped or refused
// would make it weaker without failing it).
func checkSourceValues(t *testing.T, flavor sandbox.Flavor, rows []typeRow, cols []schema.Column, snapshot map[string][][]byte) {
	t.Helper()
	value := func(what, column string) []byte {
		t.Helper()
		for i, r := range rows {
			if r.what != what {
				continue
			}
			for j, c := range cols {
				if c.Name == column {
					return snapshot[strconv.Itoa(i+1)][j]
				}
			}
		}
		t.Fatalf("no value of %s in row %q", column, what)
		return nil
	}
	for _, c := range []struct{ what, column, want string }{
		{"maximums", "biu", "18446744073709551615"},
		{"maximums", "biu2", "18446744073709551615"},
		{"maximums", "tiu2", "255"},
		{"maximums", "bit64", strings.Repeat("\xff", 8)},
		{"maximums", "bit12", "\x0f\xff"},
		{"maximums", "st64", strings.Join(set64, ",")},
		{"maximums", "ts", "2038-01-19 03:14:07.999999"},
		{"maximums", "f", "3.4028234663852886e+38"},
		{"minimums", "ts", "1970-01-01 00:00:01.000000"},
		{"minimums", "tm", "-838:59:59.000000"},
		{"zero dates", "ts", "0000-00-00 00:00:00.000000"},
		{"zero dates", "dtm3", "0000-00-00 00:00:00.000"},
		{"zero dates", "yr", "0000"},
		{"zero parts in dates", "dt", "2020-00-15"},
		{"trailing zeros and spaces", "bin8", "ab  \x00\x00\x00\x00"},
		{"latin1 non-ASCII bytes", "len", "\xff"},
		// MariaDB stores -0 as 0: the binlog never carries a negative zero.
		{"negative zero", "d", map[sandbox.Flavor]string{sandbox.MariaDB: "0", sandbox.MySQL: "-0"}[flavor]},
		// Index 0, the empty string (not NULL).
		{"invalid ENUM and SET values", "en", ""},
		{"invalid ENUM and SET values", "len", ""},
		{"invalid ENUM and SET values", "st", "y"},
	} {
		v := value(c.what, c.column)
		require.NotNil(t, v, "%s of row %q is NULL", c.column, c.what)
		require.Equal(t, c.want, string(v), "%s of row %q", c.column, c.what)
	}
	require.Len(t, value("maximums", "lbl"), bigBytes)
	require.Len(t, value("maximums", "ltxt"), 1572870)
	require.Len(t, value("maximums", "mb"), 70000)
}

// rowWhat is the description of the row with the given id.
func rowWhat(rows []typeRow, id string) string {
	i, err := strconv.Atoi(id)
	if err != nil || i < 1 || i > len(rows) {
		return "unknown row"
	}
	return rows[i-1].what
}

// selectRows reads the rows of binlogrow.<table> as the streamer's copy does: the same select
// list (FLOAT as DOUBLE, YEAR as text) on a dbconn source pool, scanned as raw
// bytes. It maps each row's id to its values.
func selectRows(t *testing.T, db *sql.DB, table string, cols []schema.Column) map[string][][]byte {
	t.Helper()
	idAt := -1
	var list []string
	for i, c := range cols {
		switch c.DataType {
		case "float":
			list = append(list, "CAST("+rowcodec.Ident(c.Name)+" AS DOUBLE)")
		case "year":
			list = append(list, "CAST("+rowcodec.Ident(c.Name)+" AS CHAR)")
		default:
			list = append(list, rowcodec.Ident(c.Name))
		}
		if c.Name == "id" {
			idAt = i
		}
	}
	require.GreaterOrEqual(t, idAt, 0)
	rows, err := db.Query("SELECT " + strings.Join(list, ", ") + " FROM " + rowcodec.QualifiedIdent("binlogrow", table))
	require.NoError(t, err)
	defer rows.Close()
	out := map[string][][]byte{}
	raw := make([]sql.RawBytes, len(cols))
	dest := make([]any, len(cols))
	for i := range raw {
		dest[i] = &raw[i]
	}
	for rows.Next() {
		require.NoError(t, rows.Scan(dest...))
		vals := make([][]byte, len(cols))
		for i, r := range raw {
			vals[i] = bytes.Clone(r) // nil stays nil, empty stays empty
		}
		out[string(vals[idAt])] = vals
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, out)
	return out
}

// syncerConfig is the BinlogSyncerConfig the streamer uses, for srv's flavor.
func syncerConfig(srv *sandbox.Server) replication.BinlogSyncerConfig {
	return replication.BinlogSyncerConfig{
		ServerID:                1_000_001, // sandbox server IDs are ports, below 65536
		Flavor:                  string(srv.Flavor),
		Host:                    "127.0.0.1",
		Port:                    uint16(srv.Port),
		User:                    "root",
		ParseTime:               false,
		UseDecimal:              false,
		TimestampStringLocation: time.UTC,
		RenderJSONAsMySQLText:   true,
		RowsEventDecodeFunc:     DecodeRows,
		Logger:                  slog.New(slog.DiscardHandler),
	}
}

// readImages reads the binlog from its start with a BinlogSyncer configured as
// the streamer's, and returns the images of table in binlog order, up to the
// first row written to the stop table. The rows events of compressed
// transactions (binlog_transaction_compression=ON) are read from their
// TRANSACTION_PAYLOAD events, and their images marked compressed.
func readImages(t *testing.T, srv *sandbox.Server, table, stop string) []image {
	t.Helper()
	cfg := syncerConfig(srv)
	require.NoError(t, CheckConfig(cfg))
	return readImagesWith(t, srv, cfg, table, stop)
}

// readImagesWith is readImages with a syncer configuration of the caller's,
// which need not pass CheckConfig.
func readImagesWith(t *testing.T, srv *sandbox.Server, cfg replication.BinlogSyncerConfig, table, stop string) []image {
	t.Helper()
	syncer := replication.NewBinlogSyncer(cfg)
	defer syncer.Close()
	empty, err := gtid.Parse("")
	require.NoError(t, err)
	start, err := empty.GoMySQL(string(srv.Flavor))
	require.NoError(t, err)
	stream, err := syncer.StartSyncGTID(start)
	require.NoError(t, err)
	// A deadline only so that a missing event fails the test instead of hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out []image
	for {
		ev, err := stream.GetEvent(ctx)
		require.NoError(t, err, "reading the binlog until the row in %s", stop)
		_, compressed := ev.Event.(*replication.TransactionPayloadEvent)
		for _, ev := range Unwrap(ev) {
			re, ok := ev.Event.(*replication.RowsEvent)
			if !ok {
				continue
			}
			switch string(re.Table.Table) {
			case stop:
				return out
			case table:
			default:
				continue
			}
			out = append(out, rowImages(t, ev.Header.EventType, re, compressed)...)
		}
	}
}

// rowImages are the images of one rows event.
func rowImages(t *testing.T, typ replication.EventType, re *replication.RowsEvent, compressed bool) []image {
	t.Helper()
	var out []image
	for i, values := range re.Rows {
		im := image{table: re.Table, values: values, skipped: re.SkippedColumns[i], compressed: compressed}
		switch typ {
		case replication.WRITE_ROWS_EVENTv0, replication.WRITE_ROWS_EVENTv1, replication.WRITE_ROWS_EVENTv2:
			im.kind, im.state = "insert", inserted
		case replication.UPDATE_ROWS_EVENTv0, replication.UPDATE_ROWS_EVENTv1, replication.UPDATE_ROWS_EVENTv2,
			replication.PARTIAL_UPDATE_ROWS_EVENT:
			im.kind, im.state = "update before", inserted
			if i%2 == 1 {
				im.kind, im.state = "update after", updated
			}
		case replication.DELETE_ROWS_EVENTv0, replication.DELETE_ROWS_EVENTv1, replication.DELETE_ROWS_EVENTv2:
			im.kind, im.state = "delete", updated
		default:
			t.Fatalf("unexpected rows event %s for %s", typ, re.Table.Table)
		}
		out = append(out, im)
	}
	return out
}

// requireSameValues fails with every column whose converted bytes differ from
// the SELECT's; of MySQL JSON, whose converted value is a typed value, the text
// part.
func requireSameValues(t *testing.T, what string, cols []schema.Column, got, want [][]byte) {
	t.Helper()
	var diffs []string
	for i, c := range cols {
		if c.DataType == "json" && got[i] != nil {
			got[i], _ = mysqljson.Split(got[i])
		}
		if (got[i] == nil) != (want[i] == nil) || !bytes.Equal(got[i], want[i]) {
			diffs = append(diffs, fmt.Sprintf("%s (%s): binlog %s, SELECT %s", c.Name, c.ColumnType, show(got[i]), show(want[i])))
		}
	}
	require.Empty(t, diffs, "%s differs from the SELECT", what)
}

// show prints a value for a failure message: NULL, or quoted and cut short.
func show(v []byte) string {
	if v == nil {
		return "NULL"
	}
	if len(v) > 80 {
		return fmt.Sprintf("%q... (%d bytes)", v[:80], len(v))
	}
	return fmt.Sprintf("%q", v)
}

// TestCheckSkippedRejectsMinimalImages checks that an image a session logged with
// binlog_row_image=MINIMAL, whose left-out columns go-mysql decodes as nil, is
// refused instead of read as NULLs.
func TestCheckSkippedRejectsMinimalImages(t *testing.T) {
	sandboxtest.EachFlavor(t, testCheckSkippedRejectsMinimalImages)
}

func testCheckSkippedRejectsMinimalImages(t *testing.T, flavor sandbox.Flavor) {
	ctx := context.Background()
	srv := sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
	src, _, err := dbconn.Open(srv.DSN(""), dbconn.Source)
	require.NoError(t, err)
	t.Cleanup(func() { src.Close() })
	w, err := sandboxtest.Open(t, srv, "").Conn(ctx)
	require.NoError(t, err)
	defer w.Close()
	for _, q := range []string{
		"CREATE DATABASE binlogrow",
		"CREATE TABLE binlogrow.m (id INT PRIMARY KEY, a INT, b VARCHAR(10))",
		"INSERT INTO binlogrow.m VALUES (1, 1, 'x')",
		"SET SESSION binlog_row_image = 'MINIMAL'",
		"UPDATE binlogrow.m SET a = 2 WHERE id = 1",
		"DELETE FROM binlogrow.m WHERE id = 1",
		"CREATE TABLE binlogrow.done (id INT PRIMARY KEY)",
		"INSERT INTO binlogrow.done VALUES (1)",
	} {
		_, err := w.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	tbl, err := schema.Load(ctx, src, "binlogrow", "m")
	require.NoError(t, err)
	cols, err := tbl.Streamed(nil)
	require.NoError(t, err)
	images := readImages(t, srv, "m", "done")
	var kinds []string
	for _, im := range images {
		kinds = append(kinds, im.kind)
	}
	require.Equal(t, []string{"insert", "update before", "update after", "delete"}, kinds)
	for _, im := range images {
		conv, err := NewConverter(im.table, cols)
		require.NoError(t, err)
		if im.kind == "insert" {
			require.NoError(t, conv.CheckSkipped(im.skipped), "the insert was logged with a FULL image")
			continue
		}
		require.ErrorContains(t, conv.CheckSkipped(im.skipped), "leaves out streamed column", im.kind)
	}
}

// TestConvertMySQLHiddenColumns: an INVISIBLE column is logged and streamed
// like any other, and the hidden generated columns behind functional indexes,
// which information_schema does not show, are not logged.
func TestConvertMySQLHiddenColumns(t *testing.T) {
	ctx := context.Background()
	srv := sandboxtest.Start(t, sandbox.Options{Flavor: sandbox.MySQL})
	db := sandboxtest.Open(t, srv, "")
	sandboxtest.Exec(t, db, "CREATE DATABASE binlogrow",
		"CREATE TABLE binlogrow.h (id INT PRIMARY KEY, a VARCHAR(10), inv INT INVISIBLE, b INT, KEY fn ((UPPER(a))), KEY fn2 ((b * 2)))",
		"INSERT INTO binlogrow.h (id, a, inv, b) VALUES (1, 'x', 7, 2), (2, NULL, NULL, NULL)",
		"CREATE TABLE binlogrow.done (id INT PRIMARY KEY)", "INSERT INTO binlogrow.done VALUES (1)")
	tbl, err := schema.Load(ctx, db, "binlogrow", "h")
	require.NoError(t, err)
	cols, err := tbl.Streamed(nil)
	require.NoError(t, err)
	var names []string
	for _, c := range cols {
		names = append(names, c.Name)
	}
	require.Equal(t, []string{"id", "a", "inv", "b"}, names)
	want := selectRows(t, db, "h", cols)
	images := readImages(t, srv, "h", "done")
	require.Len(t, images, 2)
	require.Equal(t, names, images[0].table.ColumnNameString(), "the functional indexes' hidden columns are not logged")
	row := &rowliftv1.Row{}
	for _, im := range images {
		conv, err := NewConverter(im.table, cols)
		require.NoError(t, err)
		require.NoError(t, conv.Convert(row, im.values))
		got, err := rowcodec.Values(nil, row)
		require.NoError(t, err)
		requireSameValues(t, "row "+string(got[0]), cols, got, want[string(got[0])])
	}
}
