package coordinator

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/state"
)

func TestSummaryState(t *testing.T) {
	require.Equal(t, state.Running, summaryState([]state.State{state.Running, state.Running}))
	require.Equal(t, state.Error, summaryState([]state.State{state.Running, state.Error, state.Stopped}))
	require.Equal(t, state.Stopped, summaryState([]state.State{state.Copying, state.Stopped}))
	require.Equal(t, state.Copying, summaryState([]state.State{state.Running, state.Copying}))
	require.Equal(t, state.State(""), summaryState(nil))
}
