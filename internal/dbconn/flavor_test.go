package dbconn

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
)

func TestFlavorOfVersion(t *testing.T) {
	for version, want := range map[string]Flavor{
		"10.11.14-MariaDB-0+deb12u2-log": MariaDB,
		"11.4.2-MariaDB":                 MariaDB,
		"9.7.4":                          MySQL,
		"8.4.3-log":                      MySQL,
	} {
		assert.Equal(t, want, flavorOfVersion(version), version)
	}
}

func TestPositionOnEachFlavor(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		srv := sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
		db := sandboxtest.Open(t, srv, "")
		ctx := context.Background()
		got, _, err := ServerFlavor(ctx, db)
		require.NoError(t, err)
		assert.Equal(t, Flavor(flavor), got)
		sandboxtest.Exec(t, db, "CREATE DATABASE p", "CREATE TABLE p.t (id INT PRIMARY KEY)")
		before, err := Position(ctx, db)
		require.NoError(t, err)
		sandboxtest.Exec(t, db, "INSERT INTO p.t VALUES (1)")
		after, err := Position(ctx, db)
		require.NoError(t, err)
		b, err := gtid.Parse(before)
		require.NoError(t, err)
		a, err := gtid.Parse(after)
		require.NoError(t, err)
		assert.Equal(t, string(flavor), a.Flavor())
		assert.True(t, a.Contains(b))
		assert.False(t, b.Contains(a), "%s then %s", before, after)
	})
}
