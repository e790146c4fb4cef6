package e2e

import (
	"context"
	"net"
	"strconv"
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

// TestFreezePrivilegesAreChecked: a streamer whose source user lacks one of
// the privileges a cutover's freeze needs (ALTER, DROP, CREATE or INSERT to
// rename the tables; LOCK TABLES for a LOCK freeze) says which, with the
// GRANT to run, when asked before the freeze, and nothing is renamed; once
// granted, the check passes and the freeze itself works.
func TestFreezePrivilegesAreChecked(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		e := newEnvWith(t, sandbox.Options{Flavor: flavor})
		const user, password = "'mover'@'127.0.0.1'", "fr33ze-s3cret"
		e.sourceExec("CREATE USER "+user+" IDENTIFIED BY '"+password+"'", "GRANT SELECT ON *.* TO "+user)
		e.streamer = startProc(t, "streamer", nil, "streamer", "--listen", e.streamerAddr,
			"--source-dsn", "mover:"+password+"@tcp("+e.src.Addr()+")/")
		client := e.streamerClient()
		const renameWhy = "for a cutover's freeze, which renames the tables to their frozen names and back (RENAME TABLE)"
		all := []string{"ALTER", "DROP", "CREATE", "INSERT", "LOCK TABLES"}
		for _, c := range []struct {
			missing string
			mode    rowliftv1.FreezeMode
			why     string
		}{
			{"ALTER", rowliftv1.FreezeMode_FREEZE_MODE_RENAME, renameWhy},
			{"DROP", rowliftv1.FreezeMode_FREEZE_MODE_RENAME, renameWhy},
			{"CREATE", rowliftv1.FreezeMode_FREEZE_MODE_UNSPECIFIED, renameWhy},
			{"INSERT", rowliftv1.FreezeMode_FREEZE_MODE_RENAME, renameWhy},
			{"LOCK TABLES", rowliftv1.FreezeMode_FREEZE_MODE_LOCK, "for a cutover's LOCK freeze (LOCK TABLES ... READ)"},
		} {
			db := "no_" + strings.ReplaceAll(strings.ToLower(c.missing), " ", "_")
			e.sourceExec("CREATE DATABASE "+db, "CREATE TABLE "+db+".t (id INT PRIMARY KEY)")
			var others []string
			for _, p := range all {
				if p != c.missing {
					others = append(others, p)
				}
			}
			e.sourceExec("GRANT " + strings.Join(others, ", ") + " ON " + db + ".* TO " + user)
			req := &rowliftv1.FreezeRequest{Workflow: db, Database: db, Tables: []string{"t"}, Mode: c.mode}
			_, err := callErr(func(ctx context.Context) (*rowliftv1.CheckFreezeResponse, error) { return client.CheckFreeze(ctx, req) })
			require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
			require.Contains(t, err.Error(), "source user "+user+" lacks the "+c.missing+" privilege on `"+db+"`.*, which rowlift needs "+
				c.why+": run GRANT "+c.missing+" ON `"+db+"`.* TO "+user)
			require.Equal(t, []string{"t"}, tableNames(t, e.srcDB, db), "the check renames nothing")

			e.sourceExec("GRANT " + c.missing + " ON " + db + ".* TO " + user)
			call(t, func(ctx context.Context) (*rowliftv1.CheckFreezeResponse, error) { return client.CheckFreeze(ctx, req) })
			call(t, func(ctx context.Context) (*rowliftv1.FreezeResponse, error) { return client.Freeze(ctx, req) })
			call(t, func(ctx context.Context) (*rowliftv1.FreezeResponse, error) { return client.Unfreeze(ctx, req) })
			require.Equal(t, []string{"t"}, tableNames(t, e.srcDB, db))
		}
		require.NotContains(t, e.streamer.logText(), password, "a password leaked")
	})
}

// TestSwitchChecksFreezePrivileges: a switch whose source user may stream
// but not rename the tables, or whose coordinator may not write the reverse
// workflow's state on the source server, is refused before anything is frozen
// (no journal, the tables untouched, the workflow still running), with the
// GRANT to run; once granted, the switch goes through.
func TestSwitchChecksFreezePrivileges(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		e := newEnvWith(t, sandbox.Options{Flavor: flavor})
		const user, password = "'mover'@'127.0.0.1'", "sw1tch-s3cret"
		e.sourceExec("CREATE DATABASE s", "CREATE TABLE s.t (id INT PRIMARY KEY)", "INSERT INTO s.t VALUES (1), (2)",
			"CREATE USER "+user+" IDENTIFIED BY '"+password+"'",
			"GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO "+user, "GRANT LOCK TABLES ON s.* TO "+user)
		e.streamer = startProc(t, "streamer", nil, "streamer", "--listen", e.streamerAddr,
			"--source-dsn", "mover:"+password+"@tcp("+e.src.Addr()+")/")
		e.startApplier()
		port, err := sandbox.FreePort()
		require.NoError(t, err)
		revAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		startProc(t, "reverse-streamer", nil, "streamer", "--listen", revAddr, "--source-dsn", e.dst.DSN(""))
		startProc(t, "reverse-applier", nil, "applier", "--target-dsn", e.src.DSN(""), "--poll-interval", "50ms")
		// The coordinator reaches the source server (the reverse workflow's
		// target) as a user of its own, who may not insert into _rowlift yet.
		const ctlUser, ctlPassword = "'ctl'@'127.0.0.1'", "0rigin-s3cret"
		e.sourceExec("CREATE USER "+ctlUser+" IDENTIFIED BY '"+ctlPassword+"'",
			"GRANT CREATE, SELECT, UPDATE, DELETE ON _rowlift.* TO "+ctlUser, "GRANT SELECT ON s.* TO "+ctlUser)
		_, ctl, _ := e.startCoordinatorWith("--target", "main="+e.dst.DSN(""),
			"--target", "origin=ctl:"+ctlPassword+"@tcp("+e.src.Addr()+")/")
		spec := e.workflow("s", "s", "t")
		spec.Sources[0].ReverseTarget = "origin"
		spec.Targets[0].ReverseStreamerAddress = revAddr
		call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) {
			return ctl.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: spec})
		})
		call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) {
			return ctl.StartWorkflow(ctx, &rowliftv1.WorkflowRef{Name: "s"})
		})
		e.waitState("s", state.Running, time.Minute)
		sw := &rowliftv1.SwitchRequest{Workflow: &rowliftv1.WorkflowRef{Name: "s"}, MaxLagSeconds: 60}
		refused := func(want string) {
			t.Helper()
			_, err := callErr(func(ctx context.Context) (*rowliftv1.SwitchResponse, error) { return ctl.SwitchWorkflow(ctx, sw) })
			require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
			require.Contains(t, err.Error(), want)
			_, err = e.store.Journal(context.Background(), "s")
			require.ErrorIs(t, err, state.ErrNotFound, "a refused switch records no cutover")
			require.Equal(t, []string{"t"}, tableNames(t, e.srcDB, "s"), "a refused switch freezes nothing")
			e.waitState("s", state.Running, time.Second)
		}
		refused("cannot switch workflow \"s\": target origin: target user " + ctlUser + " lacks the INSERT privilege on `_rowlift`.*, " +
			"which rowlift needs to keep the workflows' state in it: run GRANT INSERT ON `_rowlift`.* TO " + ctlUser)
		e.sourceExec("GRANT INSERT ON _rowlift.* TO " + ctlUser)
		// The server names no privilege when the user has none of them.
		refused("cannot switch workflow \"s\": source main (streamer " + e.streamerAddr + "): source user " + user +
			" lacks the ALTER, DROP, CREATE, INSERT privileges on `s`.*, which rowlift needs for a cutover's freeze, which renames " +
			"the tables to their frozen names and back (RENAME TABLE): run GRANT ALTER, DROP, CREATE, INSERT ON `s`.* TO " + user)

		e.sourceExec("GRANT ALTER, DROP, CREATE, INSERT ON s.* TO " + user)
		call(t, func(ctx context.Context) (*rowliftv1.SwitchResponse, error) { return ctl.SwitchWorkflow(ctx, sw) })
		e.waitState("s", state.Switched, time.Minute)
	})
}
