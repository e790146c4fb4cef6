package verify

import (
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/schema"
)

// servers starts a source and a target server, each with an empty database "db",
// and returns pools on "db". srcArgs and dstArgs are extra server options.
func servers(t *testing.T, flavor sandbox.Flavor, srcArgs, dstArgs []string) (src, dst *sql.DB) {
	t.Helper()
	open := func(args []string) *sql.DB {
		s := sandboxtest.Start(t, sandbox.Options{Flavor: flavor, Args: args})
		sandboxtest.Exec(t, sandboxtest.Open(t, s, ""), "CREATE DATABASE db")
		return sandboxtest.Open(t, s, "db")
	}
	return open(srcArgs), open(dstArgs)
}

// both runs statements on the source and on the target.
func both(t *testing.T, src, dst *sql.DB, stmts ...string) {
	t.Helper()
	sandboxtest.Exec(t, src, stmts...)
	sandboxtest.Exec(t, dst, stmts...)
}

func verify(t *testing.T, src, dst *sql.DB, table string, opts Options) *Result {
	t.Helper()
	res, err := Table(t.Context(), src, dst, "db", "db", table, opts)
	require.NoError(t, err)
	return res
}

// requireCounts checks every count of a result.
func requireCounts(t *testing.T, res *Result, srcRows, dstRows, missing, extra, different int64) {
	t.Helper()
	require.Equal(t, [5]int64{srcRows, dstRows, missing, extra, different},
		[5]int64{res.SourceRows, res.TargetRows, res.Missing, res.Extra, res.Different},
		"source rows, target rows, missing, extra, different; result:\n%s", res)
}

// minTime is the smallest TIME(2) of each flavor: MySQL's range ends at a whole
// second.
var minTime = map[sandbox.Flavor]string{sandbox.MariaDB: "-838:59:59.99", sandbox.MySQL: "-838:59:59.00"}

func TestIdenticalTablesOfEveryType(t *testing.T) {
	t.Parallel()
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		// The servers run in different time zones: TIMESTAMP values only compare equal
		// because verify reads both in UTC.
		src, dst := servers(t, flavor, []string{"--default-time-zone=-03:00"}, []string{"--default-time-zone=+05:00"})
		both(t, src, dst,
			`CREATE TABLE t (
				id BIGINT UNSIGNED PRIMARY KEY, i TINYINT, u INT UNSIGNED, de DECIMAL(30,10), f FLOAT, d DOUBLE,
				c CHAR(5), v VARCHAR(20) CHARACTER SET latin1, tx TEXT, bl BLOB, bn BINARY(4), vb VARBINARY(8),
				dt DATETIME(6), ts TIMESTAMP(3) NULL, tm TIME(2), da DATE, y YEAR, b BIT(10), e ENUM('x','y'),
				s SET('p','q'), j JSON, g INT AS (i + 1) VIRTUAL)`,
			`INSERT INTO t (id, i, u, de, f, d, c, v, tx, bl, bn, vb, dt, ts, tm, da, y, b, e, s, j) VALUES
				(1, -128, 4294967295, -12345678901234567890.0123456789, 0.1, 0.1, 'ab', 'é', 'text', X'00FF', X'01', X'0100',
				 '2024-02-29 12:34:56.789012', FROM_UNIXTIME(1700000000.123), '`+minTime[flavor]+`', '1000-01-01', 2155, b'1010101010',
				 'y', 'p,q', '{"a": [1, 2]}'),
				(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
				(18446744073709551615, 127, 0, 0, -3.4028234e38, 1.7976931348623157e308, '', '', '', '', '', '',
				 '9999-12-31 23:59:59.999999', FROM_UNIXTIME(2147483647), '838:59:59', '9999-12-31', 1901, b'0', 'x', '', '[]')`)

		res := verify(t, src, dst, "t", Options{})
		require.True(t, res.Identical(), res.String())
		requireCounts(t, res, 3, 3, 0, 0, 0)
		require.Empty(t, res.Examples)
		require.Equal(t, "t: identical, 3 rows", res.String())
	})
}

func TestReportsMissingExtraAndDifferentRows(t *testing.T) {
	t.Parallel()
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		src, dst := servers(t, flavor, nil, nil)
		both(t, src, dst, "CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(10), b INT)")
		sandboxtest.Exec(t, src, "INSERT INTO t VALUES (1,'a',1), (2,'b',2), (3,'c',3), (4,'d',4), (5,'e',5), (6,'f',6)")
		sandboxtest.Exec(t, dst, "INSERT INTO t VALUES (1,'a',1), (3,'c',3), (4,'D',4), (5,'e',50), (6,'f',6), (7,'g',7)")

		res := verify(t, src, dst, "t", Options{})
		require.False(t, res.Identical())
		requireCounts(t, res, 6, 6, 1, 1, 2)
		require.Equal(t, []string{
			"missing on target: (id=2)",
			"different: (id=4)",
			"different: (id=5)",
			"extra on target: (id=7)",
		}, res.Examples)
		require.Equal(t, `t: 1 missing on target, 1 extra on target, 2 different (6 source rows, 6 target rows):
  missing on target: (id=2)
  different: (id=4)
  different: (id=5)
  extra on target: (id=7)`, res.String())
	})
}

// TestValueDifferences puts one value on the source and one on the target and
// checks whether verify tells them apart.
func TestValueDifferences(t *testing.T) {
	t.Parallel()
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		src, dst := servers(t, flavor, nil, nil)
		lit := func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
		cases := []struct {
			name, column, source, target string
			different                    bool
		}{
			{"NULL vs empty string", "VARCHAR(5)", "NULL", "''", true},
			{"NULL vs 0", "INT", "NULL", "0", true},
			{"NULL vs NULL", "INT", "NULL", "NULL", false},
			{"empty string vs 'n'", "VARCHAR(5)", "''", "'n'", true},
			{"latin1 undefined bytes", "VARCHAR(5) CHARACTER SET latin1", "X'81'", "X'8D'", true},
			{"latin1 bytes equal under the collation", "VARCHAR(5) CHARACTER SET latin1", "X'E9'", "X'C9'", true},
			{"case in a case-insensitive column", "VARCHAR(5) COLLATE utf8mb4_general_ci", "'a'", "'A'", true},
			{"trailing space in VARCHAR", "VARCHAR(5)", "'a'", "'a '", true},
			{"CHAR does not keep trailing spaces", "CHAR(5)", "'a'", "'a  '", false},
			{"trailing zero byte in VARBINARY", "VARBINARY(5)", "X'61'", "X'6100'", true},
			{"BINARY pads with zero bytes", "BINARY(3)", "X'61'", "X'6100'", false},
			{"FLOAT last bit at 1", "FLOAT", "1", lit(float64(math.Nextafter32(1, 2))), true},
			{"FLOAT last bit at its maximum", "FLOAT", lit(math.MaxFloat32), lit(float64(math.Nextafter32(math.MaxFloat32, 0))), true},
			{"FLOAT same value", "FLOAT", lit(float64(float32(0.1))), "0.1", false},
			{"DOUBLE last bit at 1", "DOUBLE", "1", lit(math.Nextafter(1, 2)), true},
			{"DOUBLE last bit at 0.1", "DOUBLE", "0.1", lit(math.Nextafter(0.1, 1)), true},
			{"DOUBLE last bit at its maximum", "DOUBLE", lit(math.MaxFloat64), lit(math.Nextafter(math.MaxFloat64, 0)), true},
			{"DOUBLE smallest subnormals", "DOUBLE", lit(math.SmallestNonzeroFloat64), lit(2 * math.SmallestNonzeroFloat64), true},
			{"DECIMAL same value", "DECIMAL(10,3)", "1.5", "1.500", false},
			{"DECIMAL last digit", "DECIMAL(30,10)", "1.0000000001", "1.0000000002", true},
			{"DATETIME microsecond", "DATETIME(6)", "'2024-01-01 00:00:00.000001'", "'2024-01-01 00:00:00.000002'", true},
			{"TIME sign", "TIME", "'-01:00:00'", "'01:00:00'", true},
			{"BIT(64) low bit", "BIT(64)", "0xFFFFFFFFFFFFFFFF", "0xFFFFFFFFFFFFFFFE", true},
			{"ENUM", "ENUM('x','y')", "'x'", "'y'", true},
			{"SET", "SET('p','q')", "'p'", "'p,q'", true},
			// MariaDB's JSON is text; MySQL's is a value, whose text it
			// normalizes, and tells a double from an integer.
			{"JSON text", "JSON", `'{"a":1}'`, `'{"a": 1}'`, flavor == sandbox.MariaDB},
			{"JSON key order", "JSON", `'{"a": 1, "b": 2}'`, `'{"b": 2, "a": 1}'`, flavor == sandbox.MariaDB},
			{"JSON double and integer", "JSON", `'{"a": 1.0}'`, `'{"a": 1}'`, true},
			{"BIGINT UNSIGNED maximum", "BIGINT UNSIGNED", "18446744073709551615", "18446744073709551614", true},
		}
		if flavor == sandbox.MySQL {
			cases = append(cases, []struct {
				name, column, source, target string
				different                    bool
			}{
				{"VECTOR last bit", "VECTOR(2)", "STRING_TO_VECTOR('[1, 2]')", "STRING_TO_VECTOR('[1, 2.0000002]')", true},
				{"VECTOR same value", "VECTOR(2)", "STRING_TO_VECTOR('[1, 2]')", "STRING_TO_VECTOR('[1.0, 2e0]')", false},
			}...)
		}
		for i, c := range cases {
			table := fmt.Sprintf("v%d", i)
			both(t, src, dst, fmt.Sprintf("CREATE TABLE %s (id INT PRIMARY KEY, v %s)", table, c.column))
			sandboxtest.Exec(t, src, fmt.Sprintf("INSERT INTO %s VALUES (1, %s)", table, c.source))
			sandboxtest.Exec(t, dst, fmt.Sprintf("INSERT INTO %s VALUES (1, %s)", table, c.target))
			t.Run(c.name, func(t *testing.T) {
				res := verify(t, src, dst, table, Options{})
				if c.different {
					requireCounts(t, res, 1, 1, 0, 0, 1)
					require.Equal(t, []string{"different: (id=1)"}, res.Examples)
				} else {
					requireCounts(t, res, 1, 1, 0, 0, 0)
				}
			})
		}
	})
}

// TestFloatTextIsExact proves the FLOAT and DOUBLE form that verify hashes is
// exact: for random bit patterns and edge values it parses back to the stored
// bits (on MySQL a FLOAT's to the FLOAT's, not its widening's), so two
// different stored values never hash alike. It also checks that the server's
// SHA2 hashes exactly that text.
func TestFloatTextIsExact(t *testing.T) {
	t.Parallel()
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		src, _ := servers(t, flavor, nil, nil)
		sandboxtest.Exec(t, src, "CREATE TABLE t (id INT PRIMARY KEY, f FLOAT, d DOUBLE)")
		floats := []float32{0, 1, -1, math.Nextafter32(1, 2), math.MaxFloat32, -math.MaxFloat32,
			math.SmallestNonzeroFloat32, 2 * math.SmallestNonzeroFloat32, 0x1p-126, math.Nextafter32(0x1p-126, 0), 16777217, 0.1}
		doubles := []float64{0, 1, -1, math.Nextafter(1, 2), math.MaxFloat64, -math.MaxFloat64,
			math.SmallestNonzeroFloat64, 2 * math.SmallestNonzeroFloat64, 0x1p-1022, math.Nextafter(0x1p-1022, 0), 0.1, 1e23, 9007199254740993}
		rng := rand.New(rand.NewPCG(1, 2))
		for len(floats) < 3000 {
			f := math.Float32frombits(rng.Uint32())
			if !math.IsNaN(float64(f)) && !math.IsInf(float64(f), 0) && f != 0 {
				floats = append(floats, f)
			}
		}
		for len(doubles) < 3000 {
			d := math.Float64frombits(rng.Uint64())
			if !math.IsNaN(d) && !math.IsInf(d, 0) && d != 0 {
				doubles = append(doubles, d)
			}
		}
		for start := 0; start < len(floats); start += 500 {
			var q strings.Builder
			var args []any
			q.WriteString("INSERT INTO t VALUES ")
			for i := start; i < start+500; i++ {
				if i > start {
					q.WriteString(", ")
				}
				q.WriteString("(?, ?, ?)")
				args = append(args, i, floats[i], doubles[i]) // sent as IEEE doubles
			}
			_, err := src.Exec(q.String(), args...)
			require.NoError(t, err)
		}

		f, d := schema.Column{Name: "f", DataType: "float"}, schema.Column{Name: "d", DataType: "double"}
		// CONCAT returns the server's text as a string: the driver would parse a
		// DOUBLE column into a float64 and print it itself.
		rows, err := src.Query(fmt.Sprintf("SELECT id, CONCAT(%[1]s), SHA2(%[1]s, 256), CONCAT(%[2]s), SHA2(%[2]s, 256) FROM t ORDER BY id",
			valueExpr(f, false), valueExpr(d, false)))
		require.NoError(t, err)
		defer rows.Close()
		n := 0
		for rows.Next() {
			var id int
			var fText, fHash, dText, dHash string
			require.NoError(t, rows.Scan(&id, &fText, &fHash, &dText, &dHash))
			if flavor == sandbox.MySQL {
				// MySQL prints a computed double with 16 digits: enough
				// to give back the FLOAT, not always its widening.
				gotF, err := strconv.ParseFloat(fText, 32)
				require.NoError(t, err)
				require.Equal(t, math.Float32bits(floats[id]), math.Float32bits(float32(gotF)), "FLOAT %g printed as %s", floats[id], fText)
			} else {
				gotF, err := strconv.ParseFloat(fText, 64)
				require.NoError(t, err)
				require.Equal(t, math.Float64bits(float64(floats[id])), math.Float64bits(gotF), "FLOAT %g printed as %s", floats[id], fText)
			}
			gotD, err := strconv.ParseFloat(dText, 64)
			require.NoError(t, err)
			require.Equal(t, math.Float64bits(doubles[id]), math.Float64bits(gotD), "DOUBLE %g printed as %s", doubles[id], dText)
			require.Equal(t, sha256hex(fText), fHash)
			require.Equal(t, sha256hex(dText), dHash)
			n++
		}
		require.NoError(t, rows.Err())
		require.Equal(t, len(floats), n)
	})
}

func sha256hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestStringKeyOrder merges string keys under collations whose order differs
// from byte order (case-insensitive, PAD SPACE with characters below the space,
// accents) and binary strings. Every value is on both sides except that the
// target lacks 'B', has an extra 'd' and has 'A' instead of 'a'. A merge in the
// wrong order would miscount, and each side's stream is checked to come in
// strictly increasing key order, so a wrong comparison fails the run.
func TestStringKeyOrder(t *testing.T) {
	t.Parallel()
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		src, dst := servers(t, flavor, nil, nil)
		// The target gets 'A' and 'd' in place of the first two values.
		values := []string{"'a'", "'B'", "'c'", "'a\\t'", "'ab'", "'b\\n'", "'é'", "'z '", "' '"}
		// NUL is ignorable under UCA collations, so these would be duplicates there.
		withNUL := append([]string{"'a\\0'", "'\\0'"}, values...)
		caseInsensitive := []string{
			"different: (k='a'), on target (k='A')",
			"missing on target: (k='B')",
			"extra on target: (k='d')",
		}
		byCodePoint := []string{
			"extra on target: (k='A')",
			"missing on target: (k='B')",
			"missing on target: (k='a')",
			"extra on target: (k='d')",
		}
		cases := []struct {
			column string
			values []string
			ci     bool
			prefix string // key prefix length, for TEXT and BLOB
		}{
			{"VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci", withNUL, true, ""},
			{"VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci", values, true, ""},
			{"CHAR(10) CHARACTER SET latin1 COLLATE latin1_swedish_ci", withNUL, true, ""},
			{"VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin", withNUL, false, ""},
			{"VARBINARY(10)", withNUL, false, ""},
			{"BLOB", withNUL, false, "(10)"},
		}
		// Each flavor's NO PAD collations: MariaDB's nopad ones, MySQL's
		// UCA 9.0 ones, its default.
		noPad := "utf8mb4_nopad_bin"
		if flavor == sandbox.MySQL {
			noPad = "utf8mb4_0900_bin"
			cases = append(cases, []struct {
				column string
				values []string
				ci     bool
				prefix string
			}{
				{"VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_ai_ci", values, true, ""},
				{"CHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_ai_ci", values, true, ""},
			}...)
		} else {
			cases = append(cases, struct {
				column string
				values []string
				ci     bool
				prefix string
			}{"VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_nopad_ci", values, true, ""})
		}
		cases = append(cases, []struct {
			column string
			values []string
			ci     bool
			prefix string
		}{
			{"VARCHAR(10) CHARACTER SET utf8mb4 COLLATE " + noPad, withNUL, false, ""},
			{"TEXT CHARACTER SET utf8mb4 COLLATE " + noPad, withNUL, false, "(10)"},
		}...)
		for i, c := range cases {
			table := fmt.Sprintf("s%d", i)
			both(t, src, dst, fmt.Sprintf("CREATE TABLE %s (k %s NOT NULL, n INT, PRIMARY KEY (k%s))", table, c.column, c.prefix))
			sandboxtest.Exec(t, src, fmt.Sprintf("INSERT INTO %s (k) VALUES (%s)", table, strings.Join(c.values, "), (")))
			dstValues := []string{"'A'", "'d'"}
			for _, v := range c.values {
				if v != "'a'" && v != "'B'" {
					dstValues = append(dstValues, v)
				}
			}
			sandboxtest.Exec(t, dst, fmt.Sprintf("INSERT INTO %s (k) VALUES (%s)", table, strings.Join(dstValues, "), (")))
			t.Run(c.column, func(t *testing.T) {
				res := verify(t, src, dst, table, Options{})
				rows := int64(len(c.values))
				if c.ci {
					requireCounts(t, res, rows, rows, 1, 1, 1)
					require.Equal(t, caseInsensitive, res.Examples)
				} else {
					requireCounts(t, res, rows, rows, 2, 2, 0)
					require.Equal(t, byCodePoint, res.Examples)
				}
			})
		}
	})
}

// TestKeyOrderByType merges single-column keys of each non-string type whose
// values sort differently as text than by value. The target lacks one value and
// has one extra.
func TestKeyOrderByType(t *testing.T) {
	t.Parallel()
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		src, dst := servers(t, flavor, []string{"--default-time-zone=+00:00"}, []string{"--default-time-zone=+00:00"})
		cases := []struct {
			column         string
			values         []string // in key order
			missing, extra string   // the target lacks missing and has extra
			want           []string
		}{
			{"INT", []string{"-2147483648", "-10", "-9", "0", "9", "10", "2147483647"}, "9", "-5",
				[]string{"extra on target: (k=-5)", "missing on target: (k=9)"}},
			{"BIGINT UNSIGNED", []string{"0", "9", "10", "9223372036854775807", "9223372036854775808", "18446744073709551615"},
				"9223372036854775808", "8", []string{"extra on target: (k=8)", "missing on target: (k=9223372036854775808)"}},
			{"DECIMAL(30,10)", []string{"-100", "-99.5", "-1.25", "-0.5", "0", "0.0000000001", "2", "10"}, "10", "-2",
				[]string{"extra on target: (k=-2.0000000000)", "missing on target: (k=10.0000000000)"}},
			{"DOUBLE", []string{"-1.7976931348623157e308", "-1e10", "-2", "-5e-324", "0", "5e-324", "0.1", "1", "1e10", "1e308"}, "0.1", "-1e9",
				[]string{"extra on target: (k=-1000000000)", "missing on target: (k=0.1)"}},
			{"FLOAT", []string{"-1e30", "-100", "-2", "0", "0.5", "2", "100", "1e30"}, "1e30", "-50",
				[]string{"extra on target: (k=-50)", "missing on target: (k=1.0000000150474662e30)"}},
			{"BIT(64)", []string{"0", "9", "10", "0x7FFFFFFFFFFFFFFF", "0x8000000000000000", "0xFFFFFFFFFFFFFFFF"}, "0x8000000000000000", "5",
				[]string{"extra on target: (k=5)", "missing on target: (k=9223372036854775808)"}},
			{"YEAR", []string{"1901", "1999", "2000", "2155"}, "2155", "1950",
				[]string{"extra on target: (k=1950)", "missing on target: (k=2155)"}},
			{"DATE", []string{"'1000-01-01'", "'1999-12-31'", "'2000-01-01'", "'2000-01-02'", "'9999-12-31'"}, "'2000-01-02'", "'1999-09-23'",
				[]string{"extra on target: (k='1999-09-23')", "missing on target: (k='2000-01-02')"}},
			{"DATETIME(6)", []string{"'1000-01-01 00:00:00'", "'1999-12-31 23:59:59.999999'", "'2000-01-01 00:00:00'", "'2000-01-01 00:00:00.000001'", "'2000-01-01 10:00:00'", "'2000-01-02 09:00:00'"},
				"'2000-01-01 10:00:00'", "'1999-12-31 23:59:59.999998'",
				[]string{"extra on target: (k='1999-12-31 23:59:59.999998')", "missing on target: (k='2000-01-01 10:00:00.000000')"}},
			{"TIMESTAMP(3)", []string{"'1970-01-01 00:00:01'", "'1999-12-31 23:59:59.999'", "'2000-01-01 09:00:00'", "'2000-01-01 10:00:00'", "'2038-01-19 03:14:07.999'"},
				"'2038-01-19 03:14:07.999'", "'2000-01-01 08:59:59.5'",
				[]string{"extra on target: (k='2000-01-01 08:59:59.500')", "missing on target: (k='2038-01-19 03:14:07.999')"}},
			{"TIME(1)", []string{"'-838:59:59'", "'-100:00:00'", "'-99:59:59.9'", "'-10:00:00'", "'-9:00:00'", "'-00:00:00.1'", "'00:00:00'", "'9:00:00'", "'10:00:00'", "'100:00:00'", "'838:59:59'"},
				"'100:00:00'", "'-100:00:00.5'",
				[]string{"extra on target: (k='-100:00:00.5')", "missing on target: (k='100:00:00.0')"}},
		}
		for i, c := range cases {
			table := fmt.Sprintf("k%d", i)
			both(t, src, dst, fmt.Sprintf("CREATE TABLE %s (k %s PRIMARY KEY)", table, c.column))
			sandboxtest.Exec(t, src, fmt.Sprintf("INSERT INTO %s VALUES (%s)", table, strings.Join(c.values, "), (")))
			var dstValues []string
			for _, v := range c.values {
				if v != c.missing {
					dstValues = append(dstValues, v)
				}
			}
			dstValues = append(dstValues, c.extra)
			sandboxtest.Exec(t, dst, fmt.Sprintf("INSERT INTO %s VALUES (%s)", table, strings.Join(dstValues, "), (")))
			t.Run(c.column, func(t *testing.T) {
				res := verify(t, src, dst, table, Options{})
				rows := int64(len(c.values))
				requireCounts(t, res, rows, rows, 1, 1, 0)
				require.Equal(t, c.want, res.Examples)
			})
		}
	})
}

func TestCompositeKey(t *testing.T) {
	t.Parallel()
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		src, dst := servers(t, flavor, nil, nil)
		both(t, src, dst,
			`CREATE TABLE t (n INT, s VARCHAR(10) COLLATE utf8mb4_general_ci, d DATETIME, v INT, PRIMARY KEY (n, s, d))`,
			`INSERT INTO t VALUES
				(-5, 'z', '2024-01-01 00:00:00', 0),
				(1, 'a', '2024-01-01 00:00:00', 0),
				(1, 'B', '2023-12-31 23:59:59', 0),
				(1, 'c', '1999-01-01 00:00:00', 0),
				(2, 'A', '2000-01-01 00:00:00', 0),
				(10, 'a', '1999-12-31 23:59:59', 0)`)
		sandboxtest.Exec(t, src, "INSERT INTO t VALUES (1, 'B', '2024-01-01 00:00:00', 0)")
		sandboxtest.Exec(t, dst,
			"INSERT INTO t VALUES (1, 'b', '2025-01-01 00:00:00', 0)",
			"UPDATE t SET v = 1 WHERE n = 10",
			"UPDATE t SET s = 'C' WHERE n = 1 AND s = 'c'")

		res := verify(t, src, dst, "t", Options{})
		requireCounts(t, res, 7, 7, 1, 1, 2)
		require.Equal(t, []string{
			"missing on target: (n=1, s='B', d='2024-01-01 00:00:00')",
			"extra on target: (n=1, s='b', d='2025-01-01 00:00:00')",
			"different: (n=1, s='c', d='1999-01-01 00:00:00'), on target (n=1, s='C', d='1999-01-01 00:00:00')",
			"different: (n=10, s='a', d='1999-12-31 23:59:59')",
		}, res.Examples)
	})
}

func TestEmptyTables(t *testing.T) {
	t.Parallel()
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		src, dst := servers(t, flavor, nil, nil)
		both(t, src, dst, "CREATE TABLE e (id INT PRIMARY KEY)", "CREATE TABLE s (id INT PRIMARY KEY)", "CREATE TABLE d (id INT PRIMARY KEY)")
		sandboxtest.Exec(t, src, "INSERT INTO s VALUES (1), (2)")
		sandboxtest.Exec(t, dst, "INSERT INTO d VALUES (1), (2)")

		res := verify(t, src, dst, "e", Options{})
		requireCounts(t, res, 0, 0, 0, 0, 0)
		require.Equal(t, "e: identical, 0 rows", res.String())

		res = verify(t, src, dst, "s", Options{})
		requireCounts(t, res, 2, 0, 2, 0, 0)
		require.Equal(t, []string{"missing on target: (id=1)", "missing on target: (id=2)"}, res.Examples)

		res = verify(t, src, dst, "d", Options{})
		requireCounts(t, res, 0, 2, 0, 2, 0)
		require.Equal(t, []string{"extra on target: (id=1)", "extra on target: (id=2)"}, res.Examples)
	})
}

func TestLargeTableWithScatteredDifferences(t *testing.T) {
	t.Parallel()
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		src, dst := servers(t, flavor, nil, nil)
		both(t, src, dst, "CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(40), b DOUBLE, c DATETIME(3), d BLOB)")
		for start := 1; start <= 20000; start += 1000 {
			var q strings.Builder
			q.WriteString("INSERT INTO t VALUES ")
			for id := start; id < start+1000; id++ {
				if id > start {
					q.WriteString(", ")
				}
				fmt.Fprintf(&q, "(%d, 'row %d', %d / 7e0, '2024-01-01' + INTERVAL %d SECOND, REPEAT('x', %d))", id, id, id, id, id%300)
			}
			both(t, src, dst, q.String())
		}
		sandboxtest.Exec(t, dst,
			"DELETE FROM t WHERE id = 1234",
			"UPDATE t SET b = b + 1e-12 WHERE id = 9876")
		sandboxtest.Exec(t, src, "DELETE FROM t WHERE id = 15555")

		res := verify(t, src, dst, "t", Options{})
		requireCounts(t, res, 19999, 19999, 1, 1, 1)
		require.Equal(t, []string{
			"missing on target: (id=1234)",
			"different: (id=9876)",
			"extra on target: (id=15555)",
		}, res.Examples)
	})
}

func TestMaxReported(t *testing.T) {
	t.Parallel()
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		src, dst := servers(t, flavor, nil, nil)
		both(t, src, dst, "CREATE TABLE t (id INT PRIMARY KEY)")
		var values []string
		for id := 1; id <= 30; id++ {
			values = append(values, strconv.Itoa(id))
		}
		sandboxtest.Exec(t, src, "INSERT INTO t VALUES ("+strings.Join(values, "), (")+")")

		res := verify(t, src, dst, "t", Options{})
		requireCounts(t, res, 30, 0, 30, 0, 0)
		require.Len(t, res.Examples, DefaultMaxReported)
		require.Equal(t, "missing on target: (id=20)", res.Examples[19])
		require.Contains(t, res.String(), "; first 20 of 30 differing keys:\n  missing on target: (id=1)\n")

		res = verify(t, src, dst, "t", Options{MaxReported: 2})
		requireCounts(t, res, 30, 0, 30, 0, 0)
		require.Equal(t, `t: 30 missing on target, 0 extra on target, 0 different (30 source rows, 0 target rows); first 2 of 30 differing keys:
  missing on target: (id=1)
  missing on target: (id=2)`, res.String())
	})
}

func TestColumns(t *testing.T) {
	t.Parallel()
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		src, dst := servers(t, flavor, nil, nil)
		both(t, src, dst, "CREATE TABLE t (id INT PRIMARY KEY, a INT, b INT)")
		sandboxtest.Exec(t, src, "INSERT INTO t VALUES (1, 1, 1)", "ALTER TABLE t ADD COLUMN c INT")
		sandboxtest.Exec(t, dst, "INSERT INTO t VALUES (1, 1, 2)")

		res := verify(t, src, dst, "t", Options{Columns: []string{"id", "a"}})
		requireCounts(t, res, 1, 1, 0, 0, 0)

		res = verify(t, src, dst, "t", Options{Columns: []string{"id", "b"}})
		requireCounts(t, res, 1, 1, 0, 0, 1)

		_, err := Table(t.Context(), src, dst, "db", "db", "t", Options{Columns: []string{"a"}})
		require.ErrorIs(t, err, schema.ErrColumn)
		require.ErrorContains(t, err, "verify t: ")

		_, err = Table(t.Context(), src, dst, "db", "db", "t", Options{})
		require.ErrorIs(t, err, schema.ErrColumn)
		require.ErrorContains(t, err, "target db.t has no column c")
	})
}

func TestRejectsTablesThatCannotBeMerged(t *testing.T) {
	t.Parallel()
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		src, dst := servers(t, flavor, nil, nil)
		sandboxtest.Exec(t, src,
			"CREATE TABLE collation (k VARCHAR(5) COLLATE utf8mb4_general_ci PRIMARY KEY)",
			"CREATE TABLE only_source (k INT PRIMARY KEY)")
		sandboxtest.Exec(t, dst, "CREATE TABLE collation (k VARCHAR(5) COLLATE utf8mb4_bin PRIMARY KEY)")
		// A key type verify cannot order: MariaDB's UUID, and on MySQL,
		// which has none that schema accepts as a key, ENUM, which schema
		// refuses first.
		unordered := map[sandbox.Flavor]string{sandbox.MariaDB: "uuid", sandbox.MySQL: "enum('a')"}[flavor]
		why := map[sandbox.Flavor]string{sandbox.MariaDB: "key column k is uuid; verify cannot compare its order",
			sandbox.MySQL: "key column k is ENUM, which sorts by its index but compares as text"}[flavor]
		both(t, src, dst,
			"CREATE TABLE uuid (k "+unordered+" PRIMARY KEY)",
			"CREATE TABLE padded_text (k TEXT COLLATE utf8mb4_general_ci NOT NULL, PRIMARY KEY (k(10)))")

		_, err := Table(t.Context(), src, dst, "db", "db", "collation", Options{})
		require.ErrorIs(t, err, schema.ErrColumn)
		require.ErrorContains(t, err, "key column k is varchar(5) utf8mb4_general_ci on the source but varchar(5) utf8mb4_bin on the target")

		_, err = Table(t.Context(), src, dst, "db", "db", "only_source", Options{})
		require.ErrorIs(t, err, schema.ErrNoTable)
		require.ErrorContains(t, err, "verify only_source: target: ")

		_, err = Table(t.Context(), src, dst, "db", "db", "uuid", Options{})
		require.ErrorIs(t, err, schema.ErrNoKey)
		require.ErrorContains(t, err, why)

		_, err = Table(t.Context(), src, dst, "db", "db", "padded_text", Options{})
		require.ErrorIs(t, err, schema.ErrNoKey)
		require.ErrorContains(t, err, "key column k is text with PAD SPACE collation utf8mb4_general_ci")
	})
}

// TestConnectionSettingsDoNotMatter reads the target through a pool with another
// character set and parseTime, and checks that the session settings verify makes
// do not leak into the caller's pools.
func TestConnectionSettingsDoNotMatter(t *testing.T) {
	t.Parallel()
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		s := sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
		d := sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
		sandboxtest.Exec(t, sandboxtest.Open(t, s, ""), "CREATE DATABASE db")
		sandboxtest.Exec(t, sandboxtest.Open(t, d, ""), "CREATE DATABASE db")
		src := sandboxtest.Open(t, s, "db")
		dst, err := sql.Open("mysql", d.DSN("db")+"?charset=latin1&parseTime=true")
		require.NoError(t, err)
		t.Cleanup(func() { dst.Close() })
		src.SetMaxOpenConns(1)
		dst.SetMaxOpenConns(1)

		both(t, src, dst,
			`CREATE TABLE t (d DATETIME(6), k VARCHAR(10) CHARACTER SET latin1, u VARCHAR(10) CHARACTER SET utf8mb4, PRIMARY KEY (d, k))`,
			// Non-ASCII text as hex: the target's connection is latin1.
			`INSERT INTO t VALUES ('2024-01-01 00:00:00', _latin1 X'E9', _utf8mb4 X'C3BC'),
				('2024-01-01 00:00:00', 'x', _utf8mb4 X'C3B1'), ('2024-01-02 00:00:00', 'y', _utf8mb4 X'E282AC')`)
		sandboxtest.Exec(t, dst, "UPDATE t SET u = 'n' WHERE k = 'x'")

		res := verify(t, src, dst, "t", Options{})
		requireCounts(t, res, 3, 3, 0, 0, 1)
		require.Equal(t, []string{"different: (d='2024-01-01 00:00:00.000000', k='x')"}, res.Examples)
		// The key is shown from the target, read through its latin1 connection.
		sandboxtest.Exec(t, dst, "UPDATE t SET u = _utf8mb4 X'C3B1' WHERE k = 'x'")
		sandboxtest.Exec(t, src, "DELETE FROM t WHERE k = _latin1 X'E9'")
		res = verify(t, src, dst, "t", Options{})
		requireCounts(t, res, 2, 3, 0, 1, 0)
		require.Equal(t, []string{"extra on target: (d='2024-01-01 00:00:00.000000', k='é')"}, res.Examples)

		for _, db := range []*sql.DB{src, dst} {
			var zone string
			var timeout int
			require.NoError(t, db.QueryRow("SELECT @@session.time_zone, @@session.net_write_timeout").Scan(&zone, &timeout))
			require.Equal(t, "SYSTEM", zone)
			require.Equal(t, 60, timeout)
		}
	})
}

func TestSortFormsOrderLikeValues(t *testing.T) {
	orders := []struct {
		kind   keyKind
		values []string
	}{
		{keyTemporal, []string{"-838:59:59.000000", "-100:00:00.000000", "-99:59:59.999999", "-10:00:00.000000",
			"-09:59:59.000000", "-00:00:00.000001", "00:00:00.000000", "00:00:00.000001", "09:59:59.000000", "10:00:00.000000",
			"99:00:00.000000", "100:00:00.000000", "838:59:59.000000"}},
		{keyTemporal, []string{"0000-00-00 00:00:00", "0999-12-31 23:59:59", "1000-01-01 00:00:00", "1999-12-31 23:59:59",
			"2000-01-01 00:00:00", "2000-01-01 00:00:01", "2000-01-01 00:01:00", "2000-01-01 01:00:00", "2000-01-02 00:00:00",
			"2000-02-01 00:00:00", "9999-12-31 23:59:59"}},
		{keyTemporal, []string{"0000-00-00", "1000-01-01", "1999-12-31", "2000-01-01", "9999-12-31"}},
		{keyFloat, []string{"-1.7976931348623157e308", "-1e10", "-1", "-5e-324", "0", "5e-324", "2.2250738585072014e-308",
			"0.1", "1", "1.0000000000000002", "1e10", "1.7976931348623157e308"}},
	}
	for _, o := range orders {
		keys := []keyCol{{kind: o.kind}}
		form := func(v string) [][]byte {
			b, err := sortForm(nil, o.kind, []byte(v))
			require.NoError(t, err)
			return [][]byte{b}
		}
		for i := 1; i < len(o.values); i++ {
			a, b := o.values[i-1], o.values[i]
			require.Equal(t, -1, compareKeys(keys, form(a), form(b)), "%s vs %s", a, b)
			require.Equal(t, 1, compareKeys(keys, form(b), form(a)), "%s vs %s", b, a)
		}
	}
	zero, err := sortForm(nil, keyFloat, []byte("0"))
	require.NoError(t, err)
	negZero, err := sortForm(nil, keyFloat, []byte("-0"))
	require.NoError(t, err)
	require.Equal(t, zero, negZero)
	_, err = sortForm(nil, keyFloat, []byte("x"))
	require.Error(t, err)
}

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"ab":          "'ab'",
		"":            "''",
		"it's":        `'it\'s'`,
		`a\b`:         `'a\\b'`,
		"a\x00\t\n\r": `'a\0\t\n\r'`,
		"é€":          "'é€'",
		"\x7f\u200b":  `'\u007F\u200B'`,
		"\xff\x00":    "0xFF00",
	} {
		require.Equal(t, want, quote([]byte(in)), "%q", in)
	}
}

// TestRowHashTellsValuesApart: the row hash joins values with commas, so
// values holding commas, empty strings, NULLs and the NULL marker must still
// hash apart, in bounded strings and in TEXT alike.
func TestRowHashTellsValuesApart(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		db := sandboxtest.Open(t, sandboxtest.Start(t, sandbox.Options{Flavor: flavor}), "")
		sandboxtest.Exec(t, db, "CREATE DATABASE h",
			"CREATE TABLE h.t (id INT PRIMARY KEY, a VARCHAR(10), b VARBINARY(10), c TEXT, d INT)",
			`INSERT INTO h.t VALUES (1, 'a,b', 'c', NULL, 1), (2, 'a', 'b,c', NULL, 1), (3, NULL, '', NULL, NULL),
			 (4, '', NULL, NULL, NULL), (5, 'n', NULL, 'n', NULL), (6, NULL, 'n', NULL, NULL), (7, '', '', '', 0),
			 (8, '', '', '', NULL), (9, '1', ',', NULL, NULL), (10, '1,', '', NULL, NULL), (11, NULL, NULL, '', NULL),
			 (12, NULL, NULL, NULL, NULL)`)
		cols := []schema.Column{{Name: "a", DataType: "varchar"}, {Name: "b", DataType: "varbinary"}, {Name: "c", DataType: "text"}, {Name: "d", DataType: "int"}}
		rows, err := db.Query("SELECT id, " + rowHashExpr(cols, false) + " FROM h.t ORDER BY id")
		require.NoError(t, err)
		defer rows.Close()
		seen := map[string]int{}
		for rows.Next() {
			var id int
			var hash string
			require.NoError(t, rows.Scan(&id, &hash))
			require.NotContains(t, seen, hash, "rows %d and %d hash alike", seen[hash], id)
			seen[hash] = id
		}
		require.NoError(t, rows.Err())
		require.Len(t, seen, 12)
	})
}
