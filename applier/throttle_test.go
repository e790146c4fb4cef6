package applier

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/reshard"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// throttleRecorder is a streamer that only records Throttle calls.
type throttleRecorder struct {
	rowliftv1.StreamerClient
	calls chan *rowliftv1.ThrottleRequest
}

func (r *throttleRecorder) Throttle(_ context.Context, req *rowliftv1.ThrottleRequest, _ ...grpc.CallOption) (*rowliftv1.ThrottleResponse, error) {
	r.calls <- req
	return &rowliftv1.ThrottleResponse{}, nil
}

// TestThrottleTargetTellsTheStreamer: while the copy runs, the target's reason
// goes to the streamer at every check (a refresh), a clear once the metric is
// back under, and a run starts by sending its state, so that a reason an
// earlier run left is cleared at once; once the copy is done nothing is read.
func TestThrottleTargetTellsTheStreamer(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		srv := sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
		db := sandboxtest.Open(t, srv, "")
		sandboxtest.Exec(t, db, "CREATE DATABASE ctl", "CREATE TABLE ctl.lag (v INT)", "INSERT INTO ctl.lag VALUES (30)")
		c := &controller{engine: &Engine{db: db}, log: zap.NewNop(), spec: &rowliftv1.WorkflowSpec{Name: "wf", Options: &rowliftv1.WorkflowOptions{
			Throttle:       &rowliftv1.Throttle{Target: &rowliftv1.ThrottleLimits{LagQuery: "SELECT v FROM ctl.lag", MaxLagSeconds: 10}, CheckIntervalMs: 5},
			MaxReplayLagMs: -1}}}
		rec := &throttleRecorder{calls: make(chan *rowliftv1.ThrottleRequest, 1000)}
		next := func() *rowliftv1.ThrottleRequest {
			select {
			case req := <-rec.calls:
				return req
			case <-time.After(10 * time.Second):
				t.Fatal("no throttle request")
				return nil
			}
		}
		run := func(copying *atomic.Bool) chan struct{} {
			done := make(chan struct{})
			go func() {
				defer close(done)
				c.throttleTarget(context.Background(), rec, nil, copying)
			}()
			return done
		}

		var copying atomic.Bool
		copying.Store(true)
		done := run(&copying)
		req := next()
		require.Equal(t, "wf", req.GetWorkflow())
		require.Equal(t, "target lag 30s > 10s", req.GetReason())
		require.Equal(t, throttleTTL(5*time.Millisecond).Milliseconds(), req.GetTtlMs())
		require.Equal(t, "target lag 30s > 10s", next().GetReason(), "refreshed at the next check")

		sandboxtest.Exec(t, db, "UPDATE ctl.lag SET v = 1")
		for req = next(); req.GetReason() != ""; req = next() {
			// refreshes read before the update
		}
		copying.Store(false)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the target throttle kept running after the copy")
		}

		// A new run of the stream with the metric under its limit clears whatever
		// an earlier run left on the streamer, then stops with the copy.
		for len(rec.calls) > 0 {
			<-rec.calls
		}
		copying.Store(true)
		done = run(&copying)
		require.Equal(t, "", next().GetReason())
		copying.Store(false)
		<-done
	})
}

// TestThrottleTargetReportsTheAppliedPosition: while the copy runs, the
// applier reports its committed position, naming its target, every
// applierReportEvery (max_replay_lag_ms not negative); once the copy is done
// it clears the report and stops.
func TestThrottleTargetReportsTheAppliedPosition(t *testing.T) {
	applied, err := gtid.Parse("0-1-42")
	require.NoError(t, err)
	c := &controller{log: zap.NewNop(), pair: reshard.Stream{Target: &rowliftv1.TargetShard{Name: "east"}},
		spec: &rowliftv1.WorkflowSpec{Name: "wf", Options: &rowliftv1.WorkflowOptions{}}}
	rec := &throttleRecorder{calls: make(chan *rowliftv1.ThrottleRequest, 1000)}
	var copying atomic.Bool
	copying.Store(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.throttleTarget(context.Background(), rec, &player{applied: applied}, &copying)
	}()
	for range 3 {
		req := <-rec.calls
		require.Equal(t, "wf", req.GetWorkflow())
		require.Equal(t, "east", req.GetTarget())
		require.Equal(t, "0-1-42", req.GetAppliedPosition())
		require.Equal(t, "", req.GetReason())
	}
	copying.Store(false)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the reports went on after the copy")
	}
	var last *rowliftv1.ThrottleRequest
	for len(rec.calls) > 0 {
		last = <-rec.calls
	}
	require.Equal(t, "", last.GetAppliedPosition(), "the last request clears the report")
}
