package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/testhook"
	"github.com/rowlift/rowlift/internal/verify"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// TestDDLExec moves a table into another database with on_ddl EXEC while
// writers change it, and alters it on the source: once during the copy (the
// ALTER rebuilds the table, so the chunk reading it is cut short), then during
// replay every kind of column change and an index, with the applier killed
// between one ALTER run on the target and the position after it, and the
// streamer killed after another. The workflow never stops, each ALTER runs
// on the target once, and the table ends identical.
func TestDDLExec(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		const rows = 3000
		seed := testSeed(t)
		e := newEnvWith(t, sandbox.Options{Flavor: flavor})
		e.hooks = []string{testhook.EnvVar + "=chunk_read=15ms-15ms,ddl_applied=1500ms-1500ms"}
		e.sourceExec("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY, v INT NOT NULL, w VARCHAR(20) NOT NULL DEFAULT '')",
			fmt.Sprintf("INSERT INTO d.t WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < %d) SELECT i, i, 'w' FROM s", rows))
		sandboxtest.Exec(t, e.dstDB, "CREATE DATABASE d2")
		e.startStreamer()
		e.startApplier()
		spec := e.workflow("exec", "d", "t")
		spec.TargetDatabase = "d2"
		spec.Options.ChunkRows = 100
		spec.Options.OnDdl = rowliftv1.OnDDL_ON_DDL_EXEC
		e.start(spec)

		// Writers touch id and v only, which no ALTER changes.
		ctx, stopWriters := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		writes := make([]int, 2)
		for i := range writes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, uint64(i)))
				for ctx.Err() == nil {
					id := 1 + rng.IntN(rows+500)
					var q string
					switch rng.IntN(3) {
					case 0:
						q = fmt.Sprintf("UPDATE d.t SET v = v + 1 WHERE id = %d", id)
					case 1:
						q = fmt.Sprintf("INSERT INTO d.t (id, v) VALUES (%d, %d) ON DUPLICATE KEY UPDATE v = v - 1", id, rng.IntN(1000))
					default:
						q = fmt.Sprintf("DELETE FROM d.t WHERE id = %d", id)
					}
					if _, err := e.srcDB.ExecContext(ctx, q); err == nil {
						writes[i]++
					}
					time.Sleep(2 * time.Millisecond)
				}
			}()
		}
		t.Cleanup(func() { stopWriters(); wg.Wait() })

		e.waitFor("the copy to start", 30*time.Second, func() (bool, string) {
			var n int
			if err := e.dstDB.QueryRow("SELECT COUNT(*) FROM d2.t").Scan(&n); err != nil {
				return false, err.Error()
			}
			return n > 0, fmt.Sprintf("%d rows copied", n)
		})
		e.sourceExec("ALTER TABLE d.t ADD COLUMN x INT NOT NULL DEFAULT 5, MODIFY w VARCHAR(40) NOT NULL DEFAULT ''")
		e.waitState("exec", state.Running, 2*time.Minute)

		alters := []string{
			"ALTER TABLE d.t CHANGE x y BIGINT NOT NULL DEFAULT 6",
			"ALTER TABLE d.t RENAME COLUMN y TO z",
			"CREATE INDEX kv ON d.t (v)",
			"ALTER TABLE d.t ADD COLUMN note VARCHAR(10) NULL, DROP COLUMN z",
		}
		for i, alter := range alters {
			e.sourceExec(alter)
			switch i {
			case 1:
				// The ALTER ran on the target, and the hook holds the
				// position after it back: kill the applier in between.
				e.waitFor("the applier to run the ALTER", time.Minute, func() (bool, string) {
					return strings.Count(e.applier.logText(), "\"schema change applied on the target\"") >= 3, "not yet"
				})
				e.applier.kill()
				e.applier.restart()
			case 2:
				e.streamer.kill()
				e.streamer.restart()
			}
			e.waitCaughtUp("exec", time.Minute)
		}
		stopWriters()
		wg.Wait()
		t.Logf("writers: %v", writes)
		e.waitCaughtUp("exec", time.Minute)
		w := e.waitState("exec", state.Running, 10*time.Second)
		require.Empty(t, w.LastError, "the workflow never stopped")
		require.Contains(t, e.applier.logText(), "schema change applied on the target before a restart",
			"the applier was not killed between an ALTER and its position: the test did not reach its case")
		r, err := verify.Table(context.Background(), e.srcDB, e.dstDB, "d", "d2", "t", verify.Options{})
		require.NoError(t, err)
		require.True(t, r.Identical(), r.String())
		var src, dst string
		require.NoError(t, e.srcDB.QueryRow("SELECT GROUP_CONCAT(COLUMN_NAME, ' ', COLUMN_TYPE ORDER BY ORDINAL_POSITION) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'd' AND TABLE_NAME = 't'").Scan(&src))
		require.NoError(t, e.dstDB.QueryRow("SELECT GROUP_CONCAT(COLUMN_NAME, ' ', COLUMN_TYPE ORDER BY ORDINAL_POSITION) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'd2' AND TABLE_NAME = 't'").Scan(&dst))
		require.Equal(t, src, dst, "the target table has the source's columns")
		var keys int
		require.NoError(t, e.dstDB.QueryRow("SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = 'd2' AND TABLE_NAME = 't' AND INDEX_NAME = 'kv'").Scan(&keys))
		require.Positive(t, keys, "the index was created on the target")
		ran := 0
		for _, line := range strings.Split(e.applier.logText(), "\n") {
			if strings.Contains(line, "applying a schema change on the target") && strings.Contains(line, "RENAME COLUMN") {
				ran++
			}
		}
		require.Equal(t, 1, ran, "the ALTER the applier was killed after ran on the target once")
	})
}
