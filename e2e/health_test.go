package e2e

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/nice/nicetest"
	"github.com/rowlift/rowlift/internal/probe"
)

// healthOf asks addr for a service's status over plaintext gRPC, as kubelet's
// gRPC probe does: "SERVING", "NOT_SERVING", or the error's code and message.
func healthOf(t *testing.T, addr, service string) string {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return status.Code(err).String() + ": " + status.Convert(err).Message()
	}
	return resp.GetStatus().String()
}

// waitHealth waits until addr reports want for service.
func (e *env) waitHealth(what, addr, service, want string) {
	e.t.Helper()
	e.waitFor(what, 30*time.Second, func() (bool, string) {
		got := healthOf(e.t, addr, service)
		return got == want, got
	})
}

// waitGone waits until a stopped role's health port no longer says SERVING.
func (e *env) waitGone(what, addr string) {
	e.t.Helper()
	e.waitFor(what, 30*time.Second, func() (bool, string) {
		got := healthOf(e.t, addr, probe.Liveness)
		return got == "NOT_SERVING" || strings.HasPrefix(got, "Unavailable"), got
	})
}

// TestHealthProbes: each role started with --health-listen answers kubelet's
// gRPC probes on a plaintext port: live while it runs, ready as documented in
// the flag's help (streamer and coordinator once they serve; an applier while
// it holds or waits for the target's lock, not while the target is down), and
// no longer SERVING once stopped.
func TestHealthProbes(t *testing.T) {
	e := newEnv(t)

	streamerHealth := freeAddr(t)
	e.startStreamer("--health-listen", streamerHealth)
	e.waitHealth("the streamer to be ready", streamerHealth, probe.Readiness, "SERVING")
	require.Equal(t, "SERVING", healthOf(t, streamerHealth, probe.Liveness))

	applierHealth := freeAddr(t)
	first := startProc(t, "applier", nil, "applier", "--target-dsn", e.dst.DSN(""), "--poll-interval", "50ms",
		"--health-listen", applierHealth)
	e.waitHealth("the applier to be ready", applierHealth, probe.Readiness, "SERVING")
	require.Contains(t, first.logText(), "holding the applier lock")

	standbyHealth := freeAddr(t)
	second := startProc(t, "applier-2", nil, "applier", "--target-dsn", e.dst.DSN(""), "--poll-interval", "50ms",
		"--health-listen", standbyHealth)
	e.waitFor("the second applier to stand by", 30*time.Second, func() (bool, string) {
		return strings.Contains(second.logText(), "standing by"), second.logText()
	})
	require.Equal(t, "SERVING", healthOf(t, standbyHealth, probe.Readiness), "a stand-by applier is where it should be")

	require.NoError(t, e.dst.Kill())
	e.waitHealth("the applier to be unready while its target is down", applierHealth, probe.Readiness, "NOT_SERVING")
	require.Equal(t, "SERVING", healthOf(t, applierHealth, probe.Liveness), "a restart would not bring the target back")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, e.dst.Restart(ctx))
	e.waitFor("an applier to be ready again once the target is back", 30*time.Second, func() (bool, string) {
		a, b := healthOf(t, applierHealth, probe.Readiness), healthOf(t, standbyHealth, probe.Readiness)
		return a == "SERVING" && b == "SERVING", "first " + a + ", second " + b
	})

	coordinatorHealth, control := freeAddr(t), freeAddr(t)
	coordinator := startProc(t, "coordinator", nil, "coordinator", "--listen", control, "--target", "main="+e.dst.DSN(""),
		"--health-listen", coordinatorHealth)
	e.waitHealth("the coordinator to be ready", coordinatorHealth, probe.Readiness, "SERVING")
	require.Equal(t, "SERVING", healthOf(t, control, "rowlift.v1.Control"), "the main port answers the same health")
	require.Equal(t, "SERVING", healthOf(t, control, probe.Readiness))

	e.streamer.stop()
	e.waitGone("the stopped streamer's health", streamerHealth)
	first.stop()
	e.waitGone("the stopped applier's health", applierHealth)
	coordinator.stop()
	e.waitGone("the stopped coordinator's health", coordinatorHealth)
	require.Equal(t, "SERVING", healthOf(t, standbyHealth, probe.Liveness), "only the stopped roles went away")
}

// TestHealthListenBusy: a --health-listen address already taken stops the
// role at start with the flag and the address in the error.
func TestHealthListenBusy(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer lis.Close()
	p := startProc(t, "streamer", nil, "streamer", "--listen", freeAddr(t), "--source-dsn", "root@tcp(127.0.0.1:1)/",
		"--health-listen", lis.Addr().String())
	p.exited(30 * time.Second)
	require.NotZero(t, p.cmd.ProcessState.ExitCode())
	require.Contains(t, p.logText(), "--health-listen "+lis.Addr().String())
	require.Contains(t, p.logText(), "address already in use")
}

// TestRolesYieldTheCPU: the streamer and the applier run every thread at the
// lowest CPU priority unless --nice says otherwise, and refuse a value that is
// not one, saying which are.
func TestRolesYieldTheCPU(t *testing.T) {
	roles := map[string][]string{
		"streamer": {"streamer", "--listen", freeAddr(t), "--source-dsn", "root@tcp(127.0.0.1:1)/"},
		"applier":  {"applier", "--target-dsn", "root@tcp(127.0.0.1:1)/"},
	}
	for name, args := range roles {
		for _, c := range []struct {
			flags []string
			want  int
		}{{nil, 19}, {[]string{"--nice", "5"}, 5}, {[]string{"--nice", "0"}, 0}} {
			p := startProc(t, name, nil, append(slices.Clone(args), c.flags...)...)
			// Running: the role has set its priority before it logs this.
			require.Eventually(t, func() bool {
				return strings.Contains(p.logText(), "running") || strings.Contains(p.logText(), "serving")
			},
				30*time.Second, 20*time.Millisecond, "%s %v", name, c.flags)
			for tid, n := range nicetest.Threads(t, p.cmd.Process.Pid) {
				require.Equal(t, c.want, n, "%s %v: thread %d", name, c.flags, tid)
			}
			p.stop()
		}
		p := startProc(t, name, nil, append(slices.Clone(args), "--nice", "-5")...)
		p.exited(30 * time.Second)
		require.NotZero(t, p.cmd.ProcessState.ExitCode())
		require.Contains(t, p.logText(), "--nice -5 is out of range: 0 (normal priority) to 19 (lowest); the default is 19", name)
	}
}
