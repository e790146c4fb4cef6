package e2e

import (
	"context"
	"database/sql"
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

		// Two writers of d.t, touching id and v only, which no ALTER changes.
		stopWriters := e.idWriters(seed, []string{"d.t", "d.t"}, rows+500, nil)

		e.waitCopyStarted("d2.t")
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
		t.Logf("writes: %v", stopWriters())
		e.waitSettled("exec")
		require.Contains(t, e.applier.logText(), "schema change applied on the target before a restart",
			"the applier was not killed between an ALTER and its position: the test did not reach its case")
		r, err := verify.Table(context.Background(), e.srcDB, e.dstDB, "d", "d2", "t", verify.Options{})
		require.NoError(t, err)
		require.True(t, r.Identical(), r.String())
		require.Equal(t, columnsOf(t, e.srcDB, "d", "t"), columnsOf(t, e.dstDB, "d2", "t"), "the target table has the source's columns")
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

// idWriters starts one writer per entry of tables (db.table, an entry given
// twice gets two) of random UPDATEs, upserts and DELETEs of id and v, ids up
// to keys, until stopped; while paused(table) holds, the table's writers
// wait. stop returns how many statements each writer ran.
func (e *env) idWriters(seed uint64, tables []string, keys int, paused func(table string) bool) (stop func() []int64) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	writes := make([]int64, len(tables))
	for i, table := range tables {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			for ctx.Err() == nil {
				if paused != nil && paused(table) {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				id := 1 + rng.IntN(keys)
				q := []string{
					fmt.Sprintf("UPDATE %s SET v = v + 1 WHERE id = %d", table, id),
					fmt.Sprintf("INSERT INTO %s (id, v) VALUES (%d, %d) ON DUPLICATE KEY UPDATE v = v - 1", table, id, rng.IntN(1000)),
					fmt.Sprintf("DELETE FROM %s WHERE id = %d", table, id),
				}[rng.IntN(3)]
				if _, err := e.srcDB.ExecContext(ctx, q); err == nil {
					writes[i]++
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	stop = func() []int64 {
		cancel()
		wg.Wait()
		return writes
	}
	e.t.Cleanup(func() { stop() })
	return stop
}

// columnsOf lists a table's columns with their types, in order.
func columnsOf(t *testing.T, db *sql.DB, database, table string) string {
	t.Helper()
	var cols string
	require.NoError(t, db.QueryRow("SELECT GROUP_CONCAT(COLUMN_NAME, ' ', COLUMN_TYPE ORDER BY ORDINAL_POSITION) FROM information_schema.COLUMNS "+
		"WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", database, table).Scan(&cols))
	return cols
}

// TestDDLAheadOfTheStream: with on_ddl EXEC, the applier is killed and the
// source's tables change shape while it is down (a column added, dropped,
// retyped and renamed, one table each), with rows written to each column
// before and after its change. The restarted stream starts before those
// changes, where the source's tables no longer have the target's shape: it
// reads the binlog rows before each change as the target has them, runs the
// change on the target at its place, and reopens past it. The workflow never
// stops and every table ends identical, the renamed column's values before
// the rename included.
func TestDDLAheadOfTheStream(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		const rows = 300
		seed := testSeed(t)
		e := newEnvWith(t, sandbox.Options{Flavor: flavor})
		tables := []string{"a", "b", "c", "r"}
		e.sourceExec("CREATE DATABASE d")
		for _, table := range tables {
			e.sourceExec(fmt.Sprintf("CREATE TABLE d.%s (id INT PRIMARY KEY, v INT NOT NULL, w VARCHAR(20) NOT NULL DEFAULT '')", table),
				fmt.Sprintf("INSERT INTO d.%s WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < %d) SELECT i, i, 'w' FROM s", table, rows))
		}
		e.startStreamer()
		e.startApplier()
		spec := e.workflow("ahead", "d", tables...)
		spec.Options.OnDdl = rowliftv1.OnDDL_ON_DDL_EXEC
		e.start(spec)
		e.waitState("ahead", state.Running, time.Minute)
		stopWriters := e.idWriters(seed, []string{"d.a", "d.b", "d.c", "d.r"}, rows+100, nil)
		e.waitCaughtUp("ahead", time.Minute)

		e.applier.kill()
		changes := map[string][2]string{ // the change, then a write that needs it
			"a": {"ALTER TABLE d.a ADD COLUMN x INT NOT NULL DEFAULT 5", "UPDATE d.a SET x = id WHERE id % 3 = 0"},
			"b": {"ALTER TABLE d.b DROP COLUMN w", "INSERT INTO d.b (id, v) VALUES (1000, 1) ON DUPLICATE KEY UPDATE v = 2"},
			"c": {"ALTER TABLE d.c MODIFY v BIGINT NOT NULL", "UPDATE d.c SET v = v + 10000000000 WHERE id % 4 = 0"},
			"r": {"ALTER TABLE d.r RENAME COLUMN w TO w2", "UPDATE d.r SET w2 = CONCAT(w2, '+post') WHERE id % 5 = 0"},
		}
		for _, table := range tables {
			e.sourceExec(fmt.Sprintf("UPDATE d.%s SET w = CONCAT('pre', id) WHERE id %% 2 = 0", table),
				fmt.Sprintf("INSERT INTO d.%s (id, v, w) VALUES (900, 9, 'pre-insert') ON DUPLICATE KEY UPDATE w = 'pre-upsert'", table))
		}
		for _, table := range tables {
			e.sourceExec(changes[table][0], changes[table][1])
		}
		e.applier.restart()

		e.waitFor("every change on the target", 2*time.Minute, func() (bool, string) {
			w, err := e.store.Workflow(context.Background(), "ahead")
			if err != nil {
				return false, err.Error()
			}
			if w.State != state.Running {
				return false, fmt.Sprintf("state %s: %s", w.State, w.Message)
			}
			n := strings.Count(e.applier.logText(), "\"schema change applied on the target\"")
			return n >= len(tables), fmt.Sprintf("%d changes applied", n)
		})
		t.Logf("writes: %v", stopWriters())
		e.waitSettled("ahead")
		require.Contains(t, e.streamer.logText(), "their rows are read as the target has them",
			"no stream started before a change ahead of it: the test did not reach its case")
		e.identical("d", tables...)
		for _, table := range tables {
			require.Equal(t, columnsOf(t, e.srcDB, "d", table), columnsOf(t, e.dstDB, "d", table), "the target's %s has the source's columns", table)
		}
	})
}
