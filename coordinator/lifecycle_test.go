package coordinator

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/state"
)

// TestNext is the life cycle as a table: every operation from every state.
func TestNext(t *testing.T) {
	all := []state.State{state.Init, state.Copying, state.Running, state.Stopped, state.Error, state.Cutover, state.Done}
	type want struct {
		to   state.State // "" with err
		move bool
		err  string
	}
	cases := map[op]map[state.State]want{
		opStart: {
			state.Init:    {to: state.Copying, move: true},
			state.Copying: {to: state.Copying},
			state.Running: {to: state.Running},
			state.Stopped: {err: "it is in state stopped, not new: resume it to continue from where it was"},
			state.Error:   {err: "it is in state error, not new: resume it to continue from where it was"},
			state.Cutover: {err: "it is in state cutover, which start does not apply to"},
			state.Done:    {err: "it is in state done, which start does not apply to"},
		},
		opStop: {
			state.Init:    {to: state.Stopped, move: true},
			state.Copying: {to: state.Stopped, move: true},
			state.Running: {to: state.Stopped, move: true},
			state.Stopped: {to: state.Stopped},
			state.Error:   {to: state.Error},
			state.Cutover: {err: "it is in state cutover, which stop does not apply to"},
			state.Done:    {err: "it is in state done, which stop does not apply to"},
		},
		opResume: {
			state.Init:    {err: "it has not been started: start it"},
			state.Copying: {to: state.Copying},
			state.Running: {to: state.Running},
			state.Stopped: {to: state.Copying, move: true},
			state.Error:   {to: state.Copying, move: true},
			state.Cutover: {err: "it is in state cutover, which resume does not apply to"},
			state.Done:    {err: "it is in state done, which resume does not apply to"},
		},
	}
	for o, byState := range cases {
		for _, cur := range all {
			w, ok := byState[cur]
			require.True(t, ok, "%s from %s has no expectation", o, cur)
			to, move, err := next(o, cur, false)
			if w.err != "" {
				require.EqualError(t, err, w.err, "%s from %s", o, cur)
				continue
			}
			require.NoError(t, err, "%s from %s", o, cur)
			require.Equal(t, w.to, to, "%s from %s", o, cur)
			require.Equal(t, w.move, move, "%s from %s", o, cur)
		}
	}
	// A resume goes straight to running once every copy is done.
	for _, cur := range []state.State{state.Stopped, state.Error} {
		to, move, err := next(opResume, cur, true)
		require.NoError(t, err)
		require.True(t, move)
		require.Equal(t, state.Running, to)
	}
}

func TestSummaryState(t *testing.T) {
	require.Equal(t, state.Running, summaryState([]state.State{state.Running, state.Running}))
	require.Equal(t, state.Error, summaryState([]state.State{state.Running, state.Error, state.Stopped}))
	require.Equal(t, state.Stopped, summaryState([]state.State{state.Copying, state.Stopped}))
	require.Equal(t, state.Copying, summaryState([]state.State{state.Running, state.Copying}))
	require.Equal(t, state.State(""), summaryState(nil))
}
