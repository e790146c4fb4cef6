package applier

import (
	"context"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rowlift/rowlift/internal/throttle"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// throttleTTL is how long the streamer holds a target reason without a
// refresh: a few check intervals, so one slow or lost refresh does not let a
// chunk through, while a reason whose applier went away lapses by itself.
func throttleTTL(interval time.Duration) time.Duration {
	return max(5*interval, 3*time.Second)
}

// throttleTarget reads the target's metrics every check interval while the
// copy runs and sends the streamer the reason to pause it, or that there is
// none. Only the streamer can pause the copy and let replay go on, since both
// share one ordered stream; the target's own writes of replay are never held
// back. It returns once the copy is done (after clearing a reason it set) or
// ctx ends; a reason it leaves behind lapses after its TTL.
func (c *controller) throttleTarget(ctx context.Context, client rowliftv1.StreamerClient, copying *atomic.Bool) {
	opts := c.spec.GetOptions().GetThrottle()
	interval := throttle.Interval(opts.GetCheckIntervalMs())
	ttl := throttleTTL(interval)
	checker := throttle.NewChecker(throttle.NewReader(c.engine.db, "target", opts.GetTarget()), interval, c.log)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var sent, lastErr string
	// known is false until the streamer has our state: a reason an earlier run
	// of the stream left there is cleared at once, not when it lapses.
	known := false
	for {
		reason := ""
		if copying.Load() {
			reason = checker.Reason(ctx)
		}
		// A reason is refreshed at every check; a clear is sent until it lands.
		if !known || reason != "" || sent != "" {
			rctx, cancel := context.WithTimeout(ctx, ttl)
			_, err := client.Throttle(rctx, &rowliftv1.ThrottleRequest{Workflow: c.spec.GetName(), Reason: reason, TtlMs: ttl.Milliseconds()})
			cancel()
			switch {
			case ctx.Err() != nil:
				return
			case err == nil:
				sent, lastErr, known = reason, "", true
			case err.Error() != lastErr:
				lastErr = err.Error()
				c.log.Warn("cannot tell the streamer to throttle the copy; retrying", zap.String("reason", reason), zap.Error(err))
			}
		}
		if !copying.Load() && sent == "" {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
