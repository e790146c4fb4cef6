package controlclient

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// fakeControl answers VerifyWorkflow with verifyErr and GetWorkflow with the
// statuses in turn, the last one again once they run out.
type fakeControl struct {
	rowliftv1.ControlClient // nil: calling anything else panics
	verifyErr               error
	statuses                []*rowliftv1.WorkflowStatus
	gets                    int
}

func (f *fakeControl) VerifyWorkflow(context.Context, *rowliftv1.VerifyRequest, ...grpc.CallOption) (*rowliftv1.Workflow, error) {
	return &rowliftv1.Workflow{}, f.verifyErr
}

func (f *fakeControl) GetWorkflow(context.Context, *rowliftv1.WorkflowRef, ...grpc.CallOption) (*rowliftv1.Workflow, error) {
	st := f.statuses[min(f.gets, len(f.statuses)-1)]
	f.gets++
	return &rowliftv1.Workflow{Status: st}, nil
}

func verifying(state rowliftv1.VerifyState, rows int64) *rowliftv1.WorkflowStatus {
	return &rowliftv1.WorkflowStatus{Phase: rowliftv1.WorkflowPhase_WORKFLOW_PHASE_RUNNING,
		Verify: &rowliftv1.VerifyStatus{State: state, RowsCompared: rows}}
}

func TestVerifyRefused(t *testing.T) {
	f := &fakeControl{verifyErr: status.Error(codes.FailedPrecondition, "the copy is not done")}
	_, err := Verify(context.Background(), f, "w", time.Millisecond)
	require.EqualError(t, err, "verify workflow w: the copy is not done")
	require.Zero(t, f.gets, "no status is read for a verify that never started")
}

// TestVerifyWaitsForDone: no status before the verify has begun, then running
// ones, then done: Verify returns the done one.
func TestVerifyWaitsForDone(t *testing.T) {
	f := &fakeControl{statuses: []*rowliftv1.WorkflowStatus{
		{Phase: rowliftv1.WorkflowPhase_WORKFLOW_PHASE_RUNNING},
		verifying(rowliftv1.VerifyState_VERIFY_STATE_RUNNING, 10),
		verifying(rowliftv1.VerifyState_VERIFY_STATE_RUNNING, 20),
		verifying(rowliftv1.VerifyState_VERIFY_STATE_DONE, 30),
	}}
	v, err := Verify(context.Background(), f, "w", time.Millisecond)
	require.NoError(t, err)
	require.EqualValues(t, 30, v.GetRowsCompared())
	require.Equal(t, 4, f.gets)
}

func TestVerifyWorkflowFails(t *testing.T) {
	f := &fakeControl{statuses: []*rowliftv1.WorkflowStatus{
		{Phase: rowliftv1.WorkflowPhase_WORKFLOW_PHASE_ERROR, Message: "divergence on t (id=5)"},
	}}
	_, err := Verify(context.Background(), f, "w", time.Millisecond)
	require.EqualError(t, err, "workflow w failed during its verify: divergence on t (id=5)")
}

func TestVerifyCancelled(t *testing.T) {
	f := &fakeControl{statuses: []*rowliftv1.WorkflowStatus{verifying(rowliftv1.VerifyState_VERIFY_STATE_RUNNING, 1)}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := Verify(ctx, f, "w", time.Millisecond)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// TestVerifyEndedEarly: a verify that is cancelled (or fails) will never be
// done: Verify says so instead of waiting forever.
func TestVerifyEndedEarly(t *testing.T) {
	st := verifying(rowliftv1.VerifyState_VERIFY_STATE_CANCELLED, 5)
	st.Verify.Message = "cancelled by the switch of w before its freeze"
	f := &fakeControl{statuses: []*rowliftv1.WorkflowStatus{verifying(rowliftv1.VerifyState_VERIFY_STATE_RUNNING, 1), st}}
	_, err := Verify(context.Background(), f, "w", time.Millisecond)
	require.EqualError(t, err, "the verify of workflow w was cancelled before its end: cancelled by the switch of w before its freeze")
}
