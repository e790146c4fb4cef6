package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/verify"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// TestOnlineSchemaChange changes moved tables the way online schema change
// tools do, under writers, with on_ddl EXEC: gh-ost's exact statement
// sequence on t (its changelog and shadow tables, the ALTER of the shadow,
// its row copy, the atomic RENAME cut-over), then a real run of
// pt-online-schema-change (Debian's percona-toolkit) on t, whose triggers keep
// its shadow in sync while the writers go on. Each cut-over brings the
// target's t to the source's new definition without copying it again; no
// shadow, changelog or old table appears on the target; u, moved beside it,
// keeps being written and applied throughout; the workflow never stops and
// both tables end identical.
func TestOnlineSchemaChange(t *testing.T) {
	ptosc, err := exec.LookPath("pt-online-schema-change")
	require.NoError(t, err, "pt-online-schema-change is missing: make setup installs Debian's percona-toolkit")
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		const rows = 2000
		seed := testSeed(t)
		e := newEnvWith(t, sandbox.Options{Flavor: flavor})
		fill := fmt.Sprintf("WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < %d) SELECT i, i, 'w' FROM s", rows)
		e.sourceExec("CREATE DATABASE d",
			"CREATE TABLE d.t (id INT PRIMARY KEY, v INT NOT NULL, w VARCHAR(20) NOT NULL DEFAULT '')", "INSERT INTO d.t "+fill,
			"CREATE TABLE d.u (id INT PRIMARY KEY, v INT NOT NULL, w VARCHAR(20) NOT NULL DEFAULT '')", "INSERT INTO d.u "+fill)
		e.startStreamer()
		e.startApplier()
		spec := e.workflow("osc", "d", "t", "u")
		spec.Options.OnDdl = rowliftv1.OnDDL_ON_DDL_EXEC
		e.start(spec)
		e.waitState("osc", state.Running, time.Minute)

		// Writers of id and v, which no change touches; pausing t's stands
		// for gh-ost's lock of t around its cut-over.
		ctx, stopWriters := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var pauseT atomic.Bool
		var applied [2]atomic.Int64
		for i, table := range []string{"t", "u"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, uint64(i)))
				for ctx.Err() == nil {
					if table == "t" && pauseT.Load() {
						time.Sleep(5 * time.Millisecond)
						continue
					}
					id := 1 + rng.IntN(rows+300)
					q := []string{
						fmt.Sprintf("UPDATE d.%s SET v = v + 1 WHERE id = %d", table, id),
						fmt.Sprintf("INSERT INTO d.%s (id, v) VALUES (%d, %d) ON DUPLICATE KEY UPDATE v = v - 1", table, id, rng.IntN(1000)),
						fmt.Sprintf("DELETE FROM d.%s WHERE id = %d", table, id),
					}[rng.IntN(3)]
					if _, err := e.srcDB.ExecContext(ctx, q); err == nil {
						applied[i].Add(1)
					}
					time.Sleep(2 * time.Millisecond)
				}
			}()
		}
		t.Cleanup(func() { stopWriters(); wg.Wait() })

		// gh-ost, as it logs its statements.
		e.sourceExec(
			"create /* gh-ost */ table `d`.`_t_ghc` (id bigint auto_increment, last_update timestamp not null DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, hint varchar(64) charset ascii not null, value varchar(4096) charset ascii not null, primary key(id), unique key hint_uidx(hint)) auto_increment=256",
			"create /* gh-ost */ table `d`.`_t_gho` like `d`.`t`",
			"alter /* gh-ost */ table `d`.`_t_gho` add column extra int not null default 7, add key kv (v)")
		time.Sleep(300 * time.Millisecond)
		pauseT.Store(true)
		time.Sleep(50 * time.Millisecond)
		e.sourceExec(
			"insert /* gh-ost */ ignore into `d`.`_t_gho` (`id`, `v`, `w`) (select `id`, `v`, `w` from `d`.`t` force index (`PRIMARY`))",
			"create /* gh-ost */ table `d`.`_t_del` (id int auto_increment primary key) engine=InnoDB comment='ghost-cut-over-sentry'",
			"drop /* gh-ost */ table if exists `d`.`_t_del`",
			"rename /* gh-ost */ table `d`.`t` to `d`.`_t_del`, `d`.`_t_gho` to `d`.`t`",
			"drop /* gh-ost */ table if exists `d`.`_t_ghc`",
			"drop /* gh-ost */ table if exists `d`.`_t_del`")
		pauseT.Store(false)
		time.Sleep(300 * time.Millisecond)

		// pt-online-schema-change, for real, while the writers go on.
		out, err := exec.Command(ptosc, "--alter", "ADD COLUMN extra2 INT NOT NULL DEFAULT 9, MODIFY w VARCHAR(40) NOT NULL DEFAULT ''",
			"--execute", "--recursion-method", "none", "--chunk-size", "500", "--no-check-alter",
			fmt.Sprintf("h=127.0.0.1,P=%s,u=root,D=d,t=t", e.src.Addr()[strings.LastIndex(e.src.Addr(), ":")+1:])).CombinedOutput()
		require.NoError(t, err, "pt-online-schema-change:\n%s", out)
		require.Contains(t, string(out), "Successfully altered", string(out))
		time.Sleep(300 * time.Millisecond)

		stopWriters()
		wg.Wait()
		t.Logf("writes to t and u: %d, %d", applied[0].Load(), applied[1].Load())
		e.waitCaughtUp("osc", time.Minute)
		w := e.waitState("osc", state.Running, 10*time.Second)
		require.Empty(t, w.LastError, "the workflow never stopped")
		for _, table := range []string{"t", "u"} {
			r, err := verify.Table(context.Background(), e.srcDB, e.dstDB, "d", "d", table, verify.Options{})
			require.NoError(t, err)
			require.True(t, r.Identical(), "%s: %s", table, r.String())
		}
		columns := "SELECT GROUP_CONCAT(COLUMN_NAME, ' ', COLUMN_TYPE ORDER BY ORDINAL_POSITION) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'd' AND TABLE_NAME = 't'"
		var src, dst string
		require.NoError(t, e.srcDB.QueryRow(columns).Scan(&src))
		require.NoError(t, e.dstDB.QueryRow(columns).Scan(&dst))
		require.Equal(t, src, dst, "the target's t has the source's new columns")
		require.Contains(t, dst, "extra2 int")
		var tables string
		require.NoError(t, e.dstDB.QueryRow("SELECT IFNULL(GROUP_CONCAT(TABLE_NAME ORDER BY TABLE_NAME), '') FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'd'").Scan(&tables))
		require.Equal(t, "t,u", tables, "no shadow, changelog or old table on the target")
		require.Contains(t, e.applier.logText(), "following an online schema change's cut-over")
	})
}
