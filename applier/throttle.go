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

// applierReportEvery is how often the applier tells the streamer what it has
// applied while the copy runs, so the copy waits for replay within about this
// much of replay falling behind (max_replay_lag_ms), and a paced copy learns
// this soon that its last chunk is applied: each chunk waits for that, so a
// longer interval would leave the copy idle between chunks.
const applierReportEvery = 25 * time.Millisecond

// throttleTarget, while the copy runs, reads the target's metrics every check
// interval (when the workflow sets target limits) and sends the streamer the
// reason to pause the copy, or that there is none, and reports the position
// the target has applied every applierReportEvery (unless max_replay_lag_ms
// is negative): the streamer pauses the copy while its oldest unapplied
// transaction waits longer than max_replay_lag_ms. Only the streamer can
// pause the copy and let replay go on, since both share one ordered stream;
// the target's own writes of replay are never held back. It returns once the
// copy is done (after clearing what it set) or ctx ends; what it leaves
// behind lapses after its TTL.
func (c *controller) throttleTarget(ctx context.Context, client rowliftv1.StreamerClient, play *player, copying *atomic.Bool) {
	opts := c.spec.GetOptions()
	interval := throttle.Interval(opts.GetThrottle().GetCheckIntervalMs())
	ttl := throttleTTL(interval)
	var checker *throttle.Checker
	if limits := opts.GetThrottle().GetTarget(); throttle.Enabled(limits) {
		checker = throttle.NewChecker(throttle.NewReader(c.engine.db, "target", limits), interval, c.log)
	}
	report := opts.GetMaxReplayLagMs() >= 0
	every := interval
	if report {
		every = min(every, applierReportEvery)
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	var sent, lastErr string
	// known is false until the streamer has our state: a reason an earlier run
	// of the stream left there is cleared at once, not when it lapses.
	// reported is true while the streamer holds a position of ours.
	known, reported := false, false
	for {
		reason, applied := "", ""
		if copying.Load() {
			if checker != nil {
				reason = checker.Reason(ctx)
			}
			if report {
				applied = play.position().String()
			}
		}
		// A reason is refreshed at every check, a position at every report; a
		// clear is sent until it lands.
		if !known || reason != "" || sent != "" || applied != "" || reported {
			rctx, cancel := context.WithTimeout(ctx, ttl)
			_, err := client.Throttle(rctx, &rowliftv1.ThrottleRequest{Workflow: c.spec.GetName(), Target: c.pair.Target.GetName(),
				Reason: reason, AppliedPosition: applied, TtlMs: ttl.Milliseconds()})
			cancel()
			switch {
			case ctx.Err() != nil:
				return
			case err == nil:
				sent, reported, lastErr, known = reason, applied != "", "", true
			case err.Error() != lastErr:
				lastErr = err.Error()
				c.log.Warn("cannot tell the streamer to throttle the copy; retrying", zap.String("reason", reason), zap.Error(err))
			}
		}
		if !copying.Load() && sent == "" && !reported {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
