package coordinator

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/state"
)

func TestVerifiableStates(t *testing.T) {
	require.NoError(t, verifiable("w", view{target: "t1", wf: &state.Workflow{State: state.Running}}))
	for st, want := range map[state.State]string{
		state.Init:     "its copy is not done on target t1 (state init); wait until `rowlift workflow watch w --until running` returns",
		state.Copying:  "its copy is not done on target t1 (state copying)",
		state.Stopped:  "it is in state stopped on target t1, and a verify runs on its stream: resume it first (`rowlift workflow resume w`)",
		state.Error:    "it is in state error on target t1",
		state.Switched: "verify the workflow that replicates the writes now (`rowlift workflow verify w_reverse`)",
	} {
		err := verifiable("w", view{target: "t1", wf: &state.Workflow{State: st}})
		require.Equal(t, codes.FailedPrecondition, status.Code(err), st)
		require.Contains(t, err.Error(), want, st)
	}
	err := verifiable("w", view{target: "t1"})
	require.Equal(t, codes.NotFound, status.Code(err))
	require.Contains(t, err.Error(), "missing on target t1")
}
