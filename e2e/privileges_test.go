package e2e

import (
	"context"
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

// TestSourcePrivilegesAreChecked: a source user that may read the tables but
// not the binlog, or not read a table, or not lock it (the chunk fence locks
// the table), is refused when the workflow is created, with the GRANT
// that fixes it. A workflow that exists already retries with the same message
// and copies once the grant is given, with no restart.
func TestSourcePrivilegesAreChecked(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		e := newEnvWith(t, sandbox.Options{Flavor: flavor})
		const user, password = "'mover'@'127.0.0.1'", "pr1v-s3cret"
		e.sourceExec("CREATE DATABASE p", "CREATE TABLE p.t (id INT PRIMARY KEY)", "INSERT INTO p.t VALUES (1), (2)",
			"CREATE TABLE p.secret (id INT PRIMARY KEY)", "CREATE DATABASE q", "CREATE TABLE q.t (id INT PRIMARY KEY)",
			"CREATE USER "+user+" IDENTIFIED BY '"+password+"'",
			"GRANT SELECT ON p.t TO "+user, "GRANT SELECT ON q.t TO "+user, "GRANT LOCK TABLES ON p.* TO "+user)
		e.streamer = startProc(t, "streamer", nil, "streamer", "--listen", e.streamerAddr,
			"--source-dsn", "mover:"+password+"@tcp("+e.src.Addr()+")/")
		e.startApplier()
		_, ctl, _ := e.startCoordinator()
		create := func(spec *rowliftv1.WorkflowSpec) error {
			_, err := callErr(func(ctx context.Context) (*rowliftv1.Workflow, error) {
				return ctl.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: spec})
			})
			return err
		}
		refused := func(spec *rowliftv1.WorkflowSpec, want string) {
			t.Helper()
			err := create(spec)
			require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
			require.Contains(t, err.Error(), want)
			_, err = e.store.Workflow(context.Background(), spec.GetName())
			require.ErrorIs(t, err, state.ErrNotFound, "a refused workflow is not created")
		}

		replication := "lacks the REPLICATION SLAVE privilege on *.*, which rowlift needs to read the binlog: " +
			"run GRANT REPLICATION SLAVE ON *.* TO " + user
		refused(e.workflow("p", "p", "t"), replication)
		refused(e.workflow("secret", "p", "secret"), "lacks the SELECT privilege on `p`.`secret`, which rowlift needs to copy and verify it: "+
			"run GRANT SELECT ON `p`.`secret` TO "+user)
		refused(e.workflow("q", "q", "t"), "run GRANT LOCK TABLES ON `q`.* TO "+user)

		// Made behind the coordinator's back, the workflow retries, says why,
		// and goes on once the grant is given.
		e.start(e.workflow("p", "p", "t"))
		e.waitFor("a retry message naming the grant", 30*time.Second, func() (bool, string) {
			msg := e.streamMessage("p")
			return strings.Contains(msg, replication), msg
		})
		e.nothingWritten("p", "p")
		e.sourceExec("GRANT REPLICATION SLAVE ON *.* TO " + user)
		e.waitState("p", state.Running, time.Minute)
		require.Equal(t, 2, count(t, e.dstDB, "p.t"))
		for _, text := range []string{e.streamer.logText(), e.applier.logText()} {
			require.NotContains(t, text, password, "a password leaked")
		}
	})
}

// TestStatusSaysWhenNoApplierRuns: a workflow started while no applier runs
// for its target says so in its status after a few seconds, and the message
// goes once an applier starts and picks it up.
func TestStatusSaysWhenNoApplierRuns(t *testing.T) {
	e := newEnv(t)
	e.sourceExec("CREATE DATABASE idle", "CREATE TABLE idle.t (id INT PRIMARY KEY)", "INSERT INTO idle.t VALUES (1)")
	e.startStreamer()
	_, ctl, _ := e.startCoordinator()
	get := func() *rowliftv1.WorkflowStatus {
		return call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) {
			return ctl.GetWorkflow(ctx, &rowliftv1.WorkflowRef{Name: "idle"})
		}).GetStatus()
	}
	call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) {
		return ctl.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: e.workflow("idle", "idle", "t")})
	})
	call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) {
		return ctl.StartWorkflow(ctx, &rowliftv1.WorkflowRef{Name: "idle"})
	})
	e.waitFor("status to say no applier runs", 30*time.Second, func() (bool, string) {
		msg := get().GetMessage()
		return strings.Contains(msg, "no applier is running for target main: start one"), msg
	})
	e.startApplier()
	e.waitPhase(ctl, "idle", rowliftv1.WorkflowPhase_WORKFLOW_PHASE_RUNNING)
	require.NotContains(t, get().GetMessage(), "no applier")
	require.Equal(t, 1, count(t, e.dstDB, "idle.t"))
}
