package authz

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/grpcopt"
	"github.com/rowlift/rowlift/internal/grpctls"
	"github.com/rowlift/rowlift/internal/testcerts"
	"github.com/rowlift/rowlift/internal/tlsfiles"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// TestInterceptors serves Control (every method unimplemented: a call the
// interceptors let through answers Unimplemented) and health over mutual TLS
// with a token file and identities, and calls it as real clients do.
func TestInterceptors(t *testing.T) {
	ca := testcerts.NewCA(t)
	srvPair, ops, laptop := ca.Issue(t, "coordinator"), ca.Issue(t, "ops"), ca.Issue(t, "laptop")
	tokenFile := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(tokenFile, []byte("admin "+adminToken+"\nread "+readToken+"\n"), 0o600))
	core, logs := observer.New(zapcore.InfoLevel)
	a, err := New(Config{TokenFile: tokenFile, AdminIdentities: []string{"ops"}}, zap.New(core))
	require.NoError(t, err)
	creds, err := grpctls.Server(tlsfiles.Files{Cert: srvPair.Cert, Key: srvPair.Key, CA: ca.Cert}, zap.NewNop())
	require.NoError(t, err)
	gs := grpc.NewServer(append(grpcopt.ServerOptions(creds), a.ServerOptions()...)...)
	rowliftv1.RegisterControlServer(gs, rowliftv1.UnimplementedControlServer{})
	healthpb.RegisterHealthServer(gs, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)

	// dial connects with the client certificate pair and, when token is not
	// empty, a bearer token.
	dial := func(pair testcerts.Pair, token string) *grpc.ClientConn {
		c, err := grpctls.Client(tlsfiles.Files{Cert: pair.Cert, Key: pair.Key, CA: ca.Cert}, zap.NewNop())
		require.NoError(t, err)
		opts := grpcopt.DialOptions(c)
		if token != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(Bearer{token: token}))
		}
		conn, err := grpc.NewClient(lis.Addr().String(), opts...)
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list := func(conn *grpc.ClientConn) error {
		_, err := rowliftv1.NewControlClient(conn).ListWorkflows(ctx, &rowliftv1.ListWorkflowsRequest{})
		return err
	}
	create := func(conn *grpc.ClientConn) error {
		_, err := rowliftv1.NewControlClient(conn).CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{})
		return err
	}
	watch := func(conn *grpc.ClientConn) error {
		s, err := rowliftv1.NewControlClient(conn).WatchWorkflow(ctx, &rowliftv1.WatchWorkflowRequest{})
		if err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}

	anon := dial(laptop, "")
	_, err = healthpb.NewHealthClient(anon).Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err, "health stays open")
	for _, call := range []func(*grpc.ClientConn) error{list, create, watch} {
		err := call(anon)
		require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
		require.Contains(t, status.Convert(err).Message(), "(this one's names, laptop, localhost, are not mapped)")
	}
	refused := logs.FilterMessage("refused a Control API call").All()
	require.Len(t, refused, 3)
	require.Equal(t, "/rowlift.v1.Control/ListWorkflows", refused[0].ContextMap()["method"])
	require.Equal(t, "Unauthenticated", refused[0].ContextMap()["code"])
	require.Contains(t, refused[0].ContextMap()["peer"], "127.0.0.1:")

	reader := dial(laptop, readToken)
	require.Equal(t, codes.Unimplemented, status.Code(list(reader)))
	require.Equal(t, codes.Unimplemented, status.Code(watch(reader)), "streams are checked too")
	err = create(reader)
	require.Equal(t, codes.PermissionDenied, status.Code(err))
	require.Equal(t, "CreateWorkflow needs the admin role, and this caller has the read role (its token has the read role): "+
		"use credentials with the admin role", status.Convert(err).Message())

	admin := dial(ops, "")
	require.Equal(t, codes.Unimplemented, status.Code(create(admin)), "the ops certificate has the admin role")
	require.Equal(t, codes.Unimplemented, status.Code(create(dial(laptop, adminToken))))

	for _, e := range logs.All() {
		for _, v := range e.ContextMap() {
			require.NotContains(t, v, readToken)
			require.NotContains(t, v, adminToken)
		}
	}

	// The token file is read again when it changes: the read token is gone.
	require.NoError(t, os.WriteFile(tokenFile, []byte("admin "+adminToken+"\n"), 0o600))
	err = list(reader)
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	require.Contains(t, status.Convert(err).Message(), "the bearer token is not one the coordinator accepts")
	// A broken file keeps the last good tokens.
	require.NoError(t, os.WriteFile(tokenFile, []byte("admin short\n"), 0o600))
	require.Equal(t, codes.Unimplemented, status.Code(create(dial(laptop, adminToken))))
	require.Equal(t, 1, logs.FilterMessage("token file changed but cannot be loaded; keeping the previous ones until they are fixed").Len())
}

// TestMalformedHeader: an authorization header that is no bearer token is
// refused with what it must look like.
func TestMalformedHeader(t *testing.T) {
	a, err := New(Config{AdminIdentities: []string{"ops"}}, zap.NewNop())
	require.NoError(t, err)
	gs := grpc.NewServer(append(grpcopt.ServerOptions(nil), a.ServerOptions()...)...)
	rowliftv1.RegisterControlServer(gs, rowliftv1.UnimplementedControlServer{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), append(grpcopt.DialOptions(nil), grpc.WithPerRPCCredentials(basic{}))...)
	require.NoError(t, err)
	defer conn.Close()
	_, err = rowliftv1.NewControlClient(conn).GetWorkflow(t.Context(), &rowliftv1.WorkflowRef{})
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	require.Equal(t, `the authorization header must be one "Bearer TOKEN"`, status.Convert(err).Message())
}

// basic sends HTTP basic credentials, which the coordinator does not take.
type basic struct{}

func (basic) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Basic dXNlcjpwYXNz"}, nil
}
func (basic) RequireTransportSecurity() bool { return false }

var _ credentials.PerRPCCredentials = basic{}

func TestNewRefuses(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{AdminIdentities: []string{"ops"}, ReadIdentities: []string{"ops"}},
			"--auth-read-identity ops: the name already has the admin role: give each identity one role"},
		{Config{ReadIdentities: []string{""}}, "--auth-read-identity: empty name"},
		{Config{TokenFile: "/nonexistent/tokens"}, "--auth-token-file: open /nonexistent/tokens: no such file or directory"},
	} {
		_, err := New(tc.c, zap.NewNop())
		require.ErrorContains(t, err, tc.want)
	}
	bad := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(bad, []byte("root "+adminToken+"\n"), 0o600))
	_, err := New(Config{TokenFile: bad}, zap.NewNop())
	require.EqualError(t, err, "--auth-token-file "+bad+`: line 1: role "root": want admin or read`)
}
