package schema_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/schema"
)

// TestSplitSecondaryKeysGivesTheSameTableBack creates tables of every kind of
// key on both flavors, splits their SHOW CREATE TABLE, creates the rest, adds
// the deferred keys, and checks that the server then prints the very same
// table, and that each kind of key is deferred or kept as the rules say.
func TestSplitSecondaryKeysGivesTheSameTableBack(t *testing.T) {
	type table struct {
		ddl      string
		deferred []string
	}
	tables := []table{
		{"CREATE TABLE d.sbtest (id INT NOT NULL AUTO_INCREMENT, k INT NOT NULL DEFAULT 0, c CHAR(120) NOT NULL DEFAULT '', " +
			"PRIMARY KEY (id), KEY k_1 (k))", []string{"k_1"}},
		// Unique, fulltext and the key that holds the AUTO_INCREMENT column stay;
		// a key named with a back quote and a prefix key move; a CHECK follows the keys.
		{"CREATE TABLE d.mixed (a INT NOT NULL, b INT NOT NULL AUTO_INCREMENT COMMENT 'not AUTO_INCREMENT, KEY', " +
			"s VARCHAR(40) DEFAULT 'KEY `x` (`a`)', t TEXT, PRIMARY KEY (a), KEY by_b (b, a), UNIQUE KEY u (s), " +
			"KEY `odd``name` (s(10), a) COMMENT 'a comment', FULLTEXT KEY ft (t), KEY two (a, s), CONSTRAINT pos CHECK (a >= 0))",
			[]string{"odd`name", "two"}},
		// A table with a foreign key keeps every key.
		{"CREATE TABLE d.parent (id INT PRIMARY KEY)", nil},
		{"CREATE TABLE d.child (id INT PRIMARY KEY, p INT, x INT, KEY by_x (x), KEY by_p (p), " +
			"CONSTRAINT fk FOREIGN KEY (p) REFERENCES parent (id))", nil},
		// Not InnoDB: kept as it is.
		{"CREATE TABLE d.my (id INT PRIMARY KEY, x INT, KEY by_x (x)) ENGINE=MyISAM", nil},
		// Only a primary key: nothing to defer.
		{"CREATE TABLE d.plain (id INT PRIMARY KEY, x INT)", nil},
	}
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		ctx := context.Background()
		var ddl []string
		for _, tb := range tables {
			ddl = append(ddl, tb.ddl)
		}
		db := server(t, flavor, append(ddl, "CREATE DATABASE e")...)
		for _, tb := range tables {
			name := strings.TrimPrefix(strings.Fields(tb.ddl)[2], "d.")
			orig, err := schema.Load(ctx, db, "d", name)
			require.NoError(t, err)
			stripped, keys := schema.SplitSecondaryKeys(orig.CreateTable)
			var names []string
			for _, k := range keys {
				names = append(names, k.Name)
			}
			require.Equal(t, tb.deferred, names, "%s: deferred keys", name)
			if len(keys) == 0 {
				require.Equal(t, orig.CreateTable, stripped, "%s: unchanged when nothing is deferred", name)
				continue
			}
			sandboxtest.Exec(t, db, "USE e", stripped)
			created, err := schema.Load(ctx, db, "e", name)
			require.NoError(t, err)
			for _, k := range keys {
				require.NotContains(t, created.CreateTable, k.Definition, "%s: created without %s", name, k.Name)
			}
			var adds []string
			for _, k := range keys {
				adds = append(adds, "ADD "+k.Definition)
			}
			sandboxtest.Exec(t, db, "ALTER TABLE e."+name+" "+strings.Join(adds, ", "))
			again, err := schema.Load(ctx, db, "e", name)
			require.NoError(t, err)
			require.Equal(t, orig.CreateTable, again.CreateTable, "%s: the same table once its keys are added", name)
		}
	})
}

func TestSplitSecondaryKeysLeavesWhatItCannotReadAlone(t *testing.T) {
	for _, ddl := range []string{
		"",
		"CREATE TABLE `t` (`id` int NOT NULL, KEY `k` (`id`)) ENGINE=InnoDB",
		"CREATE TABLE `t` (\n  `id` int NOT NULL,\n  KEY `k` (`id`)\n",
		"CREATE TABLE `t` (\n  `id` int NOT NULL,\nKEY `k` (`id`)\n) ENGINE=InnoDB",
	} {
		got, keys := schema.SplitSecondaryKeys(ddl)
		require.Equal(t, ddl, got)
		require.Empty(t, keys)
	}
}
