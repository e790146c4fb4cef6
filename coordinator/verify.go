package coordinator

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/coordinator/cutover"
	"github.com/rowlift/rowlift/internal/reshard"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// VerifyWorkflow starts a verify of every table of a copied, running
// workflow on all its targets at once. The appliers restart the workflow's
// streams with it, and the streamers send verify chunks; progress and results
// are in status.verify.
func (s *Server) VerifyWorkflow(ctx context.Context, req *rowliftv1.VerifyRequest) (*rowliftv1.Workflow, error) {
	spec, targets, views, pair, last, err := s.settled(ctx, req.GetWorkflow())
	if err != nil {
		return nil, err
	}
	name := spec.GetName()
	if err := cutover.Idle(pair, lastOf(last)); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	if err := mergeVerifiable(spec, req.GetRepair()); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	for _, v := range views {
		if err := verifiable(name, v); err != nil {
			return nil, err
		}
	}
	for _, t := range targets {
		st, err := t.open(ctx)
		if err != nil {
			return nil, err
		}
		if _, err := st.StartVerify(ctx, name, req.GetRepair(), req.GetRestart()); err != nil {
			return nil, t.fail(err)
		}
	}
	return s.workflow(ctx, spec, targets)
}

// verifiable refuses a verify on a target where the workflow's stream cannot
// run it (cutover.Verifiable), as NotFound when it is missing there.
func verifiable(name string, v view) error {
	cv := admissionViews([]view{v}, 0, time.Time{})[0]
	if err := cutover.Verifiable(name, cv); err != nil {
		code := codes.FailedPrecondition
		if cv.State == "" {
			code = codes.NotFound
		}
		return status.Error(code, err.Error())
	}
	return nil
}

// CancelVerify stops a workflow's running verify on every target and records
// it as cancelled; without one it changes nothing and says so by an empty
// cancelled.
func (s *Server) CancelVerify(ctx context.Context, ref *rowliftv1.WorkflowRef) (*rowliftv1.CancelVerifyResponse, error) {
	spec, targets, err := s.locate(ctx, ref)
	if err != nil {
		return nil, err
	}
	name := spec.GetName()
	cancelled, err := s.cancelVerify(ctx, spec, targets, fmt.Sprintf("cancelled by `rowlift workflow verify %s --cancel`; "+
		"`rowlift workflow verify %s --wait` starts a new one", name, name))
	if err != nil {
		return nil, err
	}
	w, err := s.workflow(ctx, spec, targets)
	if err != nil {
		return nil, err
	}
	return &rowliftv1.CancelVerifyResponse{Workflow: w, Cancelled: cancelled}, nil
}

// cancelVerify cancels the workflow's running verify on every target, where
// why is kept as its message, and says what it cancelled with the verify's
// progress ("" when no verify was running). The applier of each target then
// restarts the workflow's streams without it, which it waits for, a few
// seconds at most, so that a freeze right after finds no verify chunk
// reading the tables.
func (s *Server) cancelVerify(ctx context.Context, spec *rowliftv1.WorkflowSpec, targets []*target, why string) (string, error) {
	w, err := s.workflow(ctx, spec, targets)
	if err != nil {
		return "", err
	}
	v := w.GetStatus().GetVerify()
	if v.GetState() != rowliftv1.VerifyState_VERIFY_STATE_RUNNING {
		return "", nil
	}
	name := spec.GetName()
	cancelled := false
	stores := make([]*state.Store, len(targets))
	owners := make([]map[string]int64, len(targets))
	for i, t := range targets {
		if stores[i], err = t.open(ctx); err != nil {
			return "", err
		}
		before, err := stores[i].StreamOwners(ctx, name)
		if err != nil {
			return "", t.fail(err)
		}
		sources, err := stores[i].CancelVerify(ctx, name, why)
		if err != nil {
			return "", t.fail(err)
		}
		owners[i] = map[string]int64{}
		for _, src := range sources {
			owners[i][src] = before[src]
		}
		cancelled = cancelled || len(sources) > 0
	}
	if !cancelled {
		return "", nil // it ended meanwhile
	}
	s.log.Info("verify cancelled", zap.String("workflow", name), zap.Float64("percent", v.GetPercent()), zap.String("why", why))
	// A verify chunk's source snapshot holds the table's metadata lock, which a
	// rename freeze would wait for with the writers queued behind it: give the
	// appliers a moment to end the streams that ran the verify.
	deadline := time.Now().Add(verifyRestartWait)
	for i, t := range targets {
		for !restarted(ctx, stores[i], name, owners[i]) && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
		if !restarted(ctx, stores[i], name, owners[i]) {
			s.log.Warn("the applier did not restart the streams of the cancelled verify in time; going on", zap.String("workflow", name),
				zap.String("target", t.name), zap.Duration("waited", verifyRestartWait))
		}
	}
	done := fmt.Sprintf("%.1f%% done", v.GetPercent())
	if v.GetPercent() < 0 {
		done = fmt.Sprintf("%d rows compared", v.GetRowsCompared())
	}
	return fmt.Sprintf("cancelled the running verify of %s (%s)", name, done), nil
}

// verifyRestartWait bounds how long cancelVerify waits for the appliers to
// restart the streams without the verify: a few of their poll intervals.
const verifyRestartWait = 5 * time.Second

// restarted reports whether every stream in before was taken over by a new
// run since, or nothing will restart it: no applier runs, or the workflow
// does not stream (stopped, failed, parked).
func restarted(ctx context.Context, st *state.Store, workflow string, before map[string]int64) bool {
	if len(before) == 0 {
		return true
	}
	if running, err := st.ApplierRunning(ctx); err == nil && !running {
		return true
	}
	if wf, err := st.Workflow(ctx, workflow); err == nil && wf.State != state.Copying && wf.State != state.Running {
		return true
	}
	now, err := st.StreamOwners(ctx, workflow)
	if err != nil {
		return false
	}
	for src, owner := range before {
		if now[src] == owner {
			return false
		}
	}
	return true
}

// mergeVerifiable refuses a verify a merge cannot have: a merge of more sources
// than verify's per-key source masks hold, or a repair of a merge.
func mergeVerifiable(spec *rowliftv1.WorkflowSpec, repair bool) error {
	n := len(spec.GetSources())
	switch {
	case n <= 1 || reshard.Resharding(spec):
		return nil
	case n > 64:
		return fmt.Errorf("workflow %q merges %d sources into each target without key ranges; "+
			"verify tells the sources of a key apart for at most 64", spec.GetName(), n)
	case repair:
		return fmt.Errorf("workflow %q merges %d sources into each target without key ranges; a verify "+
			"tells which keys differ, but a repair cannot tell which source's row a key should get: run the verify without --repair and "+
			"fix the keys it names on the sources or the target", spec.GetName(), n)
	}
	return nil
}
