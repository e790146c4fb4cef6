package coordinator

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
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

// A merge verifies with up to 64 sources, each a bit of verify_key's masks,
// and never repairs; a reshard's sources have key ranges and are not merged.
func TestMergeVerifiable(t *testing.T) {
	spec := func(sources int, ranged bool) *rowliftv1.WorkflowSpec {
		s := &rowliftv1.WorkflowSpec{Name: "m", Targets: []*rowliftv1.TargetShard{{Name: "main"}}}
		for i := range sources {
			src := &rowliftv1.SourceShard{Name: fmt.Sprint("s", i)}
			if ranged {
				src.KeyRange = fmt.Sprintf("%02x-%02x", i, i+1)
			}
			s.Sources = append(s.Sources, src)
		}
		if ranged {
			s.Targets[0].KeyRange = "-"
		}
		return s
	}
	require.NoError(t, mergeVerifiable(spec(1, false), true), "one source repairs")
	require.NoError(t, mergeVerifiable(spec(64, false), false))
	require.ErrorContains(t, mergeVerifiable(spec(65, false), false),
		`workflow "m" merges 65 sources into each target without key ranges; verify tells the sources of a key apart for at most 64`)
	require.ErrorContains(t, mergeVerifiable(spec(2, false), true), "a repair cannot tell which source's row a key should get")
	require.NoError(t, mergeVerifiable(spec(65, true), true), "a reshard's sources are told apart by their key ranges")
}
