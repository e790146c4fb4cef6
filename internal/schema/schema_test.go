package schema_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/schema"
)

func server(t *testing.T, flavor sandbox.Flavor, stmts ...string) *sql.DB {
	db := sandboxtest.Open(t, sandboxtest.Start(t, sandbox.Options{Flavor: flavor}), "")
	sandboxtest.Exec(t, db, append([]string{"CREATE DATABASE d"}, stmts...)...)
	return db
}

func TestLoadPrefersPrimaryKeyAndSkipsGeneratedColumns(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		db := server(t, flavor, `CREATE TABLE d.t (a INT NOT NULL, b VARCHAR(5) COLLATE latin1_swedish_ci, g INT AS (a * 2) VIRTUAL,
			s INT AS (a + 1) STORED, UNIQUE KEY u (b), PRIMARY KEY (b, a)) CHARSET latin1`)
		tbl, err := schema.Load(context.Background(), db, "d", "t")
		require.NoError(t, err)
		require.Equal(t, "PRIMARY", tbl.KeyName)
		require.Equal(t, []string{"b", "a"}, tbl.Key, "key columns in key order, not table order")
		cols, err := tbl.Streamed(nil)
		require.NoError(t, err)
		require.Len(t, cols, 2, "generated columns are not streamed")
		require.Equal(t, "latin1", cols[1].Charset)
		require.Contains(t, tbl.CreateTable, "CREATE TABLE `t`")
		_, err = tbl.Streamed([]string{"a", "b", "g"})
		require.ErrorIs(t, err, schema.ErrColumn)
		require.ErrorContains(t, err, "column g is generated")
		_, err = tbl.Streamed([]string{"a", "nope"})
		require.ErrorContains(t, err, `has no column "nope"`)
	})
}

func TestLoadFallsBackToNotNullUniqueKey(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		db := server(t, flavor, "CREATE TABLE d.t (x INT NULL, y INT NOT NULL, z INT NOT NULL, UNIQUE KEY a_nullable (x), UNIQUE KEY b_ok (y, z))")
		tbl, err := schema.Load(context.Background(), db, "d", "t")
		require.NoError(t, err)
		require.Equal(t, "b_ok", tbl.KeyName, "a unique key with a nullable column cannot identify rows")
		require.Equal(t, []string{"y", "z"}, tbl.Key)
	})
}

func TestLoadErrors(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		db := server(t, flavor, "CREATE TABLE d.nokey (x INT NULL, UNIQUE KEY (x))", "CREATE TABLE d.enumkey (e ENUM('b','a') PRIMARY KEY)")
		ctx := context.Background()
		_, err := schema.Load(ctx, db, "d", "ghost")
		require.ErrorIs(t, err, schema.ErrNoTable)
		_, err = schema.Load(ctx, db, "d", "nokey")
		require.ErrorIs(t, err, schema.ErrNoKey)
		require.ErrorContains(t, err, "d.nokey has no PRIMARY KEY")
		_, err = schema.Load(ctx, db, "d", "enumkey")
		require.ErrorIs(t, err, schema.ErrNoKey)
		require.ErrorContains(t, err, "sorts by its index but compares as text")
	})
}

// renameAfter renames a table once its first statement ran: a cutover's
// freeze between two of Load's reads.
type renameAfter struct {
	*sql.DB
	t    *testing.T
	stmt string
	done bool
}

func (r *renameAfter) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	rows, err := r.DB.QueryContext(ctx, query, args...)
	if !r.done {
		r.done = true
		sandboxtest.Exec(r.t, r.DB, r.stmt)
	}
	return rows, err
}

// TestLoadOfATableRenamedMeanwhile: a table renamed between Load's reads of
// its columns and of its keys is absent (ErrNoTable, which the streamer
// answers by reading the frozen twin), not keyless (ErrNoKey, which stopped a
// workflow whose applier restarted just as a switch froze the source).
func TestLoadOfATableRenamedMeanwhile(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		db := server(t, flavor, "CREATE TABLE d.t (id INT PRIMARY KEY, v INT)")
		_, err := schema.Load(context.Background(), &renameAfter{DB: db, t: t, stmt: "RENAME TABLE d.t TO d._t_frozen"}, "d", "t")
		require.ErrorIs(t, err, schema.ErrNoTable)
		require.ErrorContains(t, err, "d.t (renamed or dropped while its definition was read)")
	})
}

// TestLoadRejectsCharKeysUnderNoPadOnMariaDB: MariaDB sorts CHAR values padded
// but compares them trimmed under NO PAD collations.
func TestLoadRejectsCharKeysUnderNoPadOnMariaDB(t *testing.T) {
	db := server(t, sandbox.MariaDB, "CREATE TABLE d.nopad (c CHAR(4) COLLATE utf8mb4_nopad_bin PRIMARY KEY)")
	_, err := schema.Load(context.Background(), db, "d", "nopad")
	require.ErrorIs(t, err, schema.ErrNoKey)
	require.ErrorContains(t, err, "CHAR with the NO PAD collation utf8mb4_nopad_bin")
}

// TestLoadSkipsFunctionalKeys: a MySQL functional key part has no column
// (COLUMN_NAME is NULL), so such a unique key cannot identify rows by columns.
func TestLoadSkipsFunctionalKeys(t *testing.T) {
	db := server(t, sandbox.MySQL,
		"CREATE TABLE d.f (id INT NOT NULL, a INT NOT NULL, b INT NOT NULL, UNIQUE KEY a_fn ((a + 1)), UNIQUE KEY b_mixed (b, (a * 2)), UNIQUE KEY c_ok (id))",
		"CREATE TABLE d.only (a INT NOT NULL, UNIQUE KEY a_fn ((a + 1)))")
	ctx := context.Background()
	tbl, err := schema.Load(ctx, db, "d", "f")
	require.NoError(t, err)
	require.Equal(t, "c_ok", tbl.KeyName)
	require.Equal(t, []string{"id"}, tbl.Key)
	_, err = schema.Load(ctx, db, "d", "only")
	require.ErrorIs(t, err, schema.ErrNoKey)
	require.EqualError(t, err, "table has no usable key: d.only has no PRIMARY KEY and no UNIQUE key on NOT NULL columns "+
		"(unique key a_fn on the expression (`a` + 1) is functional: its value is no column of the row); "+
		"add a primary key (rowlift copies in key order and applies changes by key)")
}

// TestReadUniqueKeys reads unique keys, PRIMARY first, with prefix parts on
// both flavors and, on MySQL, functional parts with their expression.
func TestReadUniqueKeys(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		db := server(t, flavor, "CREATE TABLE d.k (id INT NOT NULL, name VARCHAR(20) NOT NULL, b INT, "+
			"UNIQUE KEY u_name (name(4), b), KEY plain (b), PRIMARY KEY (id))")
		ctx := context.Background()
		keys, err := schema.ReadUniqueKeys(ctx, db, "d", "k")
		require.NoError(t, err)
		require.Equal(t, []schema.Key{
			{Name: "PRIMARY", Parts: []schema.KeyPart{{Column: "id"}}},
			{Name: "u_name", Parts: []schema.KeyPart{{Column: "name", Prefix: 4}, {Column: "b"}}},
		}, keys, "no expression on MariaDB, whose STATISTICS has no EXPRESSION column")
		require.Empty(t, keys[1].Expression())
		if flavor != sandbox.MySQL {
			return
		}
		sandboxtest.Exec(t, db, "CREATE TABLE d.f (id INT PRIMARY KEY, email VARCHAR(40), UNIQUE KEY u_email ((LOWER(email))), "+
			"UNIQUE KEY u_mixed (id, (email + 0)))")
		keys, err = schema.ReadUniqueKeys(ctx, db, "d", "f")
		require.NoError(t, err)
		require.Equal(t, []schema.Key{
			{Name: "PRIMARY", Parts: []schema.KeyPart{{Column: "id"}}},
			{Name: "u_email", Parts: []schema.KeyPart{{Expression: "lower(`email`)"}}},
			{Name: "u_mixed", Parts: []schema.KeyPart{{Column: "id"}, {Expression: "(`email` + 0)"}}},
		}, keys)
		require.Equal(t, "(`email` + 0)", keys[2].Expression())
	})
}

func TestCheckShapeListsEveryDifference(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		db := server(t, flavor,
			"CREATE TABLE d.src (id INT PRIMARY KEY, name VARCHAR(10) COLLATE utf8mb4_bin, n INT NULL, gone INT)",
			"CREATE TABLE d.dst (id BIGINT PRIMARY KEY, name VARCHAR(10) COLLATE utf8mb4_general_ci, n INT NOT NULL)",
			"CREATE TABLE d.same (id INT PRIMARY KEY, name VARCHAR(10) COLLATE utf8mb4_bin, n INT NULL, gone INT, extra INT NULL)")
		ctx := context.Background()
		src, err := schema.Load(ctx, db, "d", "src")
		require.NoError(t, err)
		cols, err := src.Streamed(nil)
		require.NoError(t, err)
		fields := src.Fields(cols)

		dst, err := schema.Load(ctx, db, "d", "dst")
		require.NoError(t, err)
		err = schema.CheckShape(dst, fields)
		// MySQL 8.0.19 and later print integer types without a display width.
		widths := map[sandbox.Flavor]string{sandbox.MariaDB: "column id is bigint(20), source has int(11)", sandbox.MySQL: "column id is bigint, source has int"}
		require.ErrorContains(t, err, widths[flavor])
		require.ErrorContains(t, err, `column name has collation "utf8mb4_general_ci", source has "utf8mb4_bin"`)
		require.ErrorContains(t, err, "column n nullable=false, source nullable=true")
		require.ErrorContains(t, err, "column gone is missing")

		same, err := schema.Load(ctx, db, "d", "same")
		require.NoError(t, err)
		require.NoError(t, schema.CheckShape(same, fields), "extra nullable target columns are allowed")
	})
}

func TestSameTypeAcrossFlavors(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{"int(11)", "int", true},
		{"bigint(20) unsigned", "bigint unsigned", true},
		{"tinyint(4)", "TINYINT", true},
		{"year(4)", "year", true},
		{"mediumint(9)", "mediumint", true},
		{"int(5) unsigned zerofill", "int unsigned zerofill", false},
		{"int(11)", "bigint", false},
		{"varchar(10)", "varchar(20)", false},
		{"decimal(10,2)", "decimal(10,3)", false},
		{"char(4)", "char(4)", true},
		{"json", "longtext", false},
	} {
		require.Equal(t, c.same, schema.SameType(c.a, c.b), "%s vs %s", c.a, c.b)
		require.Equal(t, c.same, schema.SameType(c.b, c.a), "%s vs %s", c.b, c.a)
	}
}
