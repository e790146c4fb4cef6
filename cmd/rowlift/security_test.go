package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/coordinator/authz"
	"github.com/rowlift/rowlift/internal/grpcopt"
	"github.com/rowlift/rowlift/internal/grpctls"
	"github.com/rowlift/rowlift/internal/testcerts"
	"github.com/rowlift/rowlift/internal/tlsfiles"
)

const adminToken = "admin-token-0123456789abcdef"

// writeFile writes body to a new file in a temp dir and returns its path.
func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

// TestCLIOverMutualTLSWithToken: the CLI reaches a coordinator that wants a
// client certificate and a token only with both, and says what is missing.
func TestCLIOverMutualTLSWithToken(t *testing.T) {
	isolate(t)
	ca := testcerts.NewCA(t)
	srv, cli := ca.Issue(t, "coordinator"), ca.Issue(t, "cli")
	creds, err := grpctls.Server(tlsfiles.Files{Cert: srv.Cert, Key: srv.Key, CA: ca.Cert}, zap.NewNop())
	require.NoError(t, err)
	a, err := authz.New(authz.Config{TokenFile: writeFile(t, "tokens", "admin "+adminToken+"\n")}, zap.NewNop())
	require.NoError(t, err)
	addr := startFake(t, &fakeControl{}, append(grpcopt.ServerOptions(creds), a.ServerOptions()...)...)
	token := writeFile(t, "token", adminToken+"\n")
	withCert := []string{"--coordinator", addr, "--tls-cert", cli.Cert, "--tls-key", cli.Key, "--tls-ca", ca.Cert}

	_, err = runCLI(t, append([]string{"workflow", "show", "w", "--token-file", token}, withCert...)...)
	require.NoError(t, err)

	_, err = runCLI(t, "workflow", "show", "w", "--coordinator", addr, "--tls-ca", ca.Cert, "--token-file", token)
	require.EqualError(t, err, "show workflow w: cannot reach the coordinator at "+addr+": transport: authentication handshake failed: "+
		"the server requires a client certificate and this client has none: give it --tls-cert and --tls-key, "+
		"issued by the CA the server's --tls-ca names (Unavailable)")
	require.Equal(t, 1, exitCode(err))

	_, err = runCLI(t, "workflow", "show", "w", "--coordinator", addr)
	require.ErrorContains(t, err, "show workflow w: cannot reach the coordinator at "+addr+": error reading server preface: ")
	require.ErrorContains(t, err, "the server closed the connection before gRPC began: a server with --tls-cert refuses plaintext clients (give this client --tls-ca)")

	_, err = runCLI(t, append([]string{"workflow", "show", "w"}, withCert...)...)
	require.EqualError(t, err, "show workflow w: GetWorkflow needs credentials: send a bearer token from the coordinator's --auth-token-file "+
		"(rowlift workflow --token-file FILE) (Unauthenticated)")
	require.Equal(t, 3, exitCode(err), "refused credentials have an exit code of their own")
}

func TestRefusedCredentialsExitThree(t *testing.T) {
	isolate(t)
	for code, want := range map[codes.Code]int{codes.Unauthenticated: 3, codes.PermissionDenied: 3, codes.Unavailable: 1, codes.Internal: 1} {
		addr := startFake(t, &fakeControl{fail: status.Error(code, "because")})
		_, err := runCLI(t, "workflow", "start", "w", "--coordinator", addr)
		require.EqualError(t, err, "start workflow w: because ("+code.String()+")")
		require.Equal(t, want, exitCode(err), code.String())
	}
}

// TestSecurityFlagErrors: flags that cannot work are usage errors naming the
// flag, before anything is sent.
func TestSecurityFlagErrors(t *testing.T) {
	isolate(t)
	f := &fakeControl{}
	addr := startFake(t, f)
	ca := testcerts.NewCA(t)
	cli := ca.Issue(t, "cli")
	token := writeFile(t, "token", adminToken)
	port := addr[strings.LastIndex(addr, ":"):]
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", cli.Cert}, "--tls-cert " + cli.Cert + " needs --tls-key"},
		{[]string{"--tls-key", cli.Key, "--tls-ca", ca.Cert}, "--tls-key " + cli.Key + " needs --tls-cert"},
		{[]string{"--tls-ca", cli.Key}, "--tls-ca " + cli.Key + " holds no PEM certificate"},
		{[]string{"--token-file", token + ".missing"}, "--token-file: open " + token + ".missing: no such file or directory"},
		{[]string{"--coordinator", "0.0.0.0" + port, "--token-file", token},
			"refusing to send --token-file's token in plaintext to a coordinator that is not on this host: " +
				"give --tls-ca (the coordinator serving TLS), or --allow-plaintext-token to send it anyway"},
	} {
		_, err := runCLI(t, append([]string{"workflow", "show", "w", "--coordinator", addr}, tc.args...)...)
		require.ErrorContains(t, err, tc.want, "%q", tc.args)
		require.Equal(t, 2, exitCode(err), "%q", tc.args)
	}
	require.Empty(t, f.calls)

	_, err := runCLI(t, "workflow", "show", "w", "--coordinator", "0.0.0.0"+port, "--token-file", token, "--allow-plaintext-token")
	require.NoError(t, err, "told to, the CLI sends the token in plaintext")
}

// TestRoleSecurityFlagErrors: each role refuses to start on TLS and auth
// flags that cannot work, and says which flag to fix.
func TestRoleSecurityFlagErrors(t *testing.T) {
	ca := testcerts.NewCA(t)
	p := ca.Issue(t, "p")
	dsn := "root@tcp(127.0.0.1:1)/"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"streamer", "--source-dsn", dsn, "--tls-cert", p.Cert}, "--tls-cert " + p.Cert + " needs --tls-key"},
		{[]string{"streamer", "--source-dsn", dsn, "--tls-ca", ca.Cert}, "--tls-ca needs --tls-cert and --tls-key: a server must present a certificate"},
		{[]string{"applier", "--target-dsn", dsn, "--tls-key", p.Key}, "--tls-key " + p.Key + " needs --tls-cert"},
		{[]string{"applier", "--target-dsn", dsn, "--tls-cert", p.Cert, "--tls-key", ca.Cert}, "--tls-cert " + p.Cert + " with --tls-key " + ca.Cert},
		{[]string{"coordinator", "--target", "main=" + dsn, "--auth-admin-identity", "ops"},
			"--auth-admin-identity and --auth-read-identity need --tls-ca: only a client certificate the coordinator verified has a name to map"},
		{[]string{"coordinator", "--target", "main=" + dsn, "--auth-token-file", writeFile(t, "tokens", "admin short\n")},
			"line 1: the token is 5 characters, fewer than 16"},
		{[]string{"coordinator", "--target", "main=" + dsn, "--tls-cert", p.Cert, "--tls-key", p.Key, "--tls-ca", ca.Cert,
			"--auth-admin-identity", "ops", "--auth-read-identity", "ops"}, "--auth-read-identity ops: the name already has the admin role"},
	} {
		_, err := runCLI(t, tc.args...)
		require.ErrorContains(t, err, tc.want, "%q", tc.args)
	}
}
