package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/testhook"

	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// TestPurgedBinlogStopsTheWorkflow: when the source purged the binlog at the
// target's position while the applier was down, the workflow goes to error with
// a message that says so and what to do.
func TestPurgedBinlogStopsTheWorkflow(t *testing.T) {
	e := newEnv(t)
	e.sourceExec("CREATE DATABASE p", "CREATE TABLE p.t (id INT PRIMARY KEY)", "INSERT INTO p.t VALUES (1)")
	e.startStreamer()
	e.startApplier()
	e.start(e.workflow("purged", "p", "t"))
	e.waitState("purged", state.Running, 30*time.Second)
	e.waitCaughtUp("purged", 30*time.Second)

	e.applier.stop()
	// PURGE skips, with only a warning, files a dump thread still reads: wait
	// until the stopped stream's dump connection is gone.
	e.waitFor("the binlog dump to end", 30*time.Second, func() (bool, string) {
		n := count(t, e.srcDB, "information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
		return n == 0, fmt.Sprintf("%d dump threads", n)
	})
	e.sourceExec("INSERT INTO p.t VALUES (2)", "FLUSH BINARY LOGS")
	var current string
	rows, err := e.srcDB.Query("SHOW MASTER STATUS")
	require.NoError(t, err)
	cols, _ := rows.Columns()
	vals := make([]any, len(cols))
	vals[0] = &current
	for i := 1; i < len(vals); i++ {
		vals[i] = new(any)
	}
	require.True(t, rows.Next())
	require.NoError(t, rows.Scan(vals...))
	require.NoError(t, rows.Close())
	// MariaDB also keeps a file until its binlog checkpoint has passed it, which
	// happens shortly after the flush: purge until only the current one is left.
	e.waitFor("the old binlogs to be purged", 30*time.Second, func() (bool, string) {
		e.sourceExec("PURGE BINARY LOGS TO '" + current + "'")
		logs := binaryLogs(t, e.srcDB)
		return len(logs) == 1, fmt.Sprint(logs)
	})

	e.applier.restart()
	w := e.waitState("purged", state.Error, 30*time.Second)
	require.Contains(t, w.Message, "no longer has the binlog")
	require.Contains(t, w.Message, "its copy must start over")
}

// TestDDLStopsTheWorkflow: a schema change on a streamed table stops the workflow
// with a message naming the statement; rows before it are applied, and no
// statement before it that changes no streamed table stopped it. Then the
// operator does what the message says: the same change on the target, and a
// resume, which goes on past the statement and applies the rows after it.
func TestDDLStopsTheWorkflow(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		e := newEnvWith(t, sandbox.Options{Flavor: flavor})
		e.sourceExec("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY)", "INSERT INTO d.t VALUES (1)")
		e.startStreamer()
		e.startApplier()
		e.start(e.workflow("ddl", "d", "t"))
		e.waitState("ddl", state.Running, 30*time.Second)
		// What changes no moved table passes: another table, a gh-ost shadow
		// table, a trigger on the moved table, a user and a grant.
		e.sourceExec("INSERT INTO d.t VALUES (2)",
			"CREATE TABLE d.other (id INT PRIMARY KEY)", "ALTER TABLE d.other ADD COLUMN c INT",
			"CREATE TABLE d._t_gho LIKE d.t", "ALTER TABLE d._t_gho ADD COLUMN note VARCHAR(10)",
			"CREATE TRIGGER d.t_ins AFTER INSERT ON d.t FOR EACH ROW INSERT INTO d.other (id) VALUES (NEW.id)",
			"CREATE USER 'ddl_probe'@'%' IDENTIFIED BY 'pw'", "GRANT SELECT ON d.t TO 'ddl_probe'@'%'",
			"DROP TRIGGER d.t_ins", "DROP TABLE d._t_gho",
			"ALTER TABLE d.t ADD COLUMN note VARCHAR(10)", "INSERT INTO d.t VALUES (3, 'x')")
		w := e.waitState("ddl", state.Stopped, 30*time.Second)
		require.Contains(t, w.Message, "stopped at DDL on t")
		require.Contains(t, w.Message, "ALTER TABLE d.t ADD COLUMN note VARCHAR(10)")
		require.Contains(t, w.Message, "make the same change on the target, then resume")
		require.Equal(t, 2, count(t, e.dstDB, "d.t"), "the insert before the DDL is applied, the one after is not")

		sandboxtest.Exec(t, e.dstDB, "ALTER TABLE d.t ADD COLUMN note VARCHAR(10)")
		e.sourceExec("UPDATE d.t SET note = 'y' WHERE id = 1")
		moved, err := e.store.Transition(context.Background(), "ddl", []state.State{state.Stopped}, state.Running, "resumed by the test")
		require.NoError(t, err)
		require.True(t, moved)
		e.waitCaughtUp("ddl", 30*time.Second)
		e.waitState("ddl", state.Running, 30*time.Second)
		e.identical("d", "t")
	})
}

// TestDDLIgnored: with on_ddl IGNORE the workflow goes on past the statement.
func TestDDLIgnored(t *testing.T) {
	e := newEnv(t)
	e.sourceExec("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY, v INT)", "INSERT INTO d.t VALUES (1, 1)")
	e.startStreamer()
	e.startApplier()
	spec := e.workflow("ddl", "d", "t")
	spec.Tables[0].Columns = []string{"id", "v"}
	spec.Options.OnDdl = rowliftv1.OnDDL_ON_DDL_IGNORE
	e.start(spec)
	e.waitState("ddl", state.Running, 30*time.Second)
	e.sourceExec("ALTER TABLE d.t ADD COLUMN note VARCHAR(10)", "INSERT INTO d.t VALUES (2, 2, 'x')", "UPDATE d.t SET v = 10 WHERE id = 1")
	e.waitCaughtUp("ddl", 30*time.Second)
	var v int
	require.NoError(t, e.dstDB.QueryRow("SELECT v FROM d.t WHERE id = 1").Scan(&v))
	require.Equal(t, 10, v)
	require.Equal(t, 2, count(t, e.dstDB, "d.t"))
}

// binaryLogs names a server's binary logs (MySQL lists a third column,
// Encrypted).
func binaryLogs(t *testing.T, db *sql.DB) []string {
	rows, err := db.Query("SHOW BINARY LOGS")
	require.NoError(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	var names []string
	for rows.Next() {
		var name string
		dest := []any{&name}
		for range cols[1:] {
			dest = append(dest, new(any))
		}
		require.NoError(t, rows.Scan(dest...))
		names = append(names, name)
	}
	require.NoError(t, rows.Err())
	return names
}

// TestDDLDuringCopyStopsTheWorkflow: a schema change of a table still being
// copied, under writes, stops the workflow at the statement, not with an
// error; the same change on the target and a resume finish the copy past it,
// and the table ends identical.
func TestDDLDuringCopyStopsTheWorkflow(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		const rows = 3000
		e := newEnvWith(t, sandbox.Options{Flavor: flavor})
		e.hooks = []string{testhook.EnvVar + "=chunk_read=20ms-20ms"}
		e.sourceExec("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY, v INT NOT NULL)",
			fmt.Sprintf("INSERT INTO d.t WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < %d) SELECT i, i FROM s", rows))
		e.startStreamer()
		e.startApplier()
		spec := e.workflow("ddl", "d", "t")
		spec.Options.ChunkRows = 50
		e.start(spec)
		e.waitCopyStarted("d.t")
		// The ALTER rebuilds the table: a snapshot begun before it cannot
		// read it (MySQL's and MariaDB's error 1412).
		alter := "ALTER TABLE d.t ADD COLUMN note VARCHAR(10) NOT NULL DEFAULT 'd', MODIFY v BIGINT NOT NULL"
		e.sourceExec("UPDATE d.t SET v = -v WHERE id % 7 = 0", alter,
			fmt.Sprintf("INSERT INTO d.t VALUES (%d, 0, 'x')", rows+1), "UPDATE d.t SET note = 'y' WHERE id % 5 = 0")
		w := e.waitState("ddl", state.Stopped, 30*time.Second)
		require.Contains(t, w.Message, "stopped at DDL on t")
		copied := count(t, e.dstDB, "d.t")
		require.Less(t, copied, rows, "the copy was still going at the DDL")

		sandboxtest.Exec(t, e.dstDB, alter)
		moved, err := e.store.Transition(context.Background(), "ddl", []state.State{state.Stopped}, state.Copying, "resumed by the test")
		require.NoError(t, err)
		require.True(t, moved)
		e.waitState("ddl", state.Running, time.Minute)
		e.waitCaughtUp("ddl", 30*time.Second)
		e.identical("d", "t")
	})
}

// TestSavepoints: an application's transaction with savepoints (ORMs nest
// transactions with them) is logged with its SAVEPOINT statements inside it;
// the stream applies the transaction whole, without the rows rolled back to a
// savepoint, and goes on.
func TestSavepoints(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		e := newEnvWith(t, sandbox.Options{Flavor: flavor})
		e.sourceExec("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY, v INT NOT NULL)", "INSERT INTO d.t VALUES (1, 1)")
		e.startStreamer()
		e.startApplier()
		e.start(e.workflow("sp", "d", "t"))
		e.waitState("sp", state.Running, 30*time.Second)
		conn, err := e.srcDB.Conn(context.Background())
		require.NoError(t, err)
		defer conn.Close()
		for _, q := range []string{"BEGIN", "INSERT INTO d.t VALUES (10, 10)", "SAVEPOINT s1", "INSERT INTO d.t VALUES (11, 11)",
			"ROLLBACK TO SAVEPOINT s1", "INSERT INTO d.t VALUES (12, 12)", "SAVEPOINT s2", "UPDATE d.t SET v = 100 WHERE id = 10",
			"RELEASE SAVEPOINT s2", "UPDATE d.t SET v = 2 WHERE id = 1", "COMMIT"} {
			_, err := conn.ExecContext(context.Background(), q)
			require.NoError(t, err, q)
		}
		e.sourceExec("INSERT INTO d.t VALUES (20, 20)")
		e.waitCaughtUp("sp", 30*time.Second)
		e.waitState("sp", state.Running, 10*time.Second)
		e.identical("d", "t")
		require.Equal(t, 4, count(t, e.dstDB, "d.t"))
	})
}
