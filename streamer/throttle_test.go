package streamer

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/dbconn"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

func TestTargetThrottlesExpireUnlessRefreshed(t *testing.T) {
	now := time.Unix(1000, 0)
	b := newTargetThrottles()
	b.now = func() time.Time { return now }

	require.Equal(t, "", b.set("wf", "", "target Threads_running 60 > 50", nil, 3*time.Second))
	reason, expired := b.get("wf")
	require.Equal(t, "target Threads_running 60 > 50", reason)
	require.False(t, expired)
	require.Equal(t, "", mustGet(b, "other"), "reasons are per workflow")

	now = now.Add(2 * time.Second)
	require.Equal(t, "target Threads_running 60 > 50", b.set("wf", "", "target Threads_running 70 > 50", nil, 3*time.Second), "a refresh")
	now = now.Add(2 * time.Second)
	require.Equal(t, "target Threads_running 70 > 50", mustGet(b, "wf"), "the refresh moved the expiry")

	now = now.Add(time.Second)
	reason, expired = b.get("wf")
	require.Equal(t, "", reason)
	require.True(t, expired, "not refreshed within its TTL")
	reason, expired = b.get("wf")
	require.Equal(t, "", reason)
	require.False(t, expired, "an expiry is reported once")

	b.set("wf", "", "x", nil, time.Minute)
	require.Equal(t, "x", b.set("wf", "", "", nil, time.Minute))
	require.Equal(t, "", mustGet(b, "wf"), "cleared")
	require.Empty(t, b.byWorkflow)
}

func mustGet(b *targetThrottles, workflow string) string {
	reason, _ := b.get(workflow)
	return reason
}

func TestThrottleRPC(t *testing.T) {
	s := &Server{log: zap.NewNop(), targets: newTargetThrottles()}
	ctx := context.Background()
	_, err := s.Throttle(ctx, &rowliftv1.ThrottleRequest{Reason: "x"})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	_, err = s.Throttle(ctx, &rowliftv1.ThrottleRequest{Workflow: "wf", AppliedPosition: "not a position"})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.ErrorContains(t, err, "throttle request's applied position")
	require.Empty(t, s.targets.byWorkflow, "nothing recorded")

	_, err = s.Throttle(ctx, &rowliftv1.ThrottleRequest{Workflow: "wf", Reason: "target lag 30s > 10s"})
	require.NoError(t, err)
	require.Equal(t, "target lag 30s > 10s", mustGet(s.targets, "wf"))
	require.WithinDuration(t, time.Now().Add(defaultThrottleTTL), s.targets.byWorkflow["wf"][""].expires, time.Minute, "zero TTL means the default")

	_, err = s.Throttle(ctx, &rowliftv1.ThrottleRequest{Workflow: "wf", Reason: "y", TtlMs: (24 * time.Hour).Milliseconds()})
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(maxThrottleTTL), s.targets.byWorkflow["wf"][""].expires, time.Minute, "a TTL is capped")

	_, err = s.Throttle(ctx, &rowliftv1.ThrottleRequest{Workflow: "wf"})
	require.NoError(t, err)
	require.Equal(t, "", mustGet(s.targets, "wf"))
}

// TestCopyGateWaitsWhileTheTargetAsks: a row streamer waits at the gate while
// the target's reason holds, the gate reports the reason only while one waits,
// and the wait ends by itself once the reason is cleared.
func TestCopyGateWaitsWhileTheTargetAsks(t *testing.T) {
	targets := newTargetThrottles()
	g := &copyGate{targets: targets, workflow: "wf", interval: 5 * time.Millisecond, log: zap.NewNop()}
	ctx := context.Background()

	require.NoError(t, g.wait(ctx), "nothing asks to pause")
	require.Equal(t, "", g.throttled())

	targets.set("wf", "", "target Threads_running 60 > 50", nil, time.Minute)
	require.Equal(t, "", g.throttled(), "a reason shows only while a copy waits on it")
	done := make(chan error, 1)
	go func() { done <- g.wait(ctx) }()
	require.Eventually(t, func() bool { return g.throttled() == "target Threads_running 60 > 50" }, 10*time.Second, time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("the gate let the copy through while throttled: %v", err)
	default:
	}

	targets.set("wf", "", "", nil, 0)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the copy did not resume once the reason was cleared")
	}
	require.Equal(t, "", g.throttled(), "nothing waits any more")

	// A waiting copy ends with its stream.
	targets.set("wf", "", "x", nil, time.Minute)
	cctx, cancel := context.WithCancel(ctx)
	go func() { done <- g.wait(cctx) }()
	require.Eventually(t, func() bool { return g.throttled() == "x" }, 10*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Equal(t, "", g.throttled())

	var none *copyGate
	require.NoError(t, none.wait(ctx), "a stream without a gate never waits")
	require.Equal(t, "", none.throttled())
}

// TestHeartbeatsCarryTheThrottleReason: at idle a heartbeat carries the
// position and the reason; with a chunk in flight it carries only the reason
// (the target must not advance past what it has not received), and once the
// reason clears, one heartbeat says so and status-only ones stop.
func TestHeartbeatsCarryTheThrottleReason(t *testing.T) {
	start := gtidSet(t, "0-1-10")
	m := newMerger(gtidPos{start})
	m.addTable("t", &mergeTable{copying: true})
	s := &Server{log: zap.NewNop()}
	var mu sync.Mutex
	reason := "source Threads_running 60 > 50"
	throttled := func() string {
		mu.Lock()
		defer mu.Unlock()
		return reason
	}
	setReason := func(r string) {
		mu.Lock()
		defer mu.Unlock()
		reason = r
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inputs := make(chan mergeInput)
	items := make(chan *rowliftv1.StreamItem)
	go func() {
		_ = s.mergeLoop(ctx, m, inputs, nil, items, start, dbconn.MariaDB, time.Millisecond, throttled, func() string { return "" }, zap.NewNop())
	}()
	next := func() *rowliftv1.Heartbeat {
		select {
		case item := <-items:
			require.NotNil(t, item.GetHeartbeat())
			return item.GetHeartbeat()
		case <-time.After(10 * time.Second):
			t.Fatal("no heartbeat")
			return nil
		}
	}

	hb := next()
	require.Equal(t, "0-1-10", hb.GetPosition().GetGtidSet(), "idle: the position")
	require.Equal(t, "source Threads_running 60 > 50", hb.GetThrottled())

	// A chunk in flight: the merger is no longer idle. The merger may be
	// sending a heartbeat meanwhile: take those while the request waits.
	ack := make(chan struct{})
	for sent := false; !sent; {
		select {
		case inputs <- mergeInput{request: "t", ack: ack}:
			sent = true
		case <-items:
		}
	}
	<-ack
	for hb = next(); hb.GetPosition() != nil; hb = next() {
		// heartbeats made before the request arrived
	}
	require.Zero(t, hb.GetSourceTimeUs())
	require.Equal(t, "source Threads_running 60 > 50", hb.GetThrottled())

	setReason("")
	for hb = next(); hb.GetThrottled() != ""; hb = next() {
		// heartbeats made before the reason cleared
	}
	require.Nil(t, hb.GetPosition(), "the clear is status-only too")
	select {
	case item := <-items:
		t.Fatalf("a status-only heartbeat after the clear was sent: %v", item)
	case <-time.After(20 * time.Millisecond):
	}
}
