package probe

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/sandbox"
)

// checker asks one address for a service's health, as kubelet does.
func checker(t *testing.T, addr string) func(service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	client := healthpb.NewHealthClient(mustConn(t, addr))
	return func(service string) healthpb.HealthCheckResponse_ServingStatus {
		resp, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{Service: service})
		require.NoError(t, err, "check %q", service)
		return resp.GetStatus()
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := sandbox.FreePort()
	require.NoError(t, err)
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// TestLifecycle: live and not ready at start, ready when told, and everything
// NOT_SERVING (readiness can no longer be set back) once the context ends,
// while the port still answers; the main server's copy agrees.
func TestLifecycle(t *testing.T) {
	ctx, shutdown := context.WithCancel(context.Background())
	addr := freeAddr(t)
	s, err := Start(ctx, addr, zap.NewNop(), "rowlift.v1.Control")
	require.NoError(t, err)
	defer s.Close()
	mainAddr := freeAddr(t)
	lis, err := net.Listen("tcp", mainAddr)
	require.NoError(t, err)
	gs := grpc.NewServer()
	s.Register(gs)
	go gs.Serve(lis) //nolint:errcheck // stopped below
	defer gs.Stop()

	probe, onMain := checker(t, addr), checker(t, mainAddr)
	serving, notServing := healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING
	require.Equal(t, serving, probe(Liveness))
	require.Equal(t, notServing, probe(Readiness))
	require.Equal(t, notServing, onMain("rowlift.v1.Control"))

	s.SetReady(true)
	require.Equal(t, serving, probe(Readiness))
	require.Equal(t, serving, onMain("rowlift.v1.Control"))
	s.SetReady(false)
	require.Equal(t, notServing, probe(Readiness), "a role that stops doing its job is taken out of its Service")
	s.SetReady(true)

	shutdown()
	require.Eventually(t, func() bool { return probe(Liveness) == notServing }, 10*time.Second, 10*time.Millisecond, "shutdown turns liveness NOT_SERVING")
	s.SetReady(true)
	for _, svc := range []string{Liveness, Readiness} {
		require.Equal(t, notServing, probe(svc), svc)
	}
	require.Equal(t, notServing, onMain("rowlift.v1.Control"))

	_, err = healthpb.NewHealthClient(mustConn(t, addr)).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "rowlift.v1.Streamer"})
	require.Equal(t, codes.NotFound, status.Code(err), "a service the role does not have is unknown")
}

// TestBusyPortIsRefused: the error names the flag and the address.
func TestBusyPortIsRefused(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer lis.Close()
	_, err = Start(context.Background(), lis.Addr().String(), zap.NewNop())
	require.ErrorContains(t, err, "--health-listen "+lis.Addr().String())
	require.ErrorContains(t, err, "address already in use")
}

func mustConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn
}
