package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// TestCoordinatorTargetPrivilegesAreChecked: a coordinator whose target user
// may not create the sidecar schema's tables, write them, or read a target
// table refuses creation with the GRANT that fixes it, and creates nothing;
// once every grant is given, the workflow is created. A cancel that drops the
// target tables without DROP is refused the same way.
func TestCoordinatorTargetPrivilegesAreChecked(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		e := newEnvWith(t, sandbox.Options{Flavor: flavor})
		const user, password = "'ctl'@'127.0.0.1'", "c0ord-s3cret"
		e.sourceExec("CREATE DATABASE p", "CREATE TABLE p.t (id INT PRIMARY KEY)", "INSERT INTO p.t VALUES (1), (2)")
		e.targetExec("CREATE USER "+user+" IDENTIFIED BY '"+password+"'", "GRANT SELECT, UPDATE, DELETE ON _rowlift.* TO "+user)
		e.startStreamer()
		p, ctl, _ := e.startCoordinatorWith("--target", "main=ctl:"+password+"@tcp("+e.dst.Addr()+")/")
		spec := e.workflow("p", "p", "t")
		refused := func(want ...string) {
			t.Helper()
			_, err := callErr(func(ctx context.Context) (*rowliftv1.Workflow, error) {
				return ctl.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: spec})
			})
			require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
			for _, w := range want {
				require.Contains(t, err.Error(), w)
			}
			_, err = e.store.Workflow(context.Background(), "p")
			require.ErrorIs(t, err, state.ErrNotFound, "a refused workflow is not created")
		}
		refused("target user " + user + " lacks the CREATE privilege on `_rowlift`.*, which rowlift needs to create its state tables: " +
			"run GRANT CREATE ON `_rowlift`.* TO " + user)
		e.targetExec("GRANT CREATE ON _rowlift.* TO " + user)
		refused("target user "+user+" lacks the INSERT privilege on `_rowlift`.*, which rowlift needs to keep the workflows' state in it: "+
			"run GRANT INSERT ON `_rowlift`.* TO "+user,
			"lacks the SELECT privilege on `p`.`t`, which rowlift needs to check it before creating the workflow: run GRANT SELECT ON `p`.`t` TO "+user)
		e.targetExec("GRANT INSERT ON _rowlift.* TO " + user)
		refused("run GRANT SELECT ON `p`.`t` TO " + user)
		e.targetExec("GRANT SELECT ON p.* TO " + user)
		call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) {
			return ctl.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: spec})
		})

		// Dropping the target tables on cancel needs DROP.
		cancel := &rowliftv1.CancelRequest{Workflow: &rowliftv1.WorkflowRef{Name: "p"}, DropTargetTables: true}
		_, err := callErr(func(ctx context.Context) (*rowliftv1.CancelResponse, error) { return ctl.CancelWorkflow(ctx, cancel) })
		require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
		require.Contains(t, err.Error(), "target user "+user+" lacks the DROP privilege on `p`.`t`, which rowlift needs for cancel "+
			"--drop-target-tables: run GRANT DROP ON `p`.`t` TO "+user)
		_, err = e.store.Workflow(context.Background(), "p")
		require.NoError(t, err, "a refused cancel keeps the workflow")
		e.targetExec("GRANT DROP ON p.* TO " + user)
		call(t, func(ctx context.Context) (*rowliftv1.CancelResponse, error) { return ctl.CancelWorkflow(ctx, cancel) })
		_, err = e.store.Workflow(context.Background(), "p")
		require.ErrorIs(t, err, state.ErrNotFound)
		require.NotContains(t, p.logText(), password, "a password leaked")
	})
}

// TestApplierTargetPrivilegesAreChecked: an applier whose target user lacks
// a privilege it needs on the target database (to create, read or write the
// tables it copies into) retries each workflow with the GRANT that fixes it as
// the stream's message, writes nothing meanwhile, and copies once the grant is
// given, with no restart. One that may not use _rowlift logs the GRANT.
func TestApplierTargetPrivilegesAreChecked(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		e := newEnvWith(t, sandbox.Options{Flavor: flavor})
		const user, password = "'app'@'127.0.0.1'", "app1y-s3cret"
		e.targetExec("CREATE USER " + user + " IDENTIFIED BY '" + password + "'")
		privileges := []string{"CREATE", "SELECT", "INSERT", "UPDATE", "DELETE"}
		want := map[string]string{}
		for _, priv := range privileges {
			db := "no_" + strings.ToLower(priv)
			e.sourceExec("CREATE DATABASE "+db, "CREATE TABLE "+db+".t (id INT PRIMARY KEY, v INT NOT NULL)",
				"INSERT INTO "+db+".t VALUES (1, 1), (2, 2)")
			var others []string
			for _, o := range privileges {
				if o != priv {
					others = append(others, o)
				}
			}
			e.targetExec("GRANT " + strings.Join(others, ", ") + " ON " + db + ".* TO " + user)
			on := "`" + db + "`.*"
			why := "to copy and apply the source's rows into it"
			switch priv {
			case "CREATE":
				why = "to create the tables it copies into"
			case "SELECT":
				// The server hides whether the table exists.
				on = "`" + db + "`.`t`"
			}
			want[db] = "target user " + user + " lacks the " + priv + " privilege on " + on + ", which rowlift needs " + why +
				": run GRANT " + priv + " ON " + on + " TO " + user
			e.start(e.workflow(db, db, "t"))
		}
		e.startStreamer()
		e.applier = startProc(t, "applier", nil, "applier", "--target-dsn", "app:"+password+"@tcp("+e.dst.Addr()+")/",
			"--poll-interval", "50ms")
		// With nothing on _rowlift, the applier cannot even read the workflows:
		// its log says what to grant.
		e.waitFor("the applier to log the grant on _rowlift", 30*time.Second, func() (bool, string) {
			text := e.applier.logText()
			return strings.Contains(text, "run GRANT CREATE ON `_rowlift`.* TO "+user), text
		})
		e.targetExec("GRANT ALL ON _rowlift.* TO " + user)
		for _, priv := range privileges {
			db := "no_" + strings.ToLower(priv)
			e.waitFor("a retry message naming the grant for "+db, 30*time.Second, func() (bool, string) {
				msg := e.streamMessage(db)
				return strings.Contains(msg, want[db]), msg
			})
			e.nothingWritten(db, db)
		}
		for _, priv := range privileges {
			db := "no_" + strings.ToLower(priv)
			e.targetExec("GRANT " + priv + " ON " + db + ".* TO " + user)
			e.waitState(db, state.Running, time.Minute)
			require.Equal(t, 2, count(t, e.dstDB, db+".t"))
		}
		require.NotContains(t, e.applier.logText(), password, "a password leaked")
	})
}

// targetExec runs statements on the target server.
func (e *env) targetExec(stmts ...string) {
	e.t.Helper()
	sandboxtest.Exec(e.t, e.dstDB, stmts...)
}

// TestRevokedSourceGrantsAreNamed: a source grant revoked while a workflow
// copies (SELECT on a table, or LOCK TABLES, which the chunk fence takes)
// makes the stream retry with the GRANT that gives it back as its
// message, and the copy goes on, complete, once it is given.
func TestRevokedSourceGrantsAreNamed(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		e := newEnvWith(t, sandbox.Options{Flavor: flavor})
		const user, password = "'mover'@'127.0.0.1'", "r3voked-s3cret"
		e.sourceExec("CREATE USER "+user+" IDENTIFIED BY '"+password+"'", "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO "+user)
		cases := []struct{ db, revoke, want string }{
			{"p", "REVOKE SELECT ON p.t FROM " + user, "source user " + user + " lacks the SELECT privilege on `p`.`t`, " +
				"which rowlift needs to copy and verify it: run GRANT SELECT ON `p`.`t` TO " + user},
			{"q", "REVOKE LOCK TABLES ON q.* FROM " + user, "source user " + user + " lacks the LOCK TABLES privilege on `q`.*, " +
				"which rowlift needs to fence each chunk (a brief LOCK TABLES ... WRITE: neither flavor has an exact lock-free snapshot " +
				"position): run GRANT LOCK TABLES ON `q`.* TO " + user},
		}
		for _, c := range cases {
			e.sourceExec("CREATE DATABASE "+c.db, "CREATE TABLE "+c.db+".t (id INT PRIMARY KEY)",
				"INSERT INTO "+c.db+".t WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100) SELECT i FROM n",
				"GRANT SELECT ON "+c.db+".t TO "+user, "GRANT LOCK TABLES ON "+c.db+".* TO "+user)
		}
		// Slow chunks, so the copy is still going when the grant goes.
		e.hooks = []string{"ROWLIFT_TEST_HOOKS=chunk_read=200ms-200ms"}
		e.streamer = startProc(t, "streamer", e.hooks, "streamer", "--listen", e.streamerAddr,
			"--source-dsn", "mover:"+password+"@tcp("+e.src.Addr()+")/")
		e.startApplier()
		for _, c := range cases {
			spec := e.workflow(c.db, c.db, "t")
			spec.Options.ChunkRows = 5
			e.start(spec)
			e.waitFor("the copy of "+c.db+" to start", 30*time.Second, func() (bool, string) {
				cs, err := e.store.CopyState(context.Background(), c.db, "")
				if err != nil || len(cs) == 0 {
					return false, fmt.Sprint(err)
				}
				return cs[0].RowsCopied > 0, fmt.Sprintf("%d rows copied", cs[0].RowsCopied)
			})
			e.sourceExec(c.revoke)
			e.waitFor("a retry message naming the grant", 30*time.Second, func() (bool, string) {
				msg := e.streamMessage(c.db)
				return strings.Contains(msg, c.want), msg
			})
			w, err := e.store.Workflow(context.Background(), c.db)
			require.NoError(t, err)
			require.Equal(t, state.Copying, w.State, "a revoked grant is retried, not an error: %s", w.Message)
			e.sourceExec(strings.Replace(strings.Replace(c.revoke, "REVOKE", "GRANT", 1), " FROM ", " TO ", 1))
			e.waitState(c.db, state.Running, time.Minute)
			require.Equal(t, 100, count(t, e.dstDB, c.db+".t"))
		}
		require.NotContains(t, e.streamer.logText(), password, "a password leaked")
	})
}
