package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/verify"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// crossTable has the types both flavors have, in collations both know.
const crossTable = `CREATE TABLE x.common (
  id INT PRIMARY KEY, ti TINYINT, biu BIGINT UNSIGNED, dec1 DECIMAL(20,6), f FLOAT, d DOUBLE, bits BIT(12),
  vc VARCHAR(40) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci, lat VARCHAR(20) CHARACTER SET latin1 COLLATE latin1_swedish_ci,
  bin VARBINARY(16), bl BLOB, tx TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
  dt DATE, dtm DATETIME(6), ts TIMESTAMP(3) NULL, tm TIME(3), yr YEAR,
  e ENUM('a', 'ü') CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci, s SET('x', 'y') CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci,
  js JSON
) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci`

// TestCrossFlavorMoves moves a table of every type both flavors have from
// MariaDB to MySQL and from MySQL to MariaDB, under writes, through the
// coordinator: the target ends identical.
func TestCrossFlavorMoves(t *testing.T) {
	for _, dir := range [][2]sandbox.Flavor{{sandbox.MariaDB, sandbox.MySQL}, {sandbox.MySQL, sandbox.MariaDB}} {
		t.Run(string(dir[0])+"-to-"+string(dir[1]), func(t *testing.T) {
			t.Parallel()
			e := newEnvOf(t, sandbox.Options{Flavor: dir[0]}, sandbox.Options{Flavor: dir[1]})
			e.sourceExec("CREATE DATABASE x", crossTable,
				"INSERT INTO x.common WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 3000) "+
					"SELECT i, i % 128 - 64, 18446744073709551615 - i, i / 7, i / 3, i / 11, i % 4096, CONCAT('Zoë ', i), 'déjà', "+
					"UNHEX(LPAD(HEX(i), 8, '0')), REPEAT(UNHEX('00FF'), i % 9), REPEAT('t', i % 50), DATE('2020-01-01') + INTERVAL i DAY, "+
					"FROM_UNIXTIME(1600000000 + i, '%Y-%m-%d %H:%i:%s.%f'), FROM_UNIXTIME(1600000000 + i * 7), SEC_TO_TIME(i * 1.5), 1901 + i % 255, "+
					"ELT(1 + i % 2, 'a', 'ü'), ELT(1 + i % 3, 'x', 'x,y', ''), JSON_OBJECT('n', i, 'k', CONCAT('v', i)) FROM s")
			e.startStreamer()
			e.startApplier()
			_, ctl, _ := e.startCoordinator()
			spec := e.workflow("cross", "x", "common")
			spec.Options.ChunkRows = 500
			// MariaDB keeps the MySQL documents' text; the DECIMAL 1.5 the
			// updates store becomes a number there.
			spec.Options.JsonAsText = dir[0] == sandbox.MySQL
			call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) {
				return ctl.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: spec})
			})
			call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) {
				return ctl.StartWorkflow(ctx, &rowliftv1.WorkflowRef{Name: "cross"})
			})
			e.sourceExec("UPDATE x.common SET vc = 'changed', js = JSON_OBJECT('changed', TRUE, 'x', 1.5) WHERE id % 97 = 0",
				"DELETE FROM x.common WHERE id % 101 = 0",
				"INSERT INTO x.common (id, vc, js, dtm) VALUES (100000, 'new', '[1, \"two\", null]', '2024-02-29 23:59:59.999999')")
			e.waitState("cross", state.Running, time.Minute)
			e.sourceExec("UPDATE x.common SET d = -d, tx = CONCAT(tx, '!') WHERE id % 13 = 0")
			e.waitCaughtUp("cross", time.Minute)
			r, err := verify.Table(context.Background(), e.srcDB, e.dstDB, "x", "x", "common", verify.Options{})
			require.NoError(t, err)
			require.True(t, r.Identical(), r.String())
		})
	}
}

// TestCrossFlavorRefusals: a workflow between flavors with columns that cannot
// move exactly is refused at creation, naming every such column, and writes
// nothing; one that can but loses byte-exactness is created with a warning.
func TestCrossFlavorRefusals(t *testing.T) {
	t.Run("mariadb-to-mysql", func(t *testing.T) {
		t.Parallel()
		e := newEnvOf(t, sandbox.Options{Flavor: sandbox.MariaDB}, sandbox.Options{Flavor: sandbox.MySQL})
		e.sourceExec("CREATE DATABASE x", "CREATE TABLE x.net (id INT PRIMARY KEY, addr INET6, ref UUID, v VARCHAR(10))",
			"CREATE TABLE x.doc (id INT PRIMARY KEY, j JSON)", `INSERT INTO x.doc VALUES (1, '{"b": 1, "a": [1.50, 2]}')`)
		e.startStreamer()
		_, ctl, _ := e.startCoordinator()
		_, err := callErr(func(ctx context.Context) (*rowliftv1.Workflow, error) {
			return ctl.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: e.workflow("net", "x", "net")})
		})
		require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
		msg := status.Convert(err).Message()
		require.Contains(t, msg, "2 column(s) cannot move exactly")
		require.Contains(t, msg, "column net.addr is INET6, which MariaDB has and MySQL does not")
		require.Contains(t, msg, "column net.ref is UUID, which MariaDB has and MySQL does not")
		_, err = e.store.Workflow(context.Background(), "net")
		require.ErrorIs(t, err, state.ErrNotFound)
		e.nothingWritten("net", "x")

		// JSON text into a MySQL JSON column the operator made: created, with a warning.
		_, err = e.dstDB.Exec("CREATE DATABASE x")
		require.NoError(t, err)
		_, err = e.dstDB.Exec("CREATE TABLE x.doc (id INT PRIMARY KEY, j JSON)")
		require.NoError(t, err)
		w, err := ctl.CreateWorkflow(context.Background(), &rowliftv1.CreateWorkflowRequest{Spec: e.workflow("doc", "x", "doc")})
		require.NoError(t, err)
		require.Len(t, w.GetWarnings(), 1)
		require.Contains(t, w.GetWarnings()[0], "column doc.j is JSON text on MariaDB and a JSON column on the MySQL target")
	})
	t.Run("mysql-to-mariadb", func(t *testing.T) {
		t.Parallel()
		e := newEnvOf(t, sandbox.Options{Flavor: sandbox.MySQL}, sandbox.Options{Flavor: sandbox.MariaDB})
		e.sourceExec("CREATE DATABASE x", "CREATE TABLE x.vec (id INT PRIMARY KEY, emb VECTOR(3), name VARCHAR(20)) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_0900_ai_ci")
		e.startStreamer()
		_, ctl, _ := e.startCoordinator()
		_, err := callErr(func(ctx context.Context) (*rowliftv1.Workflow, error) {
			return ctl.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: e.workflow("vec", "x", "vec")})
		})
		require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
		msg := status.Convert(err).Message()
		require.Contains(t, msg, "3 column(s) cannot move exactly")
		require.Contains(t, msg, "table vec has the default collation utf8mb4_0900_ai_ci, which the MariaDB target does not know")
		require.Contains(t, msg, "column vec.emb is VECTOR, which MySQL has and MariaDB does not")
		require.Contains(t, msg, "column vec.name has collation utf8mb4_0900_ai_ci, which the MariaDB target does not know")
		e.nothingWritten("vec", "x")
	})
}

// TestCrossFlavorDDL: with on_ddl EXEC, a MySQL source's ALTER that a MariaDB
// target cannot take (MySQL's INVISIBLE index, MariaDB's IGNORED) stops the
// workflow at the statement with the target's error and what to do; the
// equivalent change on the target and a resume go on past it, and the rows
// written after it arrive.
func TestCrossFlavorDDL(t *testing.T) {
	e := newEnvOf(t, sandbox.Options{Flavor: sandbox.MySQL}, sandbox.Options{Flavor: sandbox.MariaDB})
	e.sourceExec("CREATE DATABASE x", "CREATE TABLE x.t (id INT PRIMARY KEY, v INT NOT NULL, KEY kv (v)) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci",
		"INSERT INTO x.t VALUES (1, 1)")
	e.startStreamer()
	e.startApplier()
	spec := e.workflow("xddl", "x", "t")
	spec.Options.OnDdl = rowliftv1.OnDDL_ON_DDL_EXEC
	e.start(spec)
	e.waitState("xddl", state.Running, 30*time.Second)
	e.sourceExec("ALTER TABLE x.t ALTER INDEX kv INVISIBLE", "INSERT INTO x.t VALUES (2, 2)")
	w := e.waitState("xddl", state.Stopped, 30*time.Second)
	t.Logf("stopped: %s", w.Message)
	require.Contains(t, w.Message, "ALTER TABLE x.t ALTER INDEX kv INVISIBLE")
	require.Contains(t, w.Message, "the target refused")
	require.Contains(t, w.Message, "Error 1064")
	require.Contains(t, w.Message, "make the equivalent change on the target")
	require.Contains(t, w.Message, "then resume the workflow: it goes on past the statement")

	sandboxtest.Exec(t, e.dstDB, "ALTER TABLE x.t ALTER INDEX kv IGNORED")
	moved, err := e.store.Transition(context.Background(), "xddl", []state.State{state.Stopped}, state.Running, "resumed by the test")
	require.NoError(t, err)
	require.True(t, moved)
	e.waitCaughtUp("xddl", 30*time.Second)
	e.waitState("xddl", state.Running, 10*time.Second)
	require.Equal(t, 2, count(t, e.dstDB, "x.t"))
}
