package writeset

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/schema"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// server starts a sandbox server of the flavor with database d and runs
// stmts in it.
func server(t *testing.T, flavor sandbox.Flavor, stmts ...string) *sql.DB {
	db := sandboxtest.Open(t, sandboxtest.Start(t, sandbox.Options{Flavor: flavor}), "")
	sandboxtest.Exec(t, db, append([]string{"CREATE DATABASE d"}, stmts...)...)
	return db
}

// streamed names the streamed columns of a table.
func streamed(table string, names ...string) *rowliftv1.TableFields {
	tf := &rowliftv1.TableFields{Table: table}
	for _, n := range names {
		tf.Fields = append(tf.Fields, &rowliftv1.Field{Name: n})
	}
	return tf
}

// keyShape is what a test checks of a loaded key: its name and, per part, the
// streamed position, form and prefix.
type keyShape struct {
	name  string
	parts []part
}

func shapes(tbl *Table) []keyShape {
	var out []keyShape
	for _, k := range tbl.keys {
		out = append(out, keyShape{k.name, k.parts})
	}
	return out
}

func TestLoadFindsUniqueKeysInOrder(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		// MySQL names its NO PAD binary collation otherwise, and has no unique
		// key on a whole TEXT: there d_long is a long prefix.
		body, long, longPrefix := "utf8mb4_nopad_bin", "body", 0
		if flavor == sandbox.MySQL {
			body, long, longPrefix = "utf8mb4_0900_bin", "body(700)", 700
		}
		db := server(t, flavor, `CREATE TABLE d.t (
			id BIGINT NOT NULL,
			region VARCHAR(8) CHARACTER SET latin1 COLLATE latin1_bin NOT NULL,
			email VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci,
			code INT, tag BINARY(4), note VARCHAR(10), body TEXT CHARACTER SET utf8mb4 COLLATE `+body+`,
			bits BIT(12), price DECIMAL(8,2),
			KEY plain (note), KEY plain_multi (code, note),
			UNIQUE KEY b_email (email),
			UNIQUE KEY a_tag_code (tag, code),
			UNIQUE KEY c_body (body(5)),
			UNIQUE KEY d_long (`+long+`),
			UNIQUE KEY e_misc (bits, price),
			PRIMARY KEY (region, id))`)
		// Streamed in another order than the table's, with a different case.
		fields := streamed("t", "NOTE", "code", "id", "email", "body", "tag", "Region", "price", "bits")
		tbl, err := Load(context.Background(), db, "d", fields.GetTable(), fields)
		require.NoError(t, err)
		barrier, why := tbl.Barrier()
		require.False(t, barrier, why)
		require.Equal(t, len(fields.Fields), tbl.width)
		require.Equal(t, []keyShape{
			{"PRIMARY", []part{{pos: 6, form: spacePadded}, {pos: 2, form: asIs}}},
			{"a_tag_code", []part{{pos: 5, form: zeroPadded}, {pos: 1, form: asIs}}},
			{"b_email", []part{{pos: 3, form: leftOut, utf8: true}}},
			{"c_body", []part{{pos: 4, form: asIs, prefix: 5, utf8: true}}},
			{"d_long", []part{{pos: 4, form: asIs, prefix: longPrefix, utf8: true}}},
			{"e_misc", []part{{pos: 8, form: bits}, {pos: 7, form: number}}},
		}, shapes(tbl), "PRIMARY first, then by name; parts in key order; non-unique keys skipped")
		require.Equal(t, []string{"b_email (email: collation utf8mb4_general_ci; every change collides)"}, tbl.Coarse())

		// A PAD SPACE primary key, a table with only a NOT NULL unique key.
		sandboxtest.Exec(t, db, "CREATE TABLE d.u (k VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, v INT, UNIQUE KEY k (k))")
		tbl, err = Load(context.Background(), db, "d", "u", streamed("u", "k", "v"))
		require.NoError(t, err)
		require.Equal(t, []keyShape{{"k", []part{{pos: 0, form: spacePadded, utf8: true}}}}, shapes(tbl))
		barrier, _ = tbl.Barrier()
		require.False(t, barrier)
		require.Empty(t, tbl.Coarse())
	})
}

func TestLoadBarriers(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		db := server(t, flavor,
			"CREATE TABLE d.parent (id INT PRIMARY KEY)",
			"CREATE TABLE d.child (id INT PRIMARY KEY, pid INT, CONSTRAINT fk_parent FOREIGN KEY (pid) REFERENCES d.parent (id))",
			"CREATE TABLE d.tree (id INT PRIMARY KEY, up INT, CONSTRAINT fk_up FOREIGN KEY (up) REFERENCES d.tree (id))",
			"CREATE DATABASE other",
			"CREATE TABLE other.far (id INT PRIMARY KEY, pid INT, CONSTRAINT fk_far FOREIGN KEY (pid) REFERENCES d.parent (id))",
			"CREATE TABLE d.hidden (id INT PRIMARY KEY, a INT, extra INT, UNIQUE KEY u_extra (a, extra))",
			"CREATE TABLE d.gen (id INT PRIMARY KEY, name VARCHAR(10), lname VARCHAR(10) AS (LOWER(name)) VIRTUAL, UNIQUE KEY u_lname (lname))",
			"CREATE TABLE d.trig (id INT PRIMARY KEY, n INT)",
			"CREATE TABLE d.log (n INT)",
			"CREATE TRIGGER d.trig_ai AFTER INSERT ON d.trig FOR EACH ROW INSERT INTO d.log VALUES (NEW.n)",
			"CREATE TABLE d.nullable (a INT NULL, UNIQUE KEY a (a))",
			"CREATE TABLE d.plain (id INT PRIMARY KEY, n INT)",
		)
		ctx := context.Background()
		cases := []struct {
			fields *rowliftv1.TableFields
			want   string
		}{
			{streamed("parent", "id"), "foreign key fk_parent of d.child references it; foreign key fk_far of other.far references it"},
			{streamed("child", "id", "pid"), "it has foreign key fk_parent to d.parent"},
			{streamed("tree", "id", "up"), "it has foreign key fk_up to d.tree"},
			{streamed("hidden", "id", "a"), "unique key u_extra has column extra, which is not streamed"},
			{streamed("gen", "id", "name"), "unique key u_lname has column lname, which is not streamed"},
			{streamed("trig", "id", "n"), "it has trigger trig_ai"},
			{streamed("nullable", "a"), "it has no primary key and no unique key on NOT NULL columns to tell its rows apart"},
			{streamed("plain", "id", "n"), ""},
		}
		if flavor == sandbox.MySQL {
			// A functional key part: information_schema gives it no column.
			sandboxtest.Exec(t, db, "CREATE TABLE d.fn (id INT PRIMARY KEY, name VARCHAR(10), UNIQUE KEY fx ((LOWER(name))))")
			cases = append(cases, struct {
				fields *rowliftv1.TableFields
				want   string
			}{streamed("fn", "id", "name"), "unique key fx has the expression part lower(`name`), which the applier cannot hash"})
		}
		for _, c := range cases {
			tbl, err := Load(ctx, db, "d", c.fields.GetTable(), c.fields)
			require.NoError(t, err, c.fields.Table)
			barrier, why := tbl.Barrier()
			require.Equal(t, c.want != "", barrier, c.fields.Table)
			require.Equal(t, c.want, why, c.fields.Table)
		}

		_, err := Load(ctx, db, "d", "ghost", streamed("ghost", "id"))
		require.ErrorIs(t, err, schema.ErrNoTable)
	})
}

// TestLoadWithoutOverlaps runs on MariaDB only: MySQL has no application-time
// periods.
func TestLoadWithoutOverlaps(t *testing.T) {
	db := server(t, sandbox.MariaDB, "CREATE TABLE d.booking (room INT NOT NULL, s DATE NOT NULL, e DATE NOT NULL, guest VARCHAR(20), "+
		"PERIOD FOR stay (s, e), PRIMARY KEY (room, stay WITHOUT OVERLAPS), UNIQUE KEY `g``uest` (guest, stay WITHOUT OVERLAPS))")
	tbl, err := Load(context.Background(), db, "d", "booking", streamed("booking", "room", "s", "e", "guest"))
	require.NoError(t, err)
	require.Equal(t, []string{
		"PRIMARY (e: period compared by overlap; s: period compared by overlap)",
		"g`uest (guest: collation latin1_swedish_ci; e: period compared by overlap; s: period compared by overlap; every change collides)",
	}, tbl.Coarse())
	// Overlapping stays of a room collide, as the server's key says.
	sandboxtest.Exec(t, db, "INSERT INTO d.booking VALUES (1, '2024-01-01', '2024-01-10', NULL)")
	_, err = db.Exec("INSERT INTO d.booking VALUES (1, '2024-01-05', '2024-01-20', NULL)")
	require.ErrorContains(t, err, "Duplicate entry")
	require.Equal(t, tbl.Append(nil, vals("1", "2024-01-01", "2024-01-10", "NULL")),
		tbl.Append(nil, vals("1", "2024-01-05", "2024-01-20", "NULL")))
}
