package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/testhook"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// TestOnlineSchemaChange changes moved tables the way online schema change
// tools do, under writers, with on_ddl EXEC: a real run of
// pt-online-schema-change (Debian's percona-toolkit) on u while u is still
// being copied, then, during replay, gh-ost's exact statement sequence on t
// (its changelog and shadow tables, the ALTER of the shadow, its row copy,
// the atomic RENAME cut-over) and a pt-online-schema-change run on t. Its
// triggers keep its shadow in sync while the writers go on. Each cut-over
// brings the target's table to the source's new definition without copying
// it again; no shadow, changelog or old table appears on the target; the
// other table keeps being written and applied throughout; the workflow never
// stops and both tables end identical.
func TestOnlineSchemaChange(t *testing.T) {
	ptosc, err := exec.LookPath("pt-online-schema-change")
	require.NoError(t, err, "pt-online-schema-change is missing: make setup installs Debian's percona-toolkit")
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		const rows = 2000
		seed := testSeed(t)
		e := newEnvWith(t, sandbox.Options{Flavor: flavor})
		// u's copy takes 120 chunks of 50 rows, each 40 ms late: seconds, in
		// which pt-online-schema-change runs on it.
		e.hooks = []string{testhook.EnvVar + "=chunk_read=40ms-40ms"}
		fill := func(n int) string {
			return fmt.Sprintf("WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < %d) SELECT i, i, 'w' FROM s", n)
		}
		e.sourceExec("CREATE DATABASE d",
			"CREATE TABLE d.t (id INT PRIMARY KEY, v INT NOT NULL, w VARCHAR(20) NOT NULL DEFAULT '')", "INSERT INTO d.t "+fill(rows),
			"CREATE TABLE d.u (id INT PRIMARY KEY, v INT NOT NULL, w VARCHAR(20) NOT NULL DEFAULT '')", "INSERT INTO d.u "+fill(3*rows))
		e.startStreamer()
		e.startApplier()
		spec := e.workflow("osc", "d", "u", "t")
		spec.Options.OnDdl = rowliftv1.OnDDL_ON_DDL_EXEC
		spec.Options.ChunkRows = 50
		e.start(spec)

		// Writers of id and v, which no change touches; pausing t's stands
		// for gh-ost's lock of t around its cut-over.
		var pauseT atomic.Bool
		stopWriters := e.idWriters(seed, []string{"d.t", "d.u"}, rows+300, func(table string) bool { return table == "d.t" && pauseT.Load() })
		ptOSC := func(table, alter string) {
			out, err := exec.Command(ptosc, "--alter", alter, "--execute", "--recursion-method", "none", "--chunk-size", "500", "--no-check-alter",
				fmt.Sprintf("h=127.0.0.1,P=%s,u=root,D=d,t=%s", e.src.Addr()[strings.LastIndex(e.src.Addr(), ":")+1:], table)).CombinedOutput()
			require.NoError(t, err, "pt-online-schema-change:\n%s", out)
			require.Contains(t, string(out), "Successfully altered", string(out))
		}

		e.waitCopyStarted("d.u")
		ptOSC("u", "ADD COLUMN extra INT NOT NULL DEFAULT 3")
		w, err := e.store.Workflow(context.Background(), "osc")
		require.NoError(t, err)
		require.Equal(t, state.Copying, w.State, "pt-online-schema-change finished after the copy: the test did not reach its case")
		e.waitState("osc", state.Running, 2*time.Minute)

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

		// pt-online-schema-change on t, during replay, while the writers go on.
		ptOSC("t", "ADD COLUMN extra2 INT NOT NULL DEFAULT 9, MODIFY w VARCHAR(40) NOT NULL DEFAULT ''")
		time.Sleep(300 * time.Millisecond)

		t.Logf("writes to t and u: %v", stopWriters())
		e.waitSettled("osc")
		e.identical("d", "t", "u")
		for _, table := range []string{"t", "u"} {
			require.Equal(t, columnsOf(t, e.srcDB, "d", table), columnsOf(t, e.dstDB, "d", table), "the target's %s has the source's new columns", table)
		}
		require.Contains(t, columnsOf(t, e.dstDB, "d", "t"), "extra2 int")
		require.Contains(t, columnsOf(t, e.dstDB, "d", "u"), "extra int")
		var tables string
		require.NoError(t, e.dstDB.QueryRow("SELECT IFNULL(GROUP_CONCAT(TABLE_NAME ORDER BY TABLE_NAME), '') FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'd'").Scan(&tables))
		require.Equal(t, "t,u", tables, "no shadow, changelog or old table on the target")
		require.Contains(t, e.applier.logText(), "following an online schema change's cut-over")
		_, ctl, _ := e.startCoordinator()
		verifyClean(t, ctl, &rowliftv1.WorkflowRef{Name: "osc"})
	})
}

// TestOnlineSchemaChangeStops: where rowlift cannot apply a tool's cut-over
// itself, it stops at it saying what to do, and the resume after the operator
// did it goes on; a resume without the change fails saying how the target
// differs. With on_ddl STOP, gh-ost's swap of t stops the workflow
// naming the shadow's ALTER as it must run on the target's t; a swap of u
// whose shadow was made and altered before the workflow started stops it
// saying the workflow saw none of its ALTERs.
func TestOnlineSchemaChangeStops(t *testing.T) {
	e := newEnv(t)
	e.sourceExec("CREATE DATABASE d",
		"CREATE TABLE d.t (id INT PRIMARY KEY, v INT NOT NULL)", "INSERT INTO d.t VALUES (1, 1), (2, 2)",
		"CREATE TABLE d.u (id INT PRIMARY KEY, v INT NOT NULL)", "INSERT INTO d.u VALUES (1, 1), (2, 2)",
		// Before the workflow: gh-ost's shadow of u, altered and filled.
		"CREATE TABLE d._u_gho LIKE d.u", "ALTER TABLE d._u_gho ADD COLUMN note VARCHAR(10) NOT NULL DEFAULT 'n'",
		"INSERT INTO d._u_gho (id, v) SELECT id, v FROM d.u")
	e.startStreamer()
	e.startApplier()
	spec := e.workflow("oscstop", "d", "t", "u")
	spec.Options.OnDdl = rowliftv1.OnDDL_ON_DDL_STOP
	e.start(spec)
	e.waitState("oscstop", state.Running, 30*time.Second)
	resume := func(targetChange string) {
		t.Helper()
		sandboxtest.Exec(t, e.dstDB, targetChange)
		moved, err := e.store.Transition(context.Background(), "oscstop", []state.State{state.Stopped}, state.Running, "resumed by the test")
		require.NoError(t, err)
		require.True(t, moved)
	}

	e.sourceExec("RENAME TABLE d.u TO d._u_del, d._u_gho TO d.u", "INSERT INTO d.u VALUES (3, 3, 'x')")
	w := e.waitState("oscstop", state.Stopped, 30*time.Second)
	t.Logf("stopped: %s", w.Message)
	require.Contains(t, w.Message, "an online schema change swapped _u_gho in for u, and this workflow saw none of its ALTERs")
	require.Contains(t, w.Message, "make the target's u like the source's; then resume the workflow")
	resume("ALTER TABLE d.u ADD COLUMN note VARCHAR(10) NOT NULL DEFAULT 'n'")
	// t changes at once: the resumed stream may open behind its swap, and
	// then reads t's rows before it as the target has them.
	e.sourceExec("CREATE TABLE d._t_gho LIKE d.t", "ALTER TABLE d._t_gho ADD COLUMN extra INT NOT NULL DEFAULT 7",
		"INSERT INTO d._t_gho (id, v) SELECT id, v FROM d.t", "RENAME TABLE d.t TO d._t_del, d._t_gho TO d.t",
		"INSERT INTO d.t VALUES (3, 3, 8)")
	w = e.waitState("oscstop", state.Stopped, 30*time.Second)
	t.Logf("stopped: %s", w.Message)
	require.Contains(t, w.Message, "an online schema change swapped _t_gho in for t: make the same change on the target "+
		"(ALTER TABLE `d`.`t` ADD COLUMN `extra` INT NOT NULL DEFAULT 7)")
	resume("ALTER TABLE d.t ADD COLUMN extra INT NOT NULL DEFAULT 7")

	e.waitCaughtUp("oscstop", 30*time.Second)
	e.waitState("oscstop", state.Running, 10*time.Second)
	e.identical("d", "t", "u")

	// A resume without the change: the target's u lacks the source's new
	// column, which no schema change still ahead explains.
	e.sourceExec("ALTER TABLE d.u ADD COLUMN z INT NULL", "INSERT INTO d.u VALUES (4, 4, 'y', 4)")
	e.waitState("oscstop", state.Stopped, 30*time.Second)
	resume("DO 0")
	w = e.waitState("oscstop", state.Error, 30*time.Second)
	require.Contains(t, w.Message, "target table d.u differs from the source: column z is missing; make it match or drop it so rowlift creates it")
}
