package grpctls

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/grpcopt"
	"github.com/rowlift/rowlift/internal/testcerts"
	"github.com/rowlift/rowlift/internal/tlsfiles"
)

// serve serves gRPC health with creds (nil: plaintext) and returns its address
// and the log of the server's credentials.
func serve(t *testing.T, f tlsfiles.Files) (string, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.InfoLevel)
	creds, err := Server(f, zap.New(core))
	require.NoError(t, err)
	gs := grpc.NewServer(grpcopt.ServerOptions(creds)...)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return lis.Addr().String(), logs
}

// check calls health Check on addr with the client files f and returns the
// error's message ("" on success).
func check(t *testing.T, addr string, f tlsfiles.Files) string {
	t.Helper()
	creds, err := Client(f, zap.NewNop())
	require.NoError(t, err)
	conn, err := grpc.NewClient(addr, grpcopt.DialOptions(creds)...)
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		return ""
	}
	return status.Convert(err).Message()
}

// TestRefusals: every way a client can be turned away is explained to it, and
// the server logs the refusal with the peer and the reason.
func TestRefusals(t *testing.T) {
	ca, other := testcerts.NewCA(t), testcerts.NewCA(t)
	s, c, stranger := ca.Issue(t, "server"), ca.Issue(t, "client"), other.Issue(t, "stranger")
	mtls, mtlsLog := serve(t, tlsfiles.Files{Cert: s.Cert, Key: s.Key, CA: ca.Cert})
	plain, _ := serve(t, tlsfiles.Files{})

	require.Empty(t, check(t, mtls, tlsfiles.Files{Cert: c.Cert, Key: c.Key, CA: ca.Cert}))
	require.Empty(t, check(t, plain, tlsfiles.Files{}))
	require.Zero(t, mtlsLog.Len())

	for _, tc := range []struct {
		name   string
		addr   string
		client tlsfiles.Files
		hint   string
		logged string // what the server logs; "" for the plaintext server, which has no TLS to log
	}{
		{"no client certificate", mtls, tlsfiles.Files{CA: ca.Cert},
			"the server requires a client certificate and this client has none: give it --tls-cert and --tls-key, issued by the CA the server's --tls-ca names",
			"client didn't provide a certificate"},
		{"client certificate from another CA", mtls, tlsfiles.Files{Cert: stranger.Cert, Key: stranger.Key, CA: ca.Cert},
			"the server accepts client certificates issued by CN=" + subject(t, ca.Cert) + " only, and this client's --tls-cert " + stranger.Cert +
				" is issued by CN=" + subject(t, other.Cert) + ": give it a certificate issued by the CA the server's --tls-ca names",
			"certificate signed by unknown authority"},
		{"server certificate from another CA", mtls, tlsfiles.Files{Cert: c.Cert, Key: c.Key, CA: other.Cert},
			"this client does not trust the server's certificate: give --tls-ca the CA that issued the server's --tls-cert", "remote error: tls: bad certificate"},
		{"plaintext client", mtls, tlsfiles.Files{},
			"the server closed the connection before gRPC began: a server with --tls-cert refuses plaintext clients (give this client --tls-ca)",
			"first record does not look like a TLS handshake"},
		{"TLS client, plaintext server", plain, tlsfiles.Files{Cert: c.Cert, Key: c.Key, CA: ca.Cert},
			"the server does not serve TLS: start it with --tls-cert and --tls-key, or drop the --tls-* flags from this client", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := mtlsLog.Len()
			msg := check(t, tc.addr, tc.client)
			require.NotEmpty(t, msg)
			require.Contains(t, Explain(msg), tc.hint)
			if tc.logged == "" {
				return
			}
			// Earlier clients' refusals may still arrive: find this one's.
			require.Eventually(t, func() bool {
				for _, e := range mtlsLog.All()[before:] {
					if strings.Contains(e.ContextMap()["error"].(string), tc.logged) {
						require.Equal(t, "refused a TLS handshake", e.Message)
						require.Contains(t, e.ContextMap()["peer"], "127.0.0.1:")
						return true
					}
				}
				return false
			}, 10*time.Second, 10*time.Millisecond)
		})
	}
}

// subject is the common name of the certificate in the PEM file path.
func subject(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	block, _ := pem.Decode(b)
	c, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	return c.Subject.CommonName
}

// TestLimiter: a burst is logged, then only counted until the window passes;
// the next line logged carries the count.
func TestLimiter(t *testing.T) {
	l := &limiter{}
	t0 := time.Unix(1000, 0)
	for i := range logBurst {
		ok, n := l.allow(t0.Add(time.Duration(i) * time.Millisecond))
		require.True(t, ok)
		require.Zero(t, n)
	}
	for range 3 {
		ok, _ := l.allow(t0.Add(time.Second))
		require.False(t, ok)
	}
	ok, n := l.allow(t0.Add(logWindow - time.Nanosecond))
	require.False(t, ok, "still inside the window")
	require.Zero(t, n)
	ok, n = l.allow(t0.Add(logWindow))
	require.True(t, ok)
	require.Equal(t, 4, n, "the refusals not logged")
	ok, n = l.allow(t0.Add(logWindow + time.Second))
	require.True(t, ok)
	require.Zero(t, n)
}

// TestExplain: each hint is given for its text; other errors get none.
func TestExplain(t *testing.T) {
	for _, h := range hints {
		require.Equal(t, "x: "+h.text+"; "+h.hint, Explain("x: "+h.text), h.text)
		require.True(t, IsTLS("x: "+h.text), h.text)
	}
	msg := "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"
	require.Equal(t, msg, Explain(msg))
	require.False(t, IsTLS(msg))
	require.Equal(t, msg, Explain("connection error: desc = "+strconv.Quote(msg)), "grpc-go's quoting goes")
	require.Equal(t, `transport: authentication handshake failed: the server says "no"`,
		Explain(`connection error: desc = "transport: authentication handshake failed: the server says \"no\""`))
	require.Equal(t, `connection error: desc = "cut`, Explain(`connection error: desc = "cut`), "what does not unquote stays")
}

// TestClone: cloned credentials keep logging and reloading, which the
// embedded TLS credentials' own Clone would drop.
func TestClone(t *testing.T) {
	ca := testcerts.NewCA(t)
	s := ca.Issue(t, "server")
	sc, err := Server(tlsfiles.Files{Cert: s.Cert, Key: s.Key}, zap.NewNop())
	require.NoError(t, err)
	require.IsType(t, &serverCreds{}, sc.Clone())
	cc, err := Client(tlsfiles.Files{CA: ca.Cert}, zap.NewNop())
	require.NoError(t, err)
	require.IsType(t, &clientCreds{}, cc.Clone())
	var _ credentials.TransportCredentials = cc
}
