package streamer

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/throttle"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

const (
	// defaultThrottleTTL is how long a target reason holds without a refresh
	// when the applier does not say.
	defaultThrottleTTL = 5 * time.Second
	// maxThrottleTTL bounds how long one request can pause a copy, so a client
	// that sets a reason and goes away cannot pause it for good.
	maxThrottleTTL = 10 * time.Minute
)

// Throttle records a target's reason to pause a workflow's copy and the
// position it has applied. Both are kept by workflow and target on the
// server, not on a stream, so they survive a stream restart and may arrive
// before the stream opens.
func (s *Server) Throttle(_ context.Context, req *rowliftv1.ThrottleRequest) (*rowliftv1.ThrottleResponse, error) {
	if req.GetWorkflow() == "" {
		return nil, status.Error(codes.InvalidArgument, "throttle request names no workflow")
	}
	var applied *gtid.Set
	if req.GetAppliedPosition() != "" {
		var err error
		if applied, err = gtid.Parse(req.GetAppliedPosition()); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "throttle request's applied position: %v", err)
		}
	}
	ttl := time.Duration(req.GetTtlMs()) * time.Millisecond
	if ttl <= 0 {
		ttl = defaultThrottleTTL
	}
	ttl = min(ttl, maxThrottleTTL)
	before := s.targets.set(req.GetWorkflow(), req.GetTarget(), req.GetReason(), applied, ttl)
	log := s.log.With(zap.String("workflow", req.GetWorkflow()), zap.String("target", req.GetTarget()))
	switch {
	case before == "" && req.GetReason() != "":
		log.Info("copy throttled by the target", zap.String("reason", req.GetReason()))
	case before != "" && req.GetReason() == "":
		log.Info("copy throttle by the target lifted", zap.String("was", before))
	}
	return &rowliftv1.ThrottleResponse{}, nil
}

// targetThrottles holds the targets' throttle reasons and applied positions,
// by workflow and target.
type targetThrottles struct {
	now func() time.Time

	mu         sync.Mutex
	byWorkflow map[string]map[string]targetThrottle
}

type targetThrottle struct {
	reason  string
	applied *gtid.Set
	expires time.Time
}

func newTargetThrottles() *targetThrottles {
	return &targetThrottles{now: time.Now, byWorkflow: map[string]map[string]targetThrottle{}}
}

// set holds target's reason ("" for none) and applied position (nil for
// none) for ttl; with neither it clears what target had. It returns target's
// reason in force before ("" when none, or expired).
func (b *targetThrottles) set(workflow, target, reason string, applied *gtid.Set, ttl time.Duration) (before string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	targets := b.byWorkflow[workflow]
	if t, ok := targets[target]; ok && now.Before(t.expires) {
		before = t.reason
	}
	switch {
	case reason == "" && applied == nil:
		delete(targets, target)
		if len(targets) == 0 {
			delete(b.byWorkflow, workflow)
		}
	case targets == nil:
		b.byWorkflow[workflow] = map[string]targetThrottle{target: {reason: reason, applied: applied, expires: now.Add(ttl)}}
	default:
		targets[target] = targetThrottle{reason: reason, applied: applied, expires: now.Add(ttl)}
	}
	return before
}

// get returns the reasons in force of workflow's targets, joined. Unrefreshed
// reasons are dropped once they expire, and expired is true on that one call,
// for the log.
func (b *targetThrottles) get(workflow string) (reason string, expired bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	targets := b.byWorkflow[workflow]
	now := b.now()
	names := make([]string, 0, len(targets))
	for name := range targets {
		names = append(names, name)
	}
	slices.Sort(names)
	var reasons []string
	for _, name := range names {
		t := targets[name]
		if !now.Before(t.expires) {
			delete(targets, name)
			expired = expired || t.reason != ""
			continue
		}
		reasons = append(reasons, t.reason)
	}
	if len(targets) == 0 {
		delete(b.byWorkflow, workflow)
	}
	return throttle.Join(reasons...), expired
}

// applied returns the position target last reported applied for workflow,
// nil when it reported none that is still in force.
func (b *targetThrottles) applied(workflow, target string) *gtid.Set {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.byWorkflow[workflow][target]
	if !ok || !b.now().Before(t.expires) {
		return nil
	}
	return t.applied
}

// copyGate pauses one stream's row streamers between chunks while the source's
// metrics or a target's reason say so, or while replay lags (catch-up before
// copy). It is only passed before a chunk is requested: a requested chunk
// holds back its table's binlog changes in the merger until its fence, and a
// snapshot held open would grow the very history list the throttle protects,
// so a waiting copy holds neither. The binlog reader and the merge loop never
// wait here: replay goes on.
type copyGate struct {
	source   *throttle.Checker // nil without source limits
	targets  *targetThrottles
	workflow string
	// target is the stream's target, whose applied position paces the copy
	// against lag, the stream's unapplied transactions, when maxLag > 0.
	target string
	lag    *replayLag
	maxLag time.Duration
	// interval is how often a paused copy checks again: the metrics are read
	// at most every throttle interval, but replay's lag is known at once.
	interval time.Duration
	log      *zap.Logger
	now      func() time.Time

	mu sync.Mutex
	// waiting counts row streamers paused here; reason is why, as last checked.
	waiting int
	reason  string
	// lagging is since when replay's lag has paused the copy (zero: it does not).
	lagging time.Time
}

// replayPoll is how often a copy paused by replay's lag looks again: the lag
// moves with every target report (applierReportEvery).
const replayPoll = 50 * time.Millisecond

// drainPoll is how often a copy waiting for its last chunk to be applied looks
// again: a short wait between chunks is time the copy loses.
const drainPoll = 10 * time.Millisecond

// mark returns what the binlog reader has read that the target may not have
// applied yet (nil: nothing), taken when a copy chunk has gone out: the
// transactions among it that follow the chunk's fence are queued behind it.
func (g *copyGate) mark() *gtid.Set {
	if g == nil || g.maxLag <= 0 {
		return nil
	}
	return g.lag.newest()
}

// livePace is how long a live table's copy chunk aims to take from its
// request until it is applied. Short chunks keep each burst of the copy's
// work on the source and the target short, with the drain between them, so
// the application's queries wait behind less of it: on bench-live (MySQL
// 9.7, 2 cores) the load's p95 during the copy was a median 3.2 times its
// baseline at 150 ms against 4.2 times at 500 ms, for a copy about a quarter
// longer under writes (docs/design.md, "Catch-up before copy").
const livePace = 150 * time.Millisecond

// paceTarget is how long a live table's copy chunk should take from its
// request until it is applied: livePace, or half of max_replay_lag_ms if
// less, so transactions that arrive behind a chunk wait well within the
// bound (0: no pacing).
func (g *copyGate) paceTarget() time.Duration {
	if g == nil || g.maxLag <= 0 {
		return 0
	}
	return min(g.maxLag/2, livePace)
}

// drain waits until the target has applied mark (see mark): the last chunk
// and the transactions it held back are then applied, and the next chunk
// starts on an empty queue. Reading the next chunk while the last one still
// loads would queue the transactions behind both, doubling their wait, which
// is what the copy's lag is made of. held reports whether it had to wait: the
// chunk held transactions back, so the table is live. Should replay lag past
// max_replay_lag_ms meanwhile, it waits as wait does, shown in status. With
// no mark, no pacing, or no fresh report of the target (nothing is known),
// it returns at once.
func (g *copyGate) drain(ctx context.Context, mark *gtid.Set) (held bool, err error) {
	if g == nil || g.maxLag <= 0 || mark == nil {
		return false, nil
	}
	for {
		applied := g.targets.applied(g.workflow, g.target)
		if applied == nil || applied.Contains(mark) {
			return held, nil
		}
		held = true
		if g.replayReason() != "" {
			if err := g.wait(ctx); err != nil {
				return held, err
			}
			continue
		}
		select {
		case <-ctx.Done():
			return held, ctx.Err()
		case <-time.After(drainPoll):
		}
	}
}

// wait returns once neither side asks to pause, checking every interval.
func (g *copyGate) wait(ctx context.Context) error {
	if g == nil {
		return nil
	}
	paused := false
	defer func() {
		if paused {
			g.mu.Lock()
			g.waiting--
			g.mu.Unlock()
		}
	}()
	for {
		reason := g.check(ctx)
		if reason == "" {
			return nil
		}
		g.mu.Lock()
		g.reason = reason
		if !paused {
			paused = true
			g.waiting++
		}
		lagging := !g.lagging.IsZero()
		g.mu.Unlock()
		pause := g.interval
		if lagging {
			pause = min(pause, replayPoll)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
	}
}

func (g *copyGate) check(ctx context.Context) string {
	var source string
	if g.source != nil {
		source = g.source.Reason(ctx)
	}
	target, expired := g.targets.get(g.workflow)
	if expired {
		g.log.Warn("copy throttle by the target expired: the applier stopped refreshing it; copying again")
	}
	return throttle.Join(source, target, g.replayReason())
}

// replayReason is why replay's lag pauses the copy, "" when it does not:
// without a fresh report of the target's position nothing is known, and the
// copy goes on.
func (g *copyGate) replayReason() string {
	if g.maxLag <= 0 {
		return ""
	}
	var lag time.Duration
	now := g.now()
	if applied := g.targets.applied(g.workflow, g.target); applied != nil {
		lag = g.lag.lag(applied, now)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	over := lag > g.maxLag
	switch {
	case over && g.lagging.IsZero():
		g.lagging = now
		g.log.Info("copy waits for replay to catch up", zap.Duration("lag", lag), zap.Duration("max_replay_lag", g.maxLag))
	case !over && !g.lagging.IsZero():
		g.log.Info("replay caught up: copying again", zap.Duration("lag", lag), zap.Duration("waited", now.Sub(g.lagging)))
		g.lagging = time.Time{}
	}
	if !over {
		return ""
	}
	return fmt.Sprintf("replay lag %.1fs > %s (max_replay_lag_ms): the copy waits for replay to catch up", lag.Seconds(), g.maxLag)
}

// throttled is what heartbeats report: why the copy waits, "" while no table's
// copy waits (a throttle never shows once the copy is done, since replay is
// never throttled).
func (g *copyGate) throttled() string {
	if g == nil {
		return ""
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.waiting == 0 {
		return ""
	}
	return g.reason
}

// newGate builds a stream's copy gate from its options; lag is what the
// stream's reader has read.
func (s *Server) newGate(req *rowliftv1.StreamRequest, opts *rowliftv1.StreamOptions, lag *replayLag, log *zap.Logger) *copyGate {
	interval := throttle.Interval(opts.GetThrottleCheckMs())
	g := &copyGate{targets: s.targets, workflow: req.GetWorkflow(), target: req.GetTarget(), lag: lag,
		maxLag: time.Duration(opts.GetMaxReplayLagMs()) * time.Millisecond, interval: interval, log: log, now: time.Now}
	if throttle.Enabled(opts.GetThrottle()) {
		g.source = throttle.NewChecker(throttle.NewReader(s.db, "source", opts.GetThrottle()), interval, log)
	}
	return g
}
