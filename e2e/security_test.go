package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/rowlift/rowlift/internal/metrics"
	"github.com/rowlift/rowlift/internal/metrics/metricstest"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/testcerts"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

const (
	e2eAdminToken = "admin-e2e-0123456789abcdef"
	e2eReadToken  = "read-e2e-0123456789abcdef"
)

// tlsArgs are the --tls-* flags of a process holding pair, trusting ca.
func tlsArgs(ca *testcerts.CA, pair testcerts.Pair) []string {
	return []string{"--tls-cert", pair.Cert, "--tls-key", pair.Key, "--tls-ca", ca.Cert}
}

// TestMutualTLSAndTokens runs every hop over mutual TLS and the Control API
// behind tokens, with every role serving metrics, as production runs them:
// the CLI with a certificate and an admin token moves a table, and each
// role's /metrics shows the workflow (rows copied, lag, bytes sent, the
// Control calls);
// without a certificate, without a token, with a read token or with a
// certificate mapped to the read role it is refused with a message that says
// what to fix; an applier whose certificate another
// CA issued cannot stream, and the workflow's status and the streamer's log
// say why.
func TestMutualTLSAndTokens(t *testing.T) {
	e := newEnv(t)
	e.sourceExec("CREATE DATABASE sec", "CREATE TABLE sec.t (id INT PRIMARY KEY, v VARCHAR(40))",
		"INSERT INTO sec.t WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 2000) SELECT i, LEFT(SHA2(i, 256), 40) FROM s")
	ca := testcerts.NewCA(t)
	streamerMetrics, applierMetrics, coordinatorMetrics := freeAddr(t), freeAddr(t), freeAddr(t)
	e.startStreamer(append(tlsArgs(ca, ca.Issue(t, "streamer")), "--metrics-listen", streamerMetrics)...)
	e.applier = startProc(t, "applier", e.hooks, append([]string{"applier", "--target-dsn", e.dst.DSN(""), "--poll-interval", "50ms",
		"--metrics-listen", applierMetrics}, tlsArgs(ca, ca.Issue(t, "applier"))...)...)

	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte("# e2e\nadmin "+e2eAdminToken+"\nread "+e2eReadToken+"\n"), 0o600))
	adminFile, readFile := filepath.Join(dir, "admin"), filepath.Join(dir, "read")
	require.NoError(t, os.WriteFile(adminFile, []byte(e2eAdminToken+"\n"), 0o600))
	require.NoError(t, os.WriteFile(readFile, []byte(e2eReadToken+"\n"), 0o600))
	port, err := sandbox.FreePort()
	require.NoError(t, err)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	coordinator := startProc(t, "coordinator", nil, append([]string{"coordinator", "--listen", addr, "--target", "main=" + e.dst.DSN(""),
		"--auth-token-file", tokens, "--auth-read-identity", "dashboard", "--metrics-listen", coordinatorMetrics},
		tlsArgs(ca, ca.Issue(t, "coordinator"))...)...)

	cli := ca.Issue(t, "cli")
	admin := newCLIAt(t, addr)
	admin.env = append(admin.env, "ROWLIFT_TLS_CERT="+cli.Cert, "ROWLIFT_TLS_KEY="+cli.Key, "ROWLIFT_TLS_CA="+ca.Cert, "ROWLIFT_TOKEN_FILE="+adminFile)
	e.waitFor("the coordinator to answer", 30*time.Second, func() (bool, string) {
		r := admin.run("workflow", "list")
		return r.code == 0, r.stderr
	})

	out := admin.ok("workflow", "create", "--name", "sec", "--source", "main="+e.streamerAddr, "--target", "main",
		"--source-database", "sec", "--table", "t", "--start")
	require.Equal(t, "created workflow sec: init\nstarted workflow sec: copying\nfollow it with: rowlift workflow watch sec\n", out)
	out = admin.ok("workflow", "watch", "sec", "--until", "running", "--interval", "200ms")
	require.Contains(t, out, "rows 2,000/2,000")
	require.Equal(t, 2000, count(t, e.dstDB, "sec.t"))

	t.Run("metrics", func(t *testing.T) {
		e.sourceExec("UPDATE sec.t SET v = 'changed' WHERE id <= 10")
		stream := map[string]string{"workflow": "sec", "source": "main", "target": "main"}
		scrape := func(addr string) metricstest.Scrape { return metricstest.Get(t, "http://"+addr+metrics.Path) }
		e.waitFor("the update to be replayed", 30*time.Second, func() (bool, string) {
			trx, _ := scrape(applierMetrics).Sum("rowlift_replay_transactions_total", stream)
			return trx >= 1, fmt.Sprintf("replayed transactions: %v", trx)
		})
		applier := scrape(applierMetrics)
		rows, _ := applier.Sum("rowlift_copy_rows_total", stream)
		require.Equal(t, 2000.0, rows)
		_, ok := applier.Sum("rowlift_replay_lag_seconds", stream)
		require.True(t, ok, "the stream's lag is a gauge of its own")
		sent, _ := scrape(streamerMetrics).Sum("rowlift_streamer_sent_bytes_total", map[string]string{"workflow": "sec"})
		require.Positive(t, sent)
		calls, _ := scrape(coordinatorMetrics).Sum("rpc_server_call_duration_seconds_count",
			map[string]string{"rpc_method": "rowlift.v1.Control/CreateWorkflow", "rpc_response_status_code": "OK"})
		require.Equal(t, 1.0, calls)
	})

	t.Run("no client certificate", func(t *testing.T) {
		c := newCLIAt(t, addr)
		c.env = append(c.env, "ROWLIFT_TLS_CA="+ca.Cert, "ROWLIFT_TOKEN_FILE="+adminFile)
		require.Equal(t, "rowlift: list workflows: cannot reach the coordinator at "+addr+": transport: authentication handshake failed: "+
			"the server requires a client certificate and this client has none: give it --tls-cert and --tls-key, "+
			"issued by the CA the server's --tls-ca names (Unavailable)\n", c.fails(1, "workflow", "list"))
		require.Contains(t, coordinator.logText(), "client didn't provide a certificate")
	})
	t.Run("plaintext", func(t *testing.T) {
		stderr := newCLIAt(t, addr).fails(1, "workflow", "list")
		require.Contains(t, stderr, "rowlift: list workflows: cannot reach the coordinator at "+addr+": error reading server preface: ")
		require.Contains(t, stderr, "; the server closed the connection before gRPC began: a server with --tls-cert refuses plaintext clients "+
			"(give this client --tls-ca)")
	})

	reader := newCLIAt(t, addr)
	reader.env = append(reader.env, "ROWLIFT_TLS_CERT="+cli.Cert, "ROWLIFT_TLS_KEY="+cli.Key, "ROWLIFT_TLS_CA="+ca.Cert)
	t.Run("certificate without token", func(t *testing.T) {
		require.Equal(t, "rowlift: list workflows: ListWorkflows needs credentials: send a bearer token from the coordinator's "+
			"--auth-token-file (rowlift workflow --token-file FILE), or a client certificate whose common name or DNS name the coordinator "+
			"maps with --auth-admin-identity or --auth-read-identity (this one's names, cli, localhost, are not mapped) (Unauthenticated)\n",
			reader.fails(3, "workflow", "list"))
	})
	reader.env = append(reader.env, "ROWLIFT_TOKEN_FILE="+readFile)
	t.Run("read token", func(t *testing.T) {
		require.Regexp(t, `^NAME +PHASE .*\nsec +(running|catching up) +100\.0% `, reader.ok("workflow", "list"))
		require.Contains(t, reader.ok("workflow", "show", "sec"), "workflow sec   running")
		require.Equal(t, "rowlift: create workflow other: CreateWorkflow needs the admin role, and this caller has the read role "+
			"(its token has the read role): use credentials with the admin role (PermissionDenied)\n",
			reader.fails(3, "workflow", "create", "--name", "other", "--source", "main="+e.streamerAddr, "--target", "main",
				"--source-database", "sec", "--table", "t"))
		require.Equal(t, "rowlift: stop workflow sec: StopWorkflow needs the admin role, and this caller has the read role "+
			"(its token has the read role): use credentials with the admin role (PermissionDenied)\n", reader.fails(3, "workflow", "stop", "sec"))
	})
	t.Run("read identity", func(t *testing.T) {
		dashboard := ca.Issue(t, "dashboard")
		c := newCLIAt(t, addr)
		c.env = append(c.env, "ROWLIFT_TLS_CERT="+dashboard.Cert, "ROWLIFT_TLS_KEY="+dashboard.Key, "ROWLIFT_TLS_CA="+ca.Cert)
		require.Contains(t, c.ok("workflow", "show", "sec"), "workflow sec   running")
		require.Equal(t, "rowlift: delete workflow sec: DeleteWorkflow needs the admin role, and this caller has the read role "+
			"(its client certificate dashboard has the read role): use credentials with the admin role (PermissionDenied)\n",
			c.fails(3, "workflow", "delete", "sec"))
	})
	log := coordinator.logText()
	require.Contains(t, log, `"msg":"refused a Control API call","method":"/rowlift.v1.Control/CreateWorkflow","code":"PermissionDenied"`)
	require.NotContains(t, log, e2eReadToken)
	require.NotContains(t, log, e2eAdminToken)

	t.Run("plaintext coordinator", func(t *testing.T) {
		plain := newCLIAt(t, startPlainCoordinator(t, e))
		stderr := plain.fails(1, "workflow", "create", "--name", "plain", "--source", "main="+e.streamerAddr, "--target", "main",
			"--source-database", "sec", "--table", "t")
		require.Contains(t, stderr, "rowlift: create workflow plain: source main (streamer "+e.streamerAddr+"): ")
		require.Contains(t, stderr, "; the server closed the connection before gRPC began: a server with --tls-cert refuses plaintext clients "+
			"(give this client --tls-ca)")
		require.Contains(t, e.streamer.logText(), "tls: first record does not look like a TLS handshake")
	})

	stranger := testcerts.NewCA(t).Issue(t, "applier")
	t.Run("applier from another CA", func(t *testing.T) {
		e.applier.stop()
		// Under the test, not this subtest: it runs on into the next one.
		e.applier = startProc(e.t, "applier-stranger", e.hooks, "applier", "--target-dsn", e.dst.DSN(""), "--poll-interval", "50ms",
			"--tls-cert", stranger.Cert, "--tls-key", stranger.Key, "--tls-ca", ca.Cert)
		want := "the server accepts client certificates issued by CN=rowlift test CA "
		var w rowliftv1.Workflow
		e.waitFor("the stream to say why it cannot connect", 60*time.Second, func() (bool, string) {
			out := reader.ok("workflow", "show", "sec", "--output", "json")
			require.NoError(t, protojson.Unmarshal([]byte(out), &w))
			for _, s := range w.GetStatus().GetStreams() {
				if strings.Contains(s.GetRetrying(), want) {
					return true, ""
				}
			}
			return false, out
		})
		retrying := w.GetStatus().GetStreams()[0].GetRetrying()
		require.Contains(t, retrying, "streamer "+e.streamerAddr+" (source main): ")
		require.Contains(t, retrying, "and this client's --tls-cert "+stranger.Cert+" is issued by CN=rowlift test CA ")
		require.Contains(t, retrying, ": give it a certificate issued by the CA the server's --tls-ca names")
		require.Contains(t, e.applier.logText(), want)
		e.waitFor("the streamer to log the refused handshake", 30*time.Second, func() (bool, string) {
			log := e.streamer.logText()
			return strings.Contains(log, `"msg":"refused a TLS handshake","peer":"127.0.0.1:`) &&
				strings.Contains(log, "tls: failed to verify certificate: x509: certificate signed by unknown authority"), sandbox.Tail(log, 5)
		})
	})

	// The files rotate in place under the running applier, as a renewed
	// Kubernetes Secret does: its next handshake presents the new certificate.
	t.Run("rotated applier certificate", func(t *testing.T) {
		renewed := ca.Issue(t, "applier-renewed")
		for from, to := range map[string]string{renewed.Cert: stranger.Cert, renewed.Key: stranger.Key} {
			b, err := os.ReadFile(from)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(to, b, 0o600))
		}
		e.sourceExec("INSERT INTO sec.t VALUES (2001, 'after the rotation')")
		e.waitFor("the row written after the rotation", 90*time.Second, func() (bool, string) {
			n := count(t, e.dstDB, "sec.t")
			return n == 2001, strconv.Itoa(n) + " rows"
		})
		require.Contains(t, e.applier.logText(), `"msg":"TLS files reloaded"`)
	})
}

// startPlainCoordinator starts a coordinator for e's target with neither TLS
// nor authorization, as before either existed, and returns its address once
// it answers.
func startPlainCoordinator(t *testing.T, e *env) string {
	port, err := sandbox.FreePort()
	require.NoError(t, err)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	p := startProc(t, "coordinator-plain", nil, "coordinator", "--listen", addr, "--target", "main="+e.dst.DSN(""))
	c := newCLIAt(t, addr)
	e.waitFor("the plaintext coordinator to answer", 30*time.Second, func() (bool, string) {
		r := c.run("workflow", "list")
		return r.code == 0, r.stderr
	})
	require.NotContains(t, p.logText(), "the Control API is open", "no warning on loopback")
	return addr
}
