package e2e

import (
	"context"
	"database/sql"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/verify"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// TestMoveOverTLSWithSecretFiles: source and target servers that refuse
// connections without TLS, each with a certificate from its own private CA;
// the streamer, the applier and the coordinator get their DSNs only from files
// (as mounted Kubernetes Secrets), for a user whose password holds '@', ':'
// and ','. A workflow created through the coordinator copies and replays live
// writes: the binlog dump runs over TLS too, since the source takes nothing
// else. A streamer whose DSN does not name the CA is refused at creation, and
// an applier whose DSN has no TLS keeps retrying, each saying what to set; the
// password shows in no log and no error.
func TestMoveOverTLSWithSecretFiles(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		srcTLS, dstTLS := sandboxtest.MakeTLS(t, "source"), sandboxtest.MakeTLS(t, "target")
		src := sandboxtest.Start(t, sandbox.Options{Flavor: flavor, Args: srcTLS.ServerArgs()})
		dst := sandboxtest.Start(t, sandbox.Options{Flavor: flavor, Args: dstTLS.ServerArgs()})
		e := newEnvOn(t, src, dst, sandboxtest.OpenSocket(t, src, ""), sandboxtest.OpenSocket(t, dst, ""))
		const user, password = "'mover'@'127.0.0.1'", "Pw@:,planted-s3cret"
		for _, db := range []*sql.DB{e.srcDB, e.dstDB} {
			sandboxtest.Exec(t, db, "CREATE USER "+user+" IDENTIFIED BY '"+password+"'", "GRANT ALL ON *.* TO "+user+" WITH GRANT OPTION")
		}
		e.sourceExec("CREATE DATABASE s", "CREATE TABLE s.t (id INT PRIMARY KEY, v VARCHAR(20))",
			"INSERT INTO s.t WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000) SELECT i, CONCAT('v', i) FROM n")
		dir := t.TempDir()
		dsnFile := func(name string, srv *sandbox.Server, params string) string {
			path := filepath.Join(dir, name)
			require.NoError(t, os.WriteFile(path, []byte("mover:"+password+"@tcp("+srv.Addr()+")/?"+params+"\n"), 0o600))
			return path
		}
		srcFile := dsnFile("source-dsn", src, "tls-ca="+srcTLS.CA)
		dstFile := dsnFile("target-dsn", dst, "tls-ca="+dstTLS.CA)

		e.streamer = startProc(t, "streamer", nil, "streamer", "--listen", e.streamerAddr, "--source-dsn-file", srcFile)
		e.applier = startProc(t, "applier", nil, "applier", "--target-dsn-file", dstFile, "--poll-interval", "50ms")
		coord, ctl, _ := e.startCoordinatorWith("--target-file", "main="+dstFile)
		call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) {
			return ctl.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: e.workflow("tls", "s", "t")})
		})
		call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) {
			return ctl.StartWorkflow(ctx, &rowliftv1.WorkflowRef{Name: "tls"})
		})
		e.waitPhase(ctl, "tls", rowliftv1.WorkflowPhase_WORKFLOW_PHASE_RUNNING)
		e.sourceExec("INSERT INTO s.t VALUES (3001, 'live')", "UPDATE s.t SET v = 'changed' WHERE id = 7", "DELETE FROM s.t WHERE id = 9")
		e.waitCaughtUp("tls", time.Minute)
		res, err := verify.Table(context.Background(), e.srcDB, e.dstDB, "s", "s", "t", verify.Options{})
		require.NoError(t, err)
		require.True(t, res.Identical(), "%s", res)
		require.EqualValues(t, 3000, res.TargetRows)
		var dumps int
		require.NoError(t, e.srcDB.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = 'mover' AND COMMAND LIKE 'Binlog Dump%'").Scan(&dumps))
		require.Equal(t, 1, dumps, "the replay reads the binlog as mover, over TCP, which the source takes only with TLS")

		// A DSN that asks for TLS but does not name the private CA.
		port, err := sandbox.FreePort()
		require.NoError(t, err)
		noCA := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		bad := startProc(t, "streamer-no-ca", nil, "streamer", "--listen", noCA, "--source-dsn-file", dsnFile("no-ca", src, "tls=true"))
		spec := e.workflow("noca", "s", "t")
		spec.Sources[0].StreamerAddress = noCA
		_, err = callErr(func(ctx context.Context) (*rowliftv1.Workflow, error) {
			return ctl.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: spec})
		})
		require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
		require.ErrorContains(t, err, "source server "+src.Addr()+": its TLS certificate does not verify")
		require.ErrorContains(t, err, "set tls-ca=FILE in the source DSN to the CA that signed it")
		require.NotContains(t, err.Error(), password)

		// An applier whose DSN asks for no TLS says what to add.
		plain := startProc(t, "applier-plain", nil, "applier", "--target-dsn-file", dsnFile("plain", dst, "timeout=5s"), "--poll-interval", "50ms")
		e.waitFor("the plaintext applier to say what to set", time.Minute, func() (bool, string) {
			text := plain.logText()
			return strings.Contains(text, "add tls=true to the target DSN"), sandbox.Tail(text, 5)
		})

		for _, p := range []*proc{e.streamer, e.applier, coord, bad, plain} {
			require.NotContains(t, p.logText(), password, "%s logged the password", p.name)
		}
	})
}
