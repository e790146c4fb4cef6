package writeset

import (
	"bytes"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
)

// collideCase is one unique key column whose hashes are checked against the
// server's own idea of equal values.
type collideCase struct {
	name string
	def  string // column type with character set and collation
	// prefix is the key part's prefix length, 0 for the whole value.
	prefix int
	// values are inserted as raw bytes (hex literals); literals, for numbers,
	// as SQL text.
	values   [][]byte
	literals []string
	// exact: the key is hashed whole, so values the server tells apart must
	// hash apart too (but for a 2^-64 chance).
	exact bool
	// merges: some values given with different bytes are equal on the server,
	// so the case tests more than bytes.Equal. Numbers are given as stored,
	// which the server makes canonical.
	merges bool
	// only names the one flavor that has the case's collation or key (empty
	// for both).
	only sandbox.Flavor
}

// TestCollisionsAgreeWithServer checks, for each case, that values the server
// takes for equal hash equal, and, for keys hashed exactly, that values it tells
// apart hash apart. The server's equality is that of the column: a self-join
// on it (on its prefix for a prefix key), cross-checked against which values a
// UNIQUE key on it lets in. Each value is hashed as inserted and as read back
// (CHAR without its trailing spaces, BINARY with its trailing zeros), the two
// forms the Row encoding may have: both must hash alike.
func TestCollisionsAgreeWithServer(t *testing.T) {
	sandboxtest.EachFlavor(t, collisionsAgreeWithServer)
}

func collisionsAgreeWithServer(t *testing.T, flavor sandbox.Flavor) {
	srv := sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
	sandboxtest.Exec(t, sandboxtest.Open(t, srv, ""), "CREATE DATABASE d")
	db, _, err := dbconn.Open(srv.DSN("d"), dbconn.Source)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })

	r := rand.New(rand.NewPCG(7, 11))
	utf8mb4 := textValues(r, utf8Fixed, utf8Pool, strings.ToUpper, strings.ToLower)
	utf8mb3 := textValues(r, bmpOnly(utf8Fixed), bmpOnly(utf8Pool), strings.ToUpper, strings.ToLower)
	latin1 := textValues(r, latin1Fixed, latin1Pool, latin1Upper, latin1Lower)
	ascii := textValues(r, asciiOnly(latin1Fixed), asciiOnly(latin1Pool), latin1Upper, latin1Lower)
	binary := textValues(r, binaryFixed, binaryPool, latin1Upper, latin1Lower)
	cases := []collideCase{
		// Collations only the server knows: left out, so everything collides.
		{name: "utf8mb4_general_ci", def: "VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci", values: utf8mb4, merges: true},
		{name: "utf8mb4_unicode_ci", def: "VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci", values: utf8mb4, merges: true},
		{name: "utf8mb4_unicode_520_ci", def: "VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_520_ci", values: utf8mb4, merges: true},
		{name: "utf8mb4_uca1400_ai_ci", def: "VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_uca1400_ai_ci", values: utf8mb4, merges: true, only: sandbox.MariaDB},
		{name: "utf8mb4_unicode_nopad_ci", def: "VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_nopad_ci", values: utf8mb4, merges: true, only: sandbox.MariaDB},
		{name: "utf8mb4_0900_ai_ci", def: "VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_ai_ci", values: utf8mb4, merges: true, only: sandbox.MySQL},
		{name: "utf8mb4_0900_as_cs", def: "VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_as_cs", values: utf8mb4, merges: true, only: sandbox.MySQL},
		{name: "char utf8mb4_0900_ai_ci", def: "CHAR(12) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_ai_ci", values: utf8mb4, merges: true, only: sandbox.MySQL},
		{name: "char utf8mb4_general_ci", def: "CHAR(12) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci", values: utf8mb4, merges: true},
		{name: "utf8mb3_general_ci", def: "VARCHAR(20) CHARACTER SET utf8mb3 COLLATE utf8mb3_general_ci", values: utf8mb3, merges: true},
		{name: "latin1_swedish_ci", def: "VARCHAR(20) CHARACTER SET latin1 COLLATE latin1_swedish_ci", values: latin1, merges: true},
		{name: "latin1_general_cs", def: "VARCHAR(20) CHARACTER SET latin1 COLLATE latin1_general_cs", values: latin1, merges: true},
		{name: "text utf8mb4_general_ci prefix", def: "TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci", prefix: 4, values: utf8mb4, merges: true},
		// Binary collations: hashed exactly.
		{name: "utf8mb4_bin", def: "VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin", values: utf8mb4, exact: true, merges: true},
		{name: "char utf8mb4_bin", def: "CHAR(12) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin", values: utf8mb4, exact: true, merges: true},
		{name: "utf8mb4_nopad_bin", def: "VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin", values: utf8mb4, exact: true, only: sandbox.MariaDB},
		{name: "char utf8mb4_nopad_bin", def: "CHAR(12) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin", values: utf8mb4, exact: true, merges: true, only: sandbox.MariaDB},
		// MySQL's NO PAD binary collation: VARCHAR by bytes; CHAR, which MySQL
		// compares without trailing spaces, is left to the server.
		{name: "utf8mb4_0900_bin", def: "VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin", values: utf8mb4, exact: true, only: sandbox.MySQL},
		{name: "char utf8mb4_0900_bin", def: "CHAR(12) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin", values: utf8mb4, merges: true, only: sandbox.MySQL},
		{name: "utf8mb3_bin", def: "VARCHAR(20) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin", values: utf8mb3, exact: true, merges: true},
		{name: "latin1_bin", def: "VARCHAR(20) CHARACTER SET latin1 COLLATE latin1_bin", values: latin1, exact: true, merges: true},
		{name: "latin1_nopad_bin", def: "VARCHAR(20) CHARACTER SET latin1 COLLATE latin1_nopad_bin", values: latin1, exact: true, only: sandbox.MariaDB},
		{name: "ascii_bin", def: "VARCHAR(20) CHARACTER SET ascii COLLATE ascii_bin", values: ascii, exact: true, merges: true},
		{name: "utf8mb4_bin prefix", def: "VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin", prefix: 3, values: utf8mb4, exact: true, merges: true},
		// A unique key on a whole TEXT or BLOB: MariaDB's long unique keys.
		{name: "text utf8mb4_bin", def: "TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin", values: utf8mb4, exact: true, merges: true, only: sandbox.MariaDB},
		{name: "text latin1_bin prefix", def: "TEXT CHARACTER SET latin1 COLLATE latin1_bin", prefix: 2, values: latin1, exact: true, merges: true},
		{name: "binary", def: "BINARY(12)", values: binary, exact: true, merges: true},
		{name: "varbinary", def: "VARBINARY(20)", values: binary, exact: true},
		{name: "blob prefix", def: "BLOB", prefix: 3, values: binary, exact: true, merges: true},
		{name: "blob", def: "BLOB", values: binary, exact: true, only: sandbox.MariaDB},
		// Numbers and bits, hashed as read back.
		{name: "decimal", def: "DECIMAL(10,2)", literals: []string{"0", "-0", "0.00", "-0.00", "-0.001", "0.001", "1.5", "1.50", "-1.5",
			"0.01", "-0.01", "99999999.99", "-99999999.99", "1", "001.5", "12345.678"}, exact: true},
		{name: "double", def: "DOUBLE", literals: []string{"0", "-0e0", "-0.0", "1e-300", "-1e-300", "5e-324", "-5e-324", "0.1", "0.10",
			"1.7976931348623157e308", "-1.7976931348623157e308", "3", "3e0", "30e-1"}, exact: true,
			merges: flavor == sandbox.MySQL}, // MySQL stores -0 and reads it back as "-0"
		{name: "bit", def: "BIT(16)", literals: []string{"0", "b'0'", "b'1'", "1", "0x0001", "0x0100", "256", "65535", "b'1111111111111111'"},
			exact: true},
		{name: "int", def: "INT", literals: []string{"0", "-0", "+0", "1", "001", "-1", "2147483647", "-2147483648"}, exact: true},
	}
	for i, c := range cases {
		if c.only != "" && c.only != flavor {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			checkCollisions(t, db, i, c)
		})
	}
}

func checkCollisions(t *testing.T, db *sql.DB, n int, c collideCase) {
	data, uniq := fmt.Sprintf("v%d", n), fmt.Sprintf("u%d", n)
	keyPart, compared := "v", "%[1]s.v"
	if c.prefix > 0 {
		keyPart, compared = fmt.Sprintf("v(%d)", c.prefix), fmt.Sprintf("LEFT(%%[1]s.v, %d)", c.prefix)
	}
	var rows []string
	literals := c.literals
	for _, v := range c.values {
		literals = append(literals, sandboxtest.HexLiteral(v))
	}
	for id, lit := range literals {
		rows = append(rows, fmt.Sprintf("(%d, %s)", id, lit))
	}
	sandboxtest.Exec(t, db,
		fmt.Sprintf("CREATE TABLE %s (id INT PRIMARY KEY, v %s NOT NULL)", data, c.def),
		fmt.Sprintf("CREATE TABLE %s (id INT PRIMARY KEY, v %s NOT NULL, UNIQUE KEY uv (%s))", uniq, c.def, keyPart),
		fmt.Sprintf("INSERT INTO %s VALUES %s", data, strings.Join(rows, ", ")))

	// The server's equality: class[id] is the first id of id's value.
	class := make([]int, len(literals))
	for i := range class {
		class[i] = i
	}
	pairs, err := db.Query(fmt.Sprintf("SELECT a.id, MIN(b.id) FROM %[1]s a JOIN %[1]s b ON %[2]s = %[3]s GROUP BY a.id",
		data, fmt.Sprintf(compared, "a"), fmt.Sprintf(compared, "b")))
	require.NoError(t, err)
	for pairs.Next() {
		var a, b int
		require.NoError(t, pairs.Scan(&a, &b))
		class[a] = b
	}
	require.NoError(t, pairs.Close())
	// The unique key agrees: it lets in exactly the first id of each value.
	sandboxtest.Exec(t, db, fmt.Sprintf("INSERT IGNORE INTO %s SELECT id, v FROM %s ORDER BY id", uniq, data))
	var admitted []int
	require.NoError(t, scanAll(db, fmt.Sprintf("SELECT id FROM %s ORDER BY id", uniq), func(r *sql.Rows) error {
		var id int
		err := r.Scan(&id)
		admitted = append(admitted, id)
		return err
	}))
	var firsts []int
	for id, first := range class {
		if id == first {
			firsts = append(firsts, id)
		}
	}
	require.Equal(t, firsts, admitted, "the self-join and the unique key disagree on what is equal")

	// The values as the server stores them.
	stored := make([][]byte, len(literals))
	require.NoError(t, scanAll(db, "SELECT id, v FROM "+data, func(r *sql.Rows) error {
		var id int
		var v []byte
		if err := r.Scan(&id, &v); err != nil {
			return err
		}
		stored[id] = v
		return nil
	}))

	tbl, err := Load(t.Context(), db, "d", uniq, streamed(uniq, "id", "v"))
	require.NoError(t, err)
	require.Equal(t, !c.exact, len(tbl.Coarse()) == 1, "coarse: %q", tbl.Coarse())
	hash := func(v []byte) uint64 {
		h := tbl.Append(nil, [][]byte{[]byte("1"), v})
		require.Len(t, h, 2)
		return h[1]
	}
	hashes := make([]uint64, len(literals))
	for id := range literals {
		hashes[id] = hash(stored[id])
		if id >= len(c.literals) {
			require.Equal(t, hashes[id], hash(c.values[id-len(c.literals)]),
				"%x inserted and %x stored hash apart", c.values[id-len(c.literals)], stored[id])
		}
	}
	// given is a value as the test gave it: a string as inserted, a number
	// as stored.
	given := func(id int) []byte {
		if id < len(c.literals) {
			return stored[id]
		}
		return c.values[id-len(c.literals)]
	}
	merged := 0
	classOfHash := map[uint64]int{}
	for id, first := range class {
		require.Equal(t, hashes[first], hashes[id], "server: %x = %x, hashes differ", stored[first], stored[id])
		if !bytes.Equal(given(first), given(id)) {
			merged++
		}
		other, seen := classOfHash[hashes[id]]
		if !seen {
			classOfHash[hashes[id]] = first
		} else if c.exact {
			require.Equal(t, other, first, "server: %x != %x, hashes equal", stored[other], stored[id])
		}
	}
	t.Logf("%d values, %d distinct on the server, %d equal to an earlier one given with other bytes; %d distinct hashes",
		len(literals), len(firsts), merged, len(classOfHash))
	require.Equal(t, c.merges, merged > 0, "values equal on the server with different bytes")
	require.Greater(t, len(firsts), 1)
}

func scanAll(db *sql.DB, query string, scan func(*sql.Rows) error) error {
	rows, err := db.Query(query)
	if err != nil {
		return err
	}
	for rows.Next() {
		if err := scan(rows); err != nil {
			rows.Close()
			return err
		}
	}
	return rows.Close()
}

// textValues makes test values: fixed ones and random strings of up to six pool
// characters, each also upper- and lower-cased and with trailing blanks, all
// short enough for CHAR(12).
func textValues(r *rand.Rand, fixed, pool []string, upper, lower func(string) string) [][]byte {
	bases := append([]string(nil), fixed...)
	for range 60 {
		var b strings.Builder
		for range r.IntN(7) {
			b.WriteString(pool[r.IntN(len(pool))])
		}
		bases = append(bases, b.String())
	}
	var out [][]byte
	seen := map[string]bool{}
	for _, base := range bases {
		for _, v := range []string{base, upper(base), lower(base), base + " ", base + "  ", upper(base) + " ", base + "\t", base + "\x00"} {
			if !seen[v] {
				seen[v] = true
				out = append(out, []byte(v))
			}
		}
	}
	return out
}

// utf8Fixed are strings that tell collations apart: case, accents, composed and
// decomposed forms, expansions, ignorables, blanks and characters beyond the BMP.
var utf8Fixed = []string{"", " ", "a", "A", "ab", "aB", "é", "É", "e\u0301", "E\u0301", "ê", "ß", "ss", "SS", "ẞ", "æ", "ae", "Æ",
	"ı", "I", "i", "İ", "ǅ", "ǆ", "Ǆ", "σ", "ς", "Σ", "ﬁ", "fi", "Å", "\u212b", "Ａ", "ａ", "\u00a0", "\t", "\x00", "😀", "😁",
	"\ufffd", "\u200b", "中", "\U00010000", "\U0010ffff", "-", "_", "a-b", "ab-"}

// utf8Pool are the characters of random UTF-8 strings.
var utf8Pool = []string{"a", "b", "A", "B", "e", "E", "é", "É", "è", "\u0301", "\u0308", " ", "ß", "s", "S", "æ", "ø", "Ø",
	"å", "Å", "ı", "İ", "i", "I", "Σ", "σ", "ς", "Ж", "ж", "ﬁ", "Ａ", "\u00a0", "\t", "中", "😀", "\U0001F3FB", "\u200b", "-", "0"}

// bmpOnly drops the strings with characters beyond the BMP, for utf8mb3.
func bmpOnly(values []string) []string {
	var out []string
	for _, v := range values {
		if !strings.ContainsFunc(v, func(r rune) bool { return r > 0xffff }) {
			out = append(out, v)
		}
	}
	return out
}

// latin1Fixed and latin1Pool are latin1 bytes: accents in both cases, ß, bytes
// undefined in latin1, and the extremes.
var (
	latin1Fixed = []string{"", " ", "a", "A", "\xe9", "\xc9", "e", "\xdf", "ss", "\xe6", "ae", "\xc6", "\xc5", "\xe5", "\xa0",
		"\x80", "\x81", "\x8d", "\x9f", "\xff", "\xd7", "\xf7", "\xfc", "\xdc", "u", "y", "\xfd", "\t", "\x00"}
	latin1Pool = []string{"a", "b", "A", "B", "e", "E", " ", "\t", "\xe9", "\xc9", "\xdf", "s", "S", "\xe6", "\xc6", "\xc5",
		"\xe5", "\xd7", "\xf7", "\x80", "\x81", "\x8d", "\x9f", "\xa0", "\xff", "\xfe", "\xde", "y", "\xfd", "\xdd", "\xfc", "\xdc"}
)

// latin1Upper and latin1Lower change the case of latin1 letters, byte by byte
// (strings.ToUpper would turn a byte that is not UTF-8 into U+FFFD).
func latin1Upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' || c >= 0xe0 && c <= 0xfe && c != 0xf7 {
			b[i] = c - 0x20
		}
	}
	return string(b)
}

func latin1Lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' || c >= 0xc0 && c <= 0xde && c != 0xd7 {
			b[i] = c + 0x20
		}
	}
	return string(b)
}

// asciiOnly keeps the strings of bytes below 0x80.
func asciiOnly(values []string) []string {
	var out []string
	for _, v := range values {
		if !strings.ContainsFunc(v, func(r rune) bool { return r >= 0x80 }) {
			out = append(out, v)
		}
	}
	return out
}

// binaryFixed and binaryPool are bytes for binary strings: zero bytes, blanks,
// letters, the extremes.
var (
	binaryFixed = []string{"", "\x00", "\x00\x00", "\x01", "\x00\x01", " ", "a", "a\x00", "A", "\x7f", "\x80", "\xff", "\xff\xff"}
	binaryPool  = []string{"\x00", "\x01", " ", "a", "A", "\t", "\x7f", "\x80", "\xff"}
)
