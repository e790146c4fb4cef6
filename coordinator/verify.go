package coordinator

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/coordinator/cutover"
	"github.com/rowlift/rowlift/internal/reshard"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
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
	if n := len(spec.GetSources()); n > 1 && !reshard.Resharding(spec) {
		return nil, status.Errorf(codes.FailedPrecondition, "workflow %q merges %d sources into each target without key ranges; verify "+
			"compares one source with its targets and cannot tell which source a target row came from: verify each source's tables with a "+
			"workflow of its own, or give the sources key ranges (a reshard), by which it can", name, n)
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
