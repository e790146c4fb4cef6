package applier

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/applier/writeset"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// kv is a row of the model's table: an integer key and a value.
func kv(k, v int) *rowliftv1.Row {
	return row([]byte(strconv.Itoa(k)), []byte(strconv.Itoa(v)))
}

// kvOf decodes kv.
func kvOf(t *testing.T, r *rowliftv1.Row) (k, v int) {
	vals, err := rowcodec.Values(nil, r)
	require.NoError(t, err)
	k, err = strconv.Atoi(string(vals[0]))
	require.NoError(t, err)
	v, err = strconv.Atoi(string(vals[1]))
	require.NoError(t, err)
	return k, v
}

// randomGroup is a group of row changes a source could log against rows:
// inserts of free keys, updates (some moving a row to a free key) and deletes.
func randomGroup(rng *rand.Rand, rows map[int]int, n int) []*rowliftv1.RowChange {
	src := maps.Clone(rows)
	var changes []*rowliftv1.RowChange
	free := func() int {
		for {
			if k := rng.IntN(12); !hasKey(src, k) {
				return k
			}
		}
	}
	for range n {
		var held []int
		for k := range src {
			held = append(held, k)
		}
		op := rng.IntN(3)
		if len(held) == 0 {
			op = 0
		}
		switch op {
		case 0:
			if len(src) == 12 {
				continue
			}
			k, v := free(), rng.IntN(100)
			changes = append(changes, &rowliftv1.RowChange{After: kv(k, v)})
			src[k] = v
		case 1:
			k := held[rng.IntN(len(held))]
			nk, v := k, rng.IntN(100)
			if rng.IntN(4) == 0 && len(src) < 12 {
				nk = free()
			}
			changes = append(changes, &rowliftv1.RowChange{Before: kv(k, src[k]), After: kv(nk, v)})
			delete(src, k)
			src[nk] = v
		case 2:
			k := held[rng.IntN(len(held))]
			changes = append(changes, &rowliftv1.RowChange{Before: kv(k, src[k])})
			delete(src, k)
		}
	}
	return changes
}

func hasKey(m map[int]int, k int) bool { _, ok := m[k]; return ok }

// applyPlain applies changes one by one, as the plain statements do: an
// insert needs its key free, an update or delete its key held.
func applyPlain(t *testing.T, rows map[int]int, changes []*rowliftv1.RowChange) map[int]int {
	out := maps.Clone(rows)
	for _, ch := range changes {
		if ch.GetBefore() != nil {
			k, _ := kvOf(t, ch.GetBefore())
			require.True(t, hasKey(out, k))
			delete(out, k)
		}
		if ch.GetAfter() != nil {
			k, v := kvOf(t, ch.GetAfter())
			require.False(t, hasKey(out, k))
			out[k] = v
		}
	}
	return out
}

// applyNet applies a coalesced group as its statements do: one DELETE of
// every pre row, whose count must match, then one INSERT of every final row,
// which fails on a held key. ok is false where the statements would fail.
func applyNet(t *testing.T, rows map[int]int, net []netRow) (out map[int]int, ok bool) {
	out = maps.Clone(rows)
	found := 0
	for _, r := range net {
		if r.pre != nil {
			k, _ := kvOf(t, r.pre)
			if hasKey(out, k) {
				found++
				delete(out, k)
			}
		}
	}
	for _, r := range net {
		if r.pre != nil {
			if found != countPre(net) {
				return nil, false
			}
			break
		}
	}
	for _, r := range net {
		if r.final != nil {
			k, v := kvOf(t, r.final)
			if hasKey(out, k) {
				return nil, false
			}
			out[k] = v
		}
	}
	return out, true
}

func countPre(net []netRow) int {
	n := 0
	for _, r := range net {
		if r.pre != nil {
			n++
		}
	}
	return n
}

func modelKey(r *rowliftv1.Row) (string, error) {
	vals, err := rowcodec.Values(nil, r)
	if err != nil {
		return "", err
	}
	return string(vals[0]), nil
}

// TestNetRowsEndWhereThePlainChangesDo: on random groups of inserts, updates,
// key moves and deletes, the coalesced DELETE and INSERT end where the plain
// statements do; and a target that lacks a row the group changes, or holds
// one the group inserts, fails the coalesced statements as it fails the
// plain ones (divergence is never hidden).
func TestNetRowsEndWhereThePlainChangesDo(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	for range 5000 {
		rows := map[int]int{}
		for k := range 12 {
			if rng.IntN(2) == 0 {
				rows[k] = rng.IntN(100)
			}
		}
		changes := randomGroup(rng, rows, 1+rng.IntN(10))
		net, err := netRows(changes, modelKey)
		require.NoError(t, err)
		want := applyPlain(t, rows, changes)
		got, ok := applyNet(t, rows, net)
		require.True(t, ok)
		require.Equal(t, want, got, "changes %v", changes)

		// A diverged target: a row the group needs is gone, or one it inserts
		// is there already.
		for _, r := range net {
			k := 0
			diverged := maps.Clone(rows)
			switch {
			case r.pre != nil:
				k, _ = kvOf(t, r.pre)
				delete(diverged, k)
			case r.final != nil:
				k, _ = kvOf(t, r.final)
				diverged[k] = -1
			default:
				continue
			}
			_, ok := applyNet(t, diverged, net)
			require.False(t, ok, "key %d diverged, changes %v", k, changes)
		}
	}
}

// TestNetRowsRefuseIncoherentChanges: changes that do not follow from each
// other are left to the plain statements, which say what diverged.
func TestNetRowsRefuseIncoherentChanges(t *testing.T) {
	for _, changes := range [][]*rowliftv1.RowChange{
		{{After: kv(1, 1)}, {After: kv(1, 2)}},
		{{Before: kv(1, 1)}, {Before: kv(1, 1), After: kv(1, 2)}},
		{{Before: kv(1, 1), After: kv(2, 1)}, {Before: kv(1, 1)}},
	} {
		_, err := netRows(changes, modelKey)
		require.ErrorIs(t, err, errIncoherent, "%v", changes)
	}
}

// TestCoalescedReplayOnTarget applies coalesced groups on real servers: JSON
// documents, a key move, a swap of unique key values that only works in the
// source's order when written one change at a time, a DELETE that finds fewer
// rows than the group changed (errNotAsCoalesced, which sends the replayer to
// the plain statements), and tables that are not coalesced: one with a
// trigger, one with a column the stream does not carry.
func TestCoalescedReplayOnTarget(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		db := targetServer(t, flavor)
		ctx := context.Background()
		uniq := &rowliftv1.TableFields{
			Table: "u",
			Fields: []*rowliftv1.Field{
				{Name: "id", DataType: "int", ColumnType: "int"},
				{Name: "code", DataType: "varchar", ColumnType: "varchar(8)", Charset: "utf8mb4", Collation: "utf8mb4_bin", Nullable: true},
			},
			PkColumns:   []int32{0},
			CreateTable: []byte("CREATE TABLE `u` (id INT PRIMARY KEY, code VARCHAR(8) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, UNIQUE KEY (code))"),
		}
		// A key of one string column under a case-insensitive collation, and
		// a key of two columns.
		str := &rowliftv1.TableFields{
			Table: "s",
			Fields: []*rowliftv1.Field{
				{Name: "name", DataType: "varchar", ColumnType: "varchar(16)", Charset: "utf8mb4", Collation: "utf8mb4_general_ci"},
				{Name: "v", DataType: "int", ColumnType: "int", Nullable: true},
			},
			PkColumns:   []int32{0},
			CreateTable: []byte("CREATE TABLE `s` (name VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci PRIMARY KEY, v INT)"),
		}
		pair := &rowliftv1.TableFields{
			Table: "p",
			Fields: []*rowliftv1.Field{
				{Name: "a", DataType: "int", ColumnType: "int"},
				{Name: "b", DataType: "varchar", ColumnType: "varchar(8)", Charset: "utf8mb4", Collation: "utf8mb4_bin"},
				{Name: "v", DataType: "int", ColumnType: "int", Nullable: true},
			},
			PkColumns:   []int32{0, 1},
			CreateTable: []byte("CREATE TABLE `p` (a INT, b VARCHAR(8) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, v INT, PRIMARY KEY (a, b))"),
		}
		spec := &rowliftv1.WorkflowSpec{SourceDatabase: "d", Tables: []*rowliftv1.TableSpec{{Name: "r"}, {Name: "u"}, {Name: "s"}, {Name: "p"}}}
		tables, err := prepareTargets(ctx, db, spec, []*rowliftv1.TableFields{docFields("r"), uniq, str, pair}, nil, 1<<20, nil)
		require.NoError(t, err)
		keys := map[string]*writeset.Table{}
		for name, tbl := range tables {
			k, err := writeset.Load(ctx, db, tbl.database, tbl.table, tbl.fields)
			require.NoError(t, err)
			require.True(t, k.Whole())
			keys[name] = k
		}
		w := &rowWriter{p: &player{db: db, tables: tables}, keys: keys}
		run := func(txs ...*rowliftv1.Transaction) (bool, error) {
			t.Helper()
			w.reset()
			ok, err := w.addCoalesced(txs, 64) // a few rows per statement
			require.NoError(t, err)
			if !ok {
				return false, nil
			}
			conn, err := db.Conn(ctx)
			require.NoError(t, err)
			defer conn.Close()
			if _, err := w.exec(ctx, conn, 1<<20, nil); err != nil {
				_, rerr := conn.ExecContext(ctx, "ROLLBACK")
				require.NoError(t, rerr)
				return true, err
			}
			_, err = conn.ExecContext(ctx, "COMMIT")
			return true, err
		}
		r := func(id int, doc, note string) *rowliftv1.Row {
			return row([]byte(strconv.Itoa(id)), []byte(doc), []byte(note))
		}
		u := func(id int, code string) *rowliftv1.Row { return row([]byte(strconv.Itoa(id)), []byte(code)) }
		one, two := `{"k": [1, 2]}`, `{"k": "two", "z": {"y": true}}`

		var seed []*rowliftv1.Transaction
		for i := 1; i <= 20; i++ {
			seed = append(seed, change("r", nil, r(i, one, "n")))
		}
		seed = append(seed, change("u", nil, u(1, "a")), change("u", nil, u(2, "b")))
		ok, err := run(seed...)
		require.True(t, ok)
		require.NoError(t, err)

		ok, err = run(
			change("r", r(3, one, "n"), r(3, two, "m")),
			change("r", r(4, one, "n"), nil),
			change("r", nil, r(21, two, "x")),
			change("r", r(5, one, "n"), r(22, one, "moved")),
			change("r", r(21, two, "x"), r(21, one, "y")),
			change("u", u(1, "a"), u(1, "c")), // the swap, through a free value
			change("u", u(2, "b"), u(2, "a")),
			change("u", u(1, "c"), u(1, "b")),
		)
		require.True(t, ok)
		require.NoError(t, err)
		sameJSON(t, db, flavor, "r", 3, two)
		sameJSON(t, db, flavor, "r", 21, one)
		sameJSON(t, db, flavor, "r", 22, one)
		require.Equal(t, 20, count(t, db, "d.r"), "20 - 4 + 21; 5 moved to 22")
		require.Equal(t, 0, count(t, db, "d.r WHERE id IN (4, 5)"))
		require.Equal(t, 1, count(t, db, "d.r WHERE id = 22 AND note = 'moved'"))
		require.Equal(t, 1, count(t, db, "d.u WHERE id = 1 AND code = 'b'"))
		require.Equal(t, 1, count(t, db, "d.u WHERE id = 2 AND code = 'a'"))

		ok, err = run(change("r", r(6, one, "n"), r(6, two, "n")), change("r", r(99, one, "n"), r(99, two, "n")))
		require.True(t, ok)
		require.ErrorIs(t, err, errNotAsCoalesced)
		sameJSON(t, db, flavor, "r", 6, one) // rolled back

		sv := func(name string, v int) *rowliftv1.Row { return row([]byte(name), []byte(strconv.Itoa(v))) }
		pv := func(a int, b string, v int) *rowliftv1.Row {
			return row([]byte(strconv.Itoa(a)), []byte(b), []byte(strconv.Itoa(v)))
		}
		seed = nil
		for i := 1; i <= 12; i++ {
			seed = append(seed, change("s", nil, sv(fmt.Sprintf("Name-%02d", i), 0)), change("p", nil, pv(i, "x", 0)), change("p", nil, pv(i, "Y", 0)))
		}
		ok, err = run(seed...)
		require.True(t, ok)
		require.NoError(t, err)
		var group []*rowliftv1.Transaction
		for i := 1; i <= 10; i++ { // more keys than one statement of 64 bytes takes
			group = append(group, change("s", sv(fmt.Sprintf("Name-%02d", i), 0), sv(fmt.Sprintf("Name-%02d", i), i)),
				change("p", pv(i, "Y", 0), pv(i, "Y", i)))
		}
		group = append(group, change("s", sv("Name-11", 0), nil), change("p", pv(11, "x", 0), nil))
		ok, err = run(group...)
		require.True(t, ok)
		require.NoError(t, err)
		require.Contains(t, string(w.sql), "DELETE FROM `d`.`s` WHERE `name` IN (", "a key of one column: an IN list")
		require.Contains(t, string(w.sql), "DELETE FROM `d`.`p` WHERE (`a` = 1 AND `b` = ", "a key of two columns: an OR of conditions")
		require.Equal(t, 11, count(t, db, "d.s"))
		require.Equal(t, 10, count(t, db, "d.s WHERE v = CAST(SUBSTRING(name, 6) AS SIGNED)"), "every update landed on its own key")
		require.Equal(t, 23, count(t, db, "d.p"))
		require.Equal(t, 10, count(t, db, "d.p WHERE b = 'Y' AND v = a"))
		require.Equal(t, 0, count(t, db, "d.p WHERE a = 11 AND b = 'x'"))
		// A key the target lacks: the DELETE finds fewer rows than it names.
		ok, err = run(change("s", sv("Name-12", 0), sv("Name-12", 5)), change("s", sv("Name-99", 0), nil))
		require.True(t, ok)
		require.ErrorIs(t, err, errNotAsCoalesced)
		require.Equal(t, 1, count(t, db, "d.s WHERE name = 'Name-12' AND v = 0"), "rolled back")
		ok, err = run(change("p", pv(12, "y", 0), nil))
		require.True(t, ok)
		require.ErrorIs(t, err, errNotAsCoalesced, "b is a binary string: y is not Y")

		// A replay group's progress write rides at the end of its last query,
		// however many queries its statements take, and exec returns the
		// rows it changed.
		w.reset()
		ok, err = w.addCoalesced([]*rowliftv1.Transaction{change("s", sv("Name-12", 0), sv("Name-12", 7))}, 64)
		require.True(t, ok)
		require.NoError(t, err)
		conn, err := db.Conn(ctx)
		require.NoError(t, err)
		tail := []byte("INSERT INTO d.s (name, v) VALUES ('tail-1', 1), ('tail-2', 2)")
		n, err := w.exec(ctx, conn, len(tail)+40, tail) // one statement per query
		require.NoError(t, err)
		require.EqualValues(t, 2, n)
		_, err = conn.ExecContext(ctx, "COMMIT")
		require.NoError(t, err)
		require.NoError(t, conn.Close())
		require.Equal(t, 1, count(t, db, "d.s WHERE name = 'Name-12' AND v = 7"))
		require.Equal(t, 2, count(t, db, "d.s WHERE name LIKE 'tail-%'"))

		// A trigger makes the table a barrier, a column the stream does not
		// carry makes it not whole: their groups are written plainly.
		sandboxtest.Exec(t, db, "CREATE TRIGGER d.r_t BEFORE UPDATE ON d.r FOR EACH ROW SET @x = 1")
		k, err := writeset.Load(ctx, db, "d", "r", tables["r"].fields)
		require.NoError(t, err)
		w.keys["r"] = k
		ok, err = run(change("r", r(7, one, "n"), r(7, two, "n")))
		require.False(t, ok)
		require.NoError(t, err)
		sandboxtest.Exec(t, db, "ALTER TABLE d.u ADD COLUMN extra INT NOT NULL DEFAULT 7")
		k, err = writeset.Load(ctx, db, "d", "u", tables["u"].fields)
		require.NoError(t, err)
		require.False(t, k.Whole())
		w.keys["u"] = k
		ok, err = run(change("u", u(1, "b"), u(1, "z")))
		require.False(t, ok)
		require.NoError(t, err)
	})
}

// count is SELECT COUNT(*) FROM what.
func count(t *testing.T, db *sql.DB, what string) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM "+what).Scan(&n))
	return n
}
