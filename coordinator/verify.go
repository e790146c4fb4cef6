package coordinator

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/reshard"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// VerifyWorkflow starts a verify of every table of a copied, running
// workflow on all its targets at once. The appliers restart the workflow's
// streams with it, and the streamers send verify chunks; progress and results
// are in status.verify.
func (s *Server) VerifyWorkflow(ctx context.Context, req *rowliftv1.VerifyRequest) (*rowliftv1.Workflow, error) {
	spec, targets, views, err := s.settled(ctx, req.GetWorkflow())
	if err != nil {
		return nil, err
	}
	name := spec.GetName()
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
// run it: it runs on the stream, after the copy.
func verifiable(name string, v view) error {
	if v.wf == nil {
		return status.Errorf(codes.NotFound, "workflow %q is missing on target %s", name, v.target)
	}
	switch v.wf.State {
	case state.Running:
		return nil
	case state.Init, state.Copying:
		return status.Errorf(codes.FailedPrecondition, "cannot verify workflow %q yet: its copy is not done on target %s (state %s); "+
			"wait until `rowlift workflow watch %s --until running` returns", name, v.target, v.wf.State, name)
	case state.Switched:
		return status.Errorf(codes.FailedPrecondition, "cannot verify workflow %q: its writes were switched to target %s and it waits for the "+
			"next switch; verify the workflow that replicates the writes now (%s_reverse after a switch)", name, v.target, name)
	}
	return status.Errorf(codes.FailedPrecondition, "cannot verify workflow %q: it is in state %s on target %s, and a verify runs on its "+
		"stream: resume it first (`rowlift workflow resume %s`)", name, v.wf.State, v.target, name)
}
