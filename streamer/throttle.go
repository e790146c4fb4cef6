package streamer

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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

// Throttle records the target side's reason to pause a workflow's copy. The
// reason is kept by workflow on the server, not on a stream, so it survives a
// stream restart and may arrive before the stream opens.
func (s *Server) Throttle(_ context.Context, req *rowliftv1.ThrottleRequest) (*rowliftv1.ThrottleResponse, error) {
	if req.GetWorkflow() == "" {
		return nil, status.Error(codes.InvalidArgument, "throttle request names no workflow")
	}
	ttl := time.Duration(req.GetTtlMs()) * time.Millisecond
	if ttl <= 0 {
		ttl = defaultThrottleTTL
	}
	ttl = min(ttl, maxThrottleTTL)
	before := s.targets.set(req.GetWorkflow(), req.GetReason(), ttl)
	log := s.log.With(zap.String("workflow", req.GetWorkflow()))
	switch {
	case before == "" && req.GetReason() != "":
		log.Info("copy throttled by the target", zap.String("reason", req.GetReason()))
	case before != "" && req.GetReason() == "":
		log.Info("copy throttle by the target lifted", zap.String("was", before))
	}
	return &rowliftv1.ThrottleResponse{}, nil
}

// targetThrottles holds the target side's throttle reasons by workflow.
type targetThrottles struct {
	now func() time.Time

	mu         sync.Mutex
	byWorkflow map[string]targetThrottle
}

type targetThrottle struct {
	reason  string
	expires time.Time
}

func newTargetThrottles() *targetThrottles {
	return &targetThrottles{now: time.Now, byWorkflow: map[string]targetThrottle{}}
}

// set holds workflow's reason for ttl; "" clears it. It returns the reason in
// force before ("" when none, or expired).
func (b *targetThrottles) set(workflow, reason string, ttl time.Duration) (before string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if t, ok := b.byWorkflow[workflow]; ok && now.Before(t.expires) {
		before = t.reason
	}
	if reason == "" {
		delete(b.byWorkflow, workflow)
	} else {
		b.byWorkflow[workflow] = targetThrottle{reason: reason, expires: now.Add(ttl)}
	}
	return before
}

// get returns workflow's reason in force. An unrefreshed reason is dropped
// once it expires, and expired is true on that one call, for the log.
func (b *targetThrottles) get(workflow string) (reason string, expired bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.byWorkflow[workflow]
	if !ok {
		return "", false
	}
	if !b.now().Before(t.expires) {
		delete(b.byWorkflow, workflow)
		return "", true
	}
	return t.reason, false
}

// copyGate pauses one stream's row streamers between chunks while the source's
// metrics or the target's reason say so. It is only passed before a chunk is
// requested: a requested chunk holds back its table's binlog changes in the
// merger until its fence, and a snapshot held open would grow the very history
// list the throttle protects, so a waiting copy holds neither. The binlog
// reader and the merge loop never wait here: replay goes on.
type copyGate struct {
	source   *throttle.Checker // nil without source limits
	targets  *targetThrottles
	workflow string
	interval time.Duration
	log      *zap.Logger

	mu sync.Mutex
	// waiting counts row streamers paused here; reason is why, as last checked.
	waiting int
	reason  string
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
		g.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(g.interval):
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
	return throttle.Join(source, target)
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

// newGate builds a stream's copy gate from its options.
func (s *Server) newGate(workflow string, opts *rowliftv1.StreamOptions, log *zap.Logger) *copyGate {
	interval := throttle.Interval(opts.GetThrottleCheckMs())
	g := &copyGate{targets: s.targets, workflow: workflow, interval: interval, log: log}
	if throttle.Enabled(opts.GetThrottle()) {
		g.source = throttle.NewChecker(throttle.NewReader(s.db, "source", opts.GetThrottle()), interval, log)
	}
	return g
}
