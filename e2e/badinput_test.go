package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/metrics"
	"github.com/rowlift/rowlift/internal/metrics/metricstest"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// nothingWritten checks that a failed workflow left no table and no row on the
// target database, and no copy progress.
func (e *env) nothingWritten(workflow, db string) {
	e.t.Helper()
	var tables int
	require.NoError(e.t, e.dstDB.QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", db).Scan(&tables))
	require.Zero(e.t, tables, "no table may be created in %s", db)
	cs, err := e.store.CopyState(context.Background(), workflow, "")
	require.NoError(e.t, err)
	for _, c := range cs {
		require.Zero(e.t, c.RowsCopied, "%s", c.Table)
		require.Nil(e.t, c.LastPK, "%s", c.Table)
	}
}

// streamMessage returns the retry message of the workflow's only stream.
func (e *env) streamMessage(workflow string) string {
	streams, err := e.store.Streams(context.Background(), workflow)
	require.NoError(e.t, err)
	require.Len(e.t, streams, 1)
	return streams[0].Message
}

// TestBadWorkflowsFailWithAMessageAndWriteNothing runs each workflow a user can get
// wrong against one pair of servers: each must end in state error with a message
// naming the table and what to do, with nothing written to the target.
func TestBadWorkflowsFailWithAMessageAndWriteNothing(t *testing.T) {
	sandboxtest.EachFlavor(t, testBadWorkflowsFailWithAMessageAndWriteNothing)
}

func testBadWorkflowsFailWithAMessageAndWriteNothing(t *testing.T, flavor sandbox.Flavor) {
	e := newEnvWith(t, sandbox.Options{Flavor: flavor})
	e.startStreamer()
	metricsAddr := freeAddr(t)
	e.startApplier("--metrics-listen", metricsAddr)
	e.sourceExec("CREATE DATABASE bad",
		"CREATE TABLE bad.good (id INT PRIMARY KEY, v VARCHAR(10))",
		"INSERT INTO bad.good VALUES (1, 'a'), (2, 'b')",
		"CREATE TABLE bad.nokey (a INT, b INT NULL, UNIQUE KEY (b))",
		"INSERT INTO bad.nokey VALUES (1, 1)",
		"CREATE TABLE bad.shape (id INT PRIMARY KEY, v VARCHAR(10))",
		"CREATE TABLE bad.full (id INT PRIMARY KEY)", "INSERT INTO bad.full VALUES (1)",
		"CREATE TABLE bad.dup (id INT PRIMARY KEY, v INT)", "INSERT INTO bad.dup VALUES (1, 1), (2, 2), (3, 3), (4, 4)")
	diverged := []string{"duplicate key", "was not empty when the copy started"}

	cases := []struct {
		name   string
		tables []string
		target []string // statements run on the target first
		db     string   // target database that must stay untouched
		opts   *rowliftv1.WorkflowOptions
		want   []string // parts of the error message
	}{
		{name: "nokey", tables: []string{"good", "nokey"}, db: "bad",
			want: []string{"bad.nokey has no PRIMARY KEY and no UNIQUE key on NOT NULL columns", "add a primary key"}},
		{name: "missing", tables: []string{"good", "ghost"}, db: "bad",
			want: []string{"table does not exist: bad.ghost on the source", "check the workflow's table list"}},
		{name: "shape", tables: []string{"shape"}, db: "bad_shape",
			target: []string{"CREATE DATABASE bad_shape", "CREATE TABLE bad_shape.shape (id BIGINT PRIMARY KEY, v VARCHAR(10))"},
			want:   []string{"target table bad_shape.shape differs from the source", "column id is bigint", "source has int", "make it match or drop it"}},
		{name: "nonempty", tables: []string{"full"}, db: "bad_full",
			target: []string{"CREATE DATABASE bad_full", "CREATE TABLE bad_full.full (id INT PRIMARY KEY)", "INSERT INTO bad_full.full VALUES (7)"},
			want:   []string{"target table bad_full.full already has rows and its copy has not started", "TRUNCATE", "--allow-nonempty-target (allow_nonempty_target in the API)"}},
		// A row the copy collides with is divergence with either write method: LOAD
		// DATA LOCAL would skip it silently, so the applier must notice.
		{name: "diverged-load", tables: []string{"dup"}, db: "bad_load",
			target: []string{"CREATE DATABASE bad_load", "CREATE TABLE bad_load.dup (id INT PRIMARY KEY, v INT)", "INSERT INTO bad_load.dup VALUES (3, 30)"},
			opts:   &rowliftv1.WorkflowOptions{AllowNonemptyTarget: true, CopyMethod: rowliftv1.CopyMethod_COPY_METHOD_LOAD_DATA},
			want:   diverged},
		{name: "diverged-insert", tables: []string{"dup"}, db: "bad_insert",
			target: []string{"CREATE DATABASE bad_insert", "CREATE TABLE bad_insert.dup (id INT PRIMARY KEY, v INT)", "INSERT INTO bad_insert.dup VALUES (3, 30)"},
			opts:   &rowliftv1.WorkflowOptions{AllowNonemptyTarget: true, CopyMethod: rowliftv1.CopyMethod_COPY_METHOD_INSERT},
			want:   diverged},
		{name: "no-local-infile", tables: []string{"good"}, db: "bad_infile",
			target: []string{"SET GLOBAL local_infile = OFF"},
			opts:   &rowliftv1.WorkflowOptions{CopyMethod: rowliftv1.CopyMethod_COPY_METHOD_LOAD_DATA},
			want:   []string{"target has local_infile=OFF", "SET GLOBAL local_infile=ON on the target, or create the workflow with --copy-method insert (copy_method INSERT in the API)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, q := range tc.target {
				_, err := e.dstDB.Exec(q)
				require.NoError(t, err)
			}
			tablesBefore := targetTables(t, e, tc.db)
			spec := e.workflow(tc.name, "bad", tc.tables...)
			spec.TargetDatabase = tc.db
			if tc.opts != nil {
				spec.Options = tc.opts
			}
			e.start(spec)
			w := e.waitState(tc.name, state.Error, 30*time.Second)
			for _, part := range tc.want {
				require.Contains(t, w.Message, part)
			}
			// Counted before the workflow's state is written.
			divergences, _ := metricstest.Get(t, "http://"+metricsAddr+metrics.Path).Sum("rowlift_divergences_total",
				map[string]string{"workflow": tc.name, "table": "dup"})
			want := 0.0
			if tc.opts.GetAllowNonemptyTarget() { // the diverged copies
				want = 1
			}
			require.Equal(t, want, divergences, "divergences counted")
			if tc.opts.GetAllowNonemptyTarget() {
				require.Equal(t, "dup:1", targetTables(t, e, tc.db), "the diverged copy is rolled back, the target keeps its own row")
			} else if len(tc.target) == 0 || tc.name == "no-local-infile" {
				e.nothingWritten(tc.name, tc.db)
			} else {
				require.Equal(t, tablesBefore, targetTables(t, e, tc.db), "target tables unchanged")
			}
		})
	}
	_, err := e.dstDB.Exec("SET GLOBAL local_infile = ON")
	require.NoError(t, err)
	require.Equal(t, 1, count(t, e.dstDB, "bad_full.full"), "the non-empty target keeps only its own row")
	require.Zero(t, count(t, e.dstDB, "bad_shape.shape"))
}

// targetTables lists tables and row counts of a target database.
func targetTables(t *testing.T, e *env, db string) string {
	var out []string
	for _, name := range tableNames(t, e.dstDB, db) {
		out = append(out, fmt.Sprintf("%s:%d", name, count(t, e.dstDB, db+"."+name)))
	}
	return strings.Join(out, ",")
}

// tableNames lists the tables of database db on the server conn reaches, by name.
func tableNames(t *testing.T, conn *sql.DB, db string) []string {
	t.Helper()
	return queryStrings(t, conn, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? ORDER BY TABLE_NAME", db)
}

// queryStrings is the one string column of every row q returns.
func queryStrings(t *testing.T, conn *sql.DB, q string, args ...any) []string {
	t.Helper()
	rows, err := conn.Query(q, args...)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		require.NoError(t, rows.Scan(&v))
		out = append(out, v)
	}
	require.NoError(t, rows.Err())
	return out
}

// TestWrongSourceCredentials: the stream keeps retrying with a message that says
// the source rejected the streamer's user and where to fix it; the password
// never appears in any log or message.
func TestWrongSourceCredentials(t *testing.T) {
	e := newEnv(t)
	e.sourceExec("CREATE USER 'mover'@'127.0.0.1' IDENTIFIED BY 'right-pass'", "GRANT ALL ON *.* TO 'mover'@'127.0.0.1'",
		"CREATE DATABASE creds", "CREATE TABLE creds.t (id INT PRIMARY KEY)", "INSERT INTO creds.t VALUES (1)")
	badDSN := "mover:s3cret-wrong@tcp(" + e.src.Addr() + ")/"
	e.streamer = startProc(t, "streamer", nil, "streamer", "--listen", e.streamerAddr, "--source-dsn", badDSN)
	e.startApplier()
	e.start(e.workflow("creds", "creds", "t"))

	e.waitFor("a retry message about credentials", 30*time.Second, func() (bool, string) {
		msg := e.streamMessage("creds")
		return strings.Contains(msg, `rejected the credentials of user "mover"`), msg
	})
	msg := e.streamMessage("creds")
	require.Contains(t, msg, "retrying")
	require.Contains(t, msg, "check the user and password in the source DSN")
	w, err := e.store.Workflow(context.Background(), "creds")
	require.NoError(t, err)
	require.Equal(t, state.Copying, w.State, "credentials can be fixed without recreating the workflow")
	e.nothingWritten("creds", "creds")
	for _, text := range []string{msg, e.streamer.logText(), e.applier.logText()} {
		require.NotContains(t, text, "s3cret-wrong", "a password leaked")
	}

	// Fixing the DSN and restarting the streamer recovers without operator action.
	e.streamer.stop()
	e.streamer = startProc(t, "streamer", nil, "streamer", "--listen", e.streamerAddr,
		"--source-dsn", "mover:right-pass@tcp("+e.src.Addr()+")/")
	e.waitState("creds", state.Running, 30*time.Second)
	require.Empty(t, e.streamMessage("creds"), "the retry message clears once the stream is up")
	require.NotContains(t, e.streamer.logText(), "right-pass", "the binlog reader must not log the password either")
	require.Equal(t, 1, count(t, e.dstDB, "creds.t"))
}

// TestUnreachableStreamerRetriesThenRecovers: with no streamer listening the
// workflow shows it is retrying and why, and copies once the streamer comes up.
func TestUnreachableStreamerRetriesThenRecovers(t *testing.T) {
	e := newEnv(t)
	e.sourceExec("CREATE DATABASE late", "CREATE TABLE late.t (id INT PRIMARY KEY)", "INSERT INTO late.t VALUES (1), (2), (3)")
	e.startApplier()
	e.start(e.workflow("late", "late", "t"))
	e.waitFor("a retry message about the streamer", 30*time.Second, func() (bool, string) {
		msg := e.streamMessage("late")
		return strings.Contains(msg, "retrying") && strings.Contains(msg, e.streamerAddr), msg
	})
	require.Contains(t, e.streamMessage("late"), "connection refused")
	e.nothingWritten("late", "late")

	e.startStreamer()
	e.waitState("late", state.Running, time.Minute)
	require.Equal(t, 3, count(t, e.dstDB, "late.t"))
}

// TestUnreachableSource: a streamer whose source is down makes the stream retry
// with a message naming the source address.
func TestUnreachableSource(t *testing.T) {
	e := newEnv(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadAddr := l.Addr().String()
	require.NoError(t, l.Close())
	e.streamer = startProc(t, "streamer", nil, "streamer", "--listen", e.streamerAddr, "--source-dsn", "root@tcp("+deadAddr+")/")
	e.startApplier()
	e.start(e.workflow("dead", "dead", "t"))
	e.waitFor("a retry message about the source", 30*time.Second, func() (bool, string) {
		msg := e.streamMessage("dead")
		return strings.Contains(msg, "cannot reach source server "+deadAddr), msg
	})
	require.Contains(t, e.streamMessage("dead"), "is it running")
}

// TestSourceSettingsAreChecked starts sources with required settings wrong:
// each stream fails with a message naming every wrong setting and how to fix
// it, and the workflow writes nothing.
func TestSourceSettingsAreChecked(t *testing.T) {
	cases := map[sandbox.Flavor][]struct {
		args string
		want []string
	}{
		sandbox.MariaDB: {
			{"--binlog-format=STATEMENT --binlog-row-image=MINIMAL --binlog-row-metadata=MINIMAL --gtid-strict-mode=OFF", []string{
				"binlog_format=STATEMENT; rowlift needs binlog_format=ROW because it replays row images, not statements: SET GLOBAL binlog_format=ROW (and in the server's config file)",
				"binlog_row_image=MINIMAL; rowlift needs binlog_row_image=FULL",
				"binlog_row_metadata=MINIMAL; rowlift needs binlog_row_metadata=FULL",
				"gtid_strict_mode=0; rowlift needs gtid_strict_mode=1"}},
		},
		sandbox.MySQL: {
			{"--binlog-format=STATEMENT --binlog-row-image=MINIMAL --binlog-row-metadata=MINIMAL", []string{
				"binlog_format=STATEMENT; rowlift needs binlog_format=ROW because it replays row images, not statements: SET PERSIST binlog_format=ROW",
				"binlog_row_image=MINIMAL; rowlift needs binlog_row_image=FULL because it applies changes by key and checks before images, " +
					"which need every column: SET PERSIST binlog_row_image=FULL",
				"binlog_row_metadata=MINIMAL; rowlift needs binlog_row_metadata=FULL"}},
			{"--gtid-mode=OFF --enforce-gtid-consistency=WARN", []string{
				"enforce_gtid_consistency=WARN; rowlift needs enforce_gtid_consistency=ON",
				"gtid_mode=OFF; rowlift needs gtid_mode=ON because positions are GTID sets, which every transaction must have: " +
					"SET PERSIST enforce_gtid_consistency=ON, then SET PERSIST gtid_mode=OFF_PERMISSIVE, SET PERSIST gtid_mode=ON_PERMISSIVE and"}},
		},
	}
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		for _, tc := range cases[flavor] {
			t.Run(tc.args, func(t *testing.T) {
				e := newEnvWith(t, sandbox.Options{Flavor: flavor, Args: strings.Fields(tc.args)})
				e.sourceExec("CREATE DATABASE s", "CREATE TABLE s.t (id INT PRIMARY KEY)", "INSERT INTO s.t VALUES (1)")
				e.startStreamer()
				e.startApplier()
				e.start(e.workflow("settings", "s", "t"))
				w := e.waitState("settings", state.Error, 30*time.Second)
				for _, want := range tc.want {
					require.Contains(t, w.Message, want)
				}
				e.nothingWritten("settings", "s")
			})
		}
	})
}
