package writeset

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/schema"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// These tests build Tables from metadata written here, with no server; the
// tests in load_test.go and collide_test.go read it from a real one.

// def declares a test table: its columns, streamed in this order, and its
// unique keys.
type def struct {
	name    string
	columns []schema.Column
	indexes []index
	links   []string
}

// col is a NOT NULL column; a trailing "?" in name makes it nullable. A string
// column's character set is its collation's first word.
func col(name, dataType, collation string) schema.Column {
	c := schema.Column{Name: name, DataType: dataType, Collation: collation}
	if name[len(name)-1] == '?' {
		c.Name, c.Nullable = name[:len(name)-1], true
	}
	c.Charset, _, _ = strings.Cut(collation, "_")
	return c
}

// ix is a unique key on whole columns.
func ix(name string, columns ...string) index {
	k := index{Key: schema.Key{Name: name}}
	for _, c := range columns {
		k.Parts = append(k.Parts, schema.KeyPart{Column: c})
	}
	return k
}

func (d def) fields() *rowliftv1.TableFields {
	tf := &rowliftv1.TableFields{Table: d.name}
	for _, c := range d.columns {
		tf.Fields = append(tf.Fields, &rowliftv1.Field{Name: c.Name, DataType: c.DataType, Charset: c.Charset,
			Collation: c.Collation, Nullable: c.Nullable})
	}
	return tf
}

func (d def) build() *Table {
	return build(d.fields(), &metadata{columns: d.columns, indexes: d.indexes, links: d.links})
}

// vals turns strings into row values; "NULL" is NULL.
func vals(vs ...string) [][]byte {
	out := make([][]byte, len(vs))
	for i, v := range vs {
		if v != "NULL" {
			out[i] = []byte(v)
		}
	}
	return out
}

// users is a typical table: a BIGINT primary key, a unique e-mail address under
// a binary collation, and a nullable unique pair.
var users = def{
	name: "users",
	columns: []schema.Column{col("id", "bigint", ""), col("email", "varchar", "utf8mb4_bin"),
		col("org?", "int", ""), col("handle?", "varbinary", ""), col("note?", "text", "utf8mb4_general_ci")},
	indexes: []index{ix("PRIMARY", "id"), ix("email", "email"), ix("org_handle", "org", "handle")},
}

func TestNullPartsContributeNoHash(t *testing.T) {
	tbl := users.build()
	all := tbl.Append(nil, vals("1", "a@x", "7", "h", "NULL"))
	require.Len(t, all, 3, "primary key, email and (org, handle)")

	for _, row := range [][][]byte{vals("1", "a@x", "NULL", "h", "x"), vals("1", "a@x", "7", "NULL", "x"),
		vals("1", "a@x", "NULL", "NULL", "x")} {
		got := tbl.Append(nil, row)
		require.Equal(t, all[:2], got, "a unique key with a NULL part enforces nothing; the others still hash alike")
	}
	// An empty string is a value, not NULL.
	require.Len(t, tbl.Append(nil, vals("1", "a@x", "7", "", "x")), 3)
	require.NotEqual(t, all[2], tbl.Append(nil, vals("1", "a@x", "7", "", "x"))[2])

	// Append appends.
	dst := tbl.Append([]uint64{42}, vals("1", "a@x", "7", "h", "NULL"))
	require.Equal(t, append([]uint64{42}, all...), dst)
}

func TestIntegerKeysHashApart(t *testing.T) {
	tbl := def{name: "t", columns: []schema.Column{col("id", "bigint", "")}, indexes: []index{ix("PRIMARY", "id")}}.build()
	r := rand.New(rand.NewPCG(1, 2))
	seen := map[uint64]string{}
	add := func(v string) {
		h := tbl.Append(nil, vals(v))
		require.Len(t, h, 1)
		if prev, dup := seen[h[0]]; dup {
			require.Equal(t, prev, v, "distinct integers %s and %s hash alike", prev, v)
		}
		seen[h[0]] = v
	}
	for i := -50000; i <= 50000; i++ {
		add(strconv.Itoa(i))
	}
	for range 100000 {
		add(strconv.FormatInt(r.Int64(), 10))
		add(strconv.FormatUint(r.Uint64(), 10))
	}
	require.Greater(t, len(seen), 300000)
	h1, h2 := tbl.Append(nil, vals("12")), tbl.Append(nil, vals("12"))
	require.Equal(t, h1, h2, "a value hashes the same every time")
}

func TestPartsAreLengthPrefixedAndKeysNamed(t *testing.T) {
	pair := def{name: "t", columns: []schema.Column{col("id", "int", ""), col("a", "varbinary", ""), col("b", "varbinary", "")},
		indexes: []index{ix("PRIMARY", "id"), ix("ab", "a", "b")}}
	tbl := pair.build()
	hash := func(a, b string) uint64 { return tbl.Append(nil, vals("1", a, b))[1] }
	require.NotEqual(t, hash("ab", "c"), hash("a", "bc"))
	require.NotEqual(t, hash("", "abc"), hash("abc", ""))
	require.NotEqual(t, hash("", ""), hash("\x00", ""))
	require.Equal(t, hash("ab", "c"), hash("ab", "c"))

	// The same value in another key or another table is another hash.
	other := pair
	other.name = "u"
	renamed := pair
	renamed.indexes = []index{ix("PRIMARY", "id"), ix("ab2", "a", "b")}
	require.NotEqual(t, hash("x", "y"), other.build().Append(nil, vals("1", "x", "y"))[1])
	require.NotEqual(t, hash("x", "y"), renamed.build().Append(nil, vals("1", "x", "y"))[1])
	require.NotEqual(t, tbl.Append(nil, vals("1", "x", "y"))[0], other.build().Append(nil, vals("1", "x", "y"))[0])
	// The table and key names are length-prefixed too.
	require.NotEqual(t, keyID("ab", "c"), keyID("a", "bc"))
}

func TestCanonicalForms(t *testing.T) {
	cases := []struct {
		column schema.Column
		prefix int
		equal  [][2]string
		differ [][2]string
	}{
		{col("v", "decimal", ""), 0, [][2]string{{"-0.00", "0.00"}, {"-0", "0"}},
			[][2]string{{"-1.00", "1.00"}, {"-0.01", "0.01"}, {"1.5", "1.50"}}},
		{col("v", "double", ""), 0, [][2]string{{"-0", "0"}, {"-0e0", "0e0"}},
			[][2]string{{"-1e-300", "1e-300"}, {"-5e-324", "5e-324"}, {"1", "2"}}},
		{col("v", "bit", ""), 0, [][2]string{{"\x00\x01", "\x01"}, {"\x00", ""}},
			[][2]string{{"\x01\x00", "\x01"}, {"\x01", "\x02"}}},
		{col("v", "binary", ""), 0, [][2]string{{"a\x00\x00", "a"}, {"\x00", ""}},
			[][2]string{{"\x00a", "a"}, {"a ", "a"}}},
		{col("v", "varbinary", ""), 0, nil, [][2]string{{"a\x00", "a"}, {"a ", "a"}, {"A", "a"}}},
		{col("v", "varchar", "utf8mb4_bin"), 0, [][2]string{{"a  ", "a"}, {" ", ""}},
			[][2]string{{"a\t", "a"}, {" a", "a"}, {"A", "a"}, {"a\u00a0", "a"}}},
		{col("v", "char", "utf8mb4_nopad_bin"), 0, [][2]string{{"a ", "a"}}, [][2]string{{"a\t", "a"}}},
		{col("v", "varchar", "utf8mb4_nopad_bin"), 0, nil, [][2]string{{"a ", "a"}, {"a\t", "a"}}},
		{col("v", "varchar", "utf8mb4_bin"), 2, [][2]string{{"éab", "éac"}, {"a b", "a"}, {"😀😀x", "😀😀"}},
			[][2]string{{"éa", "éb"}, {"😀a", "😀b"}}},
		{col("v", "varchar", "latin1_bin"), 2, [][2]string{{"\xe9ab", "\xe9ac"}, {"a\x80b", "a\x80c"}},
			[][2]string{{"\xe9a", "\xe9b"}}},
		{col("v", "blob", ""), 2, [][2]string{{"abc", "abd"}}, [][2]string{{"a ", "a"}}},
		{col("v", "varchar", "utf8mb4_general_ci"), 0, [][2]string{{"a", "A"}, {"a", "xyz"}}, nil},
		{col("v", "json", ""), 0, [][2]string{{"1", "2"}}, nil},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s %s %d", c.column.DataType, c.column.Collation, c.prefix), func(t *testing.T) {
			k := index{Key: schema.Key{Name: "k", Parts: []schema.KeyPart{{Column: "v", Prefix: c.prefix}}}}
			tbl := def{name: "t", columns: []schema.Column{c.column}, indexes: []index{k}}.build()
			hash := func(v string) uint64 { return tbl.Append(nil, vals(v))[0] }
			for _, p := range c.equal {
				require.Equal(t, hash(p[0]), hash(p[1]), "%q and %q", p[0], p[1])
			}
			for _, p := range c.differ {
				require.NotEqual(t, hash(p[0]), hash(p[1]), "%q and %q", p[0], p[1])
			}
		})
	}
}

func TestCoarseKeys(t *testing.T) {
	tbl := def{
		name: "t",
		columns: []schema.Column{col("name", "varchar", "utf8mb4_general_ci"), col("org", "int", ""),
			col("title", "varchar", "latin1_swedish_ci"), col("code", "varchar", "ascii_bin"), col("geo", "point", "")},
		indexes: []index{ix("PRIMARY", "name"), ix("org_title", "org", "title"), ix("code", "code"), ix("geo", "geo")},
	}.build()
	require.Equal(t, []string{
		"PRIMARY (name: collation utf8mb4_general_ci; every change collides)",
		"org_title (title: collation latin1_swedish_ci)",
		"geo (geo: type point; every change collides)",
	}, tbl.Coarse())
	barrier, _ := tbl.Barrier()
	require.False(t, barrier, "a coarse key serializes, it does not need a barrier")

	row := func(name, org, title string) []uint64 { return tbl.Append(nil, vals(name, org, title, "c", "p")) }
	a, b := row("Ann", "1", "Boss"), row("bob", "2", "boss")
	require.Equal(t, a[0], b[0], "every row collides on a key left out entirely")
	require.NotEqual(t, a[1], b[1], "the org part still tells these apart")
	require.Equal(t, a[1], row("x", "1", "anything")[1], "the title part is left out")
	require.Equal(t, a[2], b[2], "same code")
}

func TestWithoutOverlapsLeavesOutThePeriod(t *testing.T) {
	k := ix("u", "id", "e", "s")
	k.withoutOverlaps = true
	tbl := def{name: "t", columns: []schema.Column{col("id", "int", ""), col("s", "date", ""), col("e", "date", "")},
		indexes: []index{k}}.build()
	require.Equal(t, []string{"u (e: period compared by overlap; s: period compared by overlap)"}, tbl.Coarse())
	require.Equal(t, tbl.Append(nil, vals("1", "2020-01-01", "2020-03-01")), tbl.Append(nil, vals("1", "2020-02-01", "2020-04-01")))
	require.NotEqual(t, tbl.Append(nil, vals("1", "2020-01-01", "2020-03-01")), tbl.Append(nil, vals("2", "2020-01-01", "2020-03-01")))
}

func TestBarriers(t *testing.T) {
	cases := []struct {
		def  def
		want string
	}{
		{users, ""},
		{def{name: "t", columns: []schema.Column{col("id", "int", "")}, indexes: []index{ix("PRIMARY", "id")},
			links: []string{"it has trigger trg"}}, "it has trigger trg"},
		{def{name: "t", columns: []schema.Column{col("id", "int", "")}, indexes: []index{ix("PRIMARY", "id"), ix("u", "id", "gone")}},
			"unique key u has column gone, which is not streamed"},
		{def{name: "t", columns: []schema.Column{col("id", "int", "")}, indexes: []index{ix("PRIMARY", "id"),
			{Key: schema.Key{Name: "f", Parts: []schema.KeyPart{{Column: "id"}, {Expression: "lower(`id`)"}}}}}},
			"unique key f has the expression part lower(`id`), which the applier cannot hash"},
		{def{name: "t", columns: []schema.Column{col("id?", "int", "")}, indexes: []index{ix("u", "id")}},
			"it has no primary key and no unique key on NOT NULL columns to tell its rows apart"},
		{def{name: "t", columns: []schema.Column{col("id", "int", "")}, indexes: []index{ix("u", "id"), ix("v", "x")},
			links: []string{"it has foreign key fk to d.p"}},
			"it has foreign key fk to d.p; unique key v has column x, which is not streamed"},
	}
	for _, c := range cases {
		barrier, why := c.def.build().Barrier()
		require.Equal(t, c.want != "", barrier, c.want)
		require.Equal(t, c.want, why)
	}
}

// change makes a RowChange; nil values leave an image out.
func change(before, after [][]byte) *rowliftv1.RowChange {
	c := &rowliftv1.RowChange{}
	if before != nil {
		c.Before = &rowliftv1.Row{}
		rowcodec.Pack(c.Before, before)
	}
	if after != nil {
		c.After = &rowliftv1.Row{}
		rowcodec.Pack(c.After, after)
	}
	return c
}

func tx(events ...*rowliftv1.RowEvent) *rowliftv1.Transaction {
	return &rowliftv1.Transaction{Events: events}
}

func event(table string, changes ...*rowliftv1.RowChange) *rowliftv1.RowEvent {
	return &rowliftv1.RowEvent{Table: table, Changes: changes}
}

func TestTransaction(t *testing.T) {
	u := users.build()
	items := def{name: "items", columns: []schema.Column{col("id", "int", "")}, indexes: []index{ix("PRIMARY", "id")}}.build()
	linked := def{name: "linked", columns: []schema.Column{col("id", "int", "")}, indexes: []index{ix("PRIMARY", "id")},
		links: []string{"foreign key fk of d.x references it"}}.build()
	tables := map[string]*Table{"users": u, "items": items, "linked": linked}
	row := func(id, email string) [][]byte { return vals(id, email, "NULL", "NULL", "NULL") }

	// An update that changes the key names the old and the new row.
	keys, barrier := Transaction(nil, tx(
		event("users", change(row("1", "a@x"), row("2", "a@x")), change(nil, row("3", "c@x"))),
		event("items", change(vals("9"), nil)),
	), tables)
	require.False(t, barrier)
	var want []uint64
	for _, r := range [][][]byte{row("1", "a@x"), row("2", "a@x"), row("3", "c@x")} {
		want = u.Append(want, r)
	}
	want = items.Append(want, vals("9"))
	slices.Sort(want)
	want = slices.Compact(want)
	require.Equal(t, want, keys, "sorted, without duplicates")
	require.Len(t, keys, 6, "three ids, two emails, one item")

	// dst's storage is reused.
	dst := make([]uint64, 0, 16)
	keys, _ = Transaction(dst, tx(event("items", change(vals("9"), nil))), tables)
	require.Equal(t, items.Append(nil, vals("9")), keys)
	require.Same(t, &dst[:1][0], &keys[0])

	empty, barrier := Transaction(nil, tx(), tables)
	require.False(t, barrier)
	require.Empty(t, empty)

	for name, bad := range map[string]*rowliftv1.Transaction{
		"barrier table": tx(event("items", change(vals("1"), nil)), event("linked", change(vals("1"), nil))),
		"unknown table": tx(event("ghost", change(vals("1"), nil))),
		"narrow row":    tx(event("users", change(vals("1"), nil))),
		"bad row":       tx(event("items", &rowliftv1.RowChange{After: &rowliftv1.Row{Lengths: []int64{5}, Values: []byte("1")}})),
	} {
		keys, barrier := Transaction(nil, bad, tables)
		require.True(t, barrier, name)
		require.Empty(t, keys, name)
	}
}

func TestTransactionSizeLimit(t *testing.T) {
	items := def{name: "items", columns: []schema.Column{col("id", "int", "")}, indexes: []index{ix("PRIMARY", "id")}}.build()
	tables := map[string]*Table{"items": items}
	inserts := func(n int) *rowliftv1.Transaction {
		ev := event("items")
		for i := range n {
			ev.Changes = append(ev.Changes, change(nil, vals(strconv.Itoa(i))))
		}
		return tx(ev)
	}
	keys, barrier := Transaction(nil, inserts(MaxKeys), tables)
	require.False(t, barrier)
	require.Len(t, keys, MaxKeys)

	keys, barrier = Transaction(nil, inserts(MaxKeys+1), tables)
	require.True(t, barrier, "one key over the limit")
	require.Empty(t, keys)

	keys, barrier = Transaction(nil, inserts(10*MaxKeys), tables)
	require.True(t, barrier)
	require.Empty(t, keys)

	// Many changes to a few rows are a small writeset.
	ev := event("items")
	for i := range 10 * MaxKeys {
		ev.Changes = append(ev.Changes, change(vals(strconv.Itoa(i%3)), vals(strconv.Itoa(i%3))))
	}
	keys, barrier = Transaction(nil, tx(ev), tables)
	require.False(t, barrier)
	require.Len(t, keys, 3)
}

// BenchmarkAppend hashes one row image of a typical table: a BIGINT primary key
// and a unique e-mail address under utf8mb4_bin, among six columns.
func BenchmarkAppend(b *testing.B) {
	tbl := def{
		name: "users",
		columns: []schema.Column{col("id", "bigint", ""), col("email", "varchar", "utf8mb4_bin"), col("name", "varchar", "utf8mb4_general_ci"),
			col("created", "datetime", ""), col("balance", "decimal", ""), col("bio?", "text", "utf8mb4_general_ci")},
		indexes: []index{ix("PRIMARY", "id"), ix("email", "email")},
	}.build()
	row := vals("1234567890", "someone.with.a.long.name@example.com", "Someone", "2024-05-06 07:08:09", "123.45", "NULL")
	dst := make([]uint64, 0, 8)
	b.ReportAllocs()
	for b.Loop() {
		dst = tbl.Append(dst[:0], row)
	}
	if len(dst) != 2 {
		b.Fatalf("got %d hashes, want 2", len(dst))
	}
}

// BenchmarkTransaction computes the writeset of a transaction that updates ten
// rows of that table.
func BenchmarkTransaction(b *testing.B) {
	tbl := def{
		name:    "users",
		columns: []schema.Column{col("id", "bigint", ""), col("email", "varchar", "utf8mb4_bin"), col("name", "varchar", "utf8mb4_general_ci")},
		indexes: []index{ix("PRIMARY", "id"), ix("email", "email")},
	}.build()
	tables := map[string]*Table{"users": tbl}
	ev := event("users")
	for i := range 10 {
		id, email := strconv.Itoa(1000+i), fmt.Sprintf("user%d@example.com", i)
		ev.Changes = append(ev.Changes, change(vals(id, email, "Old"), vals(id, email, "New")))
	}
	t := tx(ev)
	var keys []uint64
	b.ReportAllocs()
	for b.Loop() {
		keys, _ = Transaction(keys, t, tables)
	}
	if len(keys) != 20 {
		b.Fatalf("got %d keys, want 20", len(keys))
	}
}
