// Package controlclient holds the waits that programs driving a workflow over
// the Control API share (the demo, the benchmarks): until a workflow runs, and
// until its verify is done. The CLI has its own, with its output options.
package controlclient

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/status"

	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// WaitRunning watches the workflow, a status every interval, until its copy is
// done and it replays the binlog (phase RUNNING), and returns that status. It
// hands every status to see first, when see is not nil (the demo shows them).
// A workflow that stops or fails first is an error with its message.
func WaitRunning(ctx context.Context, c rowliftv1.ControlClient, name string, interval time.Duration,
	see func(*rowliftv1.Workflow) error) (*rowliftv1.Workflow, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the watch
	stream, err := c.WatchWorkflow(ctx, &rowliftv1.WatchWorkflowRequest{Workflow: &rowliftv1.WorkflowRef{Name: name},
		IntervalMs: interval.Milliseconds()})
	if err != nil {
		return nil, fmt.Errorf("watch workflow %s: %s", name, status.Convert(err).Message())
	}
	for {
		w, err := stream.Recv()
		if err != nil {
			return nil, fmt.Errorf("watch workflow %s: %s", name, status.Convert(err).Message())
		}
		if see != nil {
			if err := see(w); err != nil {
				return nil, err
			}
		}
		switch w.GetStatus().GetPhase() {
		case rowliftv1.WorkflowPhase_WORKFLOW_PHASE_RUNNING:
			return w, nil
		case rowliftv1.WorkflowPhase_WORKFLOW_PHASE_ERROR, rowliftv1.WorkflowPhase_WORKFLOW_PHASE_STOPPED:
			return nil, fmt.Errorf("workflow %s: %s: %s", name, w.GetStatus().GetPhase(), w.GetStatus().GetMessage())
		}
	}
}

// Verify starts a verify of the workflow (VerifyWorkflow) and reads its status
// every interval until the verify is done, and returns the verify's final
// status: rows compared and the differences found. It fails when the workflow enters state ERROR before the verify is done,
// and when the verify is cancelled or fails, which it never comes back from.
func Verify(ctx context.Context, c rowliftv1.ControlClient, name string, interval time.Duration) (*rowliftv1.VerifyStatus, error) {
	ref := &rowliftv1.WorkflowRef{Name: name}
	if _, err := c.VerifyWorkflow(ctx, &rowliftv1.VerifyRequest{Workflow: ref}); err != nil {
		return nil, fmt.Errorf("verify workflow %s: %s", name, status.Convert(err).Message())
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		w, err := c.GetWorkflow(ctx, ref)
		if err != nil {
			return nil, fmt.Errorf("status of workflow %s during its verify: %s", name, status.Convert(err).Message())
		}
		switch v := w.GetStatus().GetVerify(); v.GetState() {
		case rowliftv1.VerifyState_VERIFY_STATE_DONE:
			return v, nil
		case rowliftv1.VerifyState_VERIFY_STATE_CANCELLED, rowliftv1.VerifyState_VERIFY_STATE_FAILED:
			// It will not be done: someone cancelled it, a cutover did, or a table went.
			how := map[rowliftv1.VerifyState]string{rowliftv1.VerifyState_VERIFY_STATE_CANCELLED: "was cancelled",
				rowliftv1.VerifyState_VERIFY_STATE_FAILED: "failed"}[v.GetState()]
			return nil, fmt.Errorf("the verify of workflow %s %s before its end: %s", name, how, v.GetMessage())
		}
		if w.GetStatus().GetPhase() == rowliftv1.WorkflowPhase_WORKFLOW_PHASE_ERROR {
			return nil, fmt.Errorf("workflow %s failed during its verify: %s", name, w.GetStatus().GetMessage())
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("verify workflow %s: %w", name, context.Cause(ctx))
		case <-tick.C:
		}
	}
}
