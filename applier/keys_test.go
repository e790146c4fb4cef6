package applier

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/schema"
)

// TestAddKeysAfterAnotherAlter runs addKeys while another session's ALTER
// adding one of the keys (a killed applier's, which the server finishes) waits
// ahead of it on the table's metadata lock: addKeys's own ALTER then finds
// that key added, and it adds what is left instead of failing. A second call
// finds every key there and adds nothing.
func TestAddKeysAfterAnotherAlter(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		ctx := context.Background()
		db := targetServer(t, flavor)
		sandboxtest.Exec(t, db, "CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY, a INT, b INT)", "INSERT INTO d.t VALUES (1, 1, 1)")
		keys := []schema.DeferredKey{{Name: "by_a", Definition: "KEY `by_a` (`a`)"}, {Name: "by_b", Definition: "KEY `by_b` (`b`)"}}

		// A reader holds the table's metadata lock; the other ALTER queues behind it.
		reader, err := db.Conn(ctx)
		require.NoError(t, err)
		defer reader.Close()
		_, err = reader.ExecContext(ctx, "BEGIN")
		require.NoError(t, err)
		_, err = reader.ExecContext(ctx, "SELECT * FROM d.t")
		require.NoError(t, err)
		other := make(chan error, 1)
		go func() {
			_, err := db.ExecContext(ctx, "ALTER TABLE d.t ADD KEY by_a (a)")
			other <- err
		}()
		waiting := func(n int) func() bool {
			return func() bool {
				var c int
				require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE LIKE '%metadata lock%' "+
					"AND INFO LIKE 'ALTER TABLE%'").Scan(&c))
				return c >= n
			}
		}
		require.Eventually(t, waiting(1), 30*time.Second, 20*time.Millisecond, "the other ALTER waits on the reader")
		type result struct {
			added []string
			err   error
		}
		done := make(chan result, 1)
		go func() {
			added, err := addKeys(ctx, db, "d", "t", keys)
			done <- result{added, err}
		}()
		require.Eventually(t, waiting(2), 30*time.Second, 20*time.Millisecond, "addKeys's ALTER queues behind it")
		_, err = reader.ExecContext(ctx, "COMMIT")
		require.NoError(t, err)
		require.NoError(t, <-other)
		r := <-done
		require.NoError(t, r.err)
		require.Equal(t, []string{"by_b"}, r.added, "by_a was added by the other ALTER")

		tbl, err := schema.Load(ctx, db, "d", "t")
		require.NoError(t, err)
		require.True(t, strings.Contains(tbl.CreateTable, "KEY `by_a` (`a`)") && strings.Contains(tbl.CreateTable, "KEY `by_b` (`b`)"), tbl.CreateTable)

		added, err := addKeys(ctx, db, "d", "t", keys)
		require.NoError(t, err)
		require.Empty(t, added, "a run after a kill that followed the ALTER adds nothing")
	})
}
