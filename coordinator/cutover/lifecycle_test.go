package cutover

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/state"
)

// TestMove is the life cycle as a table: every operation from every state.
func TestMove(t *testing.T) {
	all := []state.State{state.Init, state.Copying, state.Running, state.Stopped, state.Error, state.Cutover, state.Done}
	type want struct {
		to   state.State // "" with err
		move bool
		err  string
	}
	cases := map[Op]map[state.State]want{
		OpStart: {
			state.Init:    {to: state.Copying, move: true},
			state.Copying: {to: state.Copying},
			state.Running: {to: state.Running},
			state.Stopped: {err: "it is in state stopped, not new: resume it to continue from where it was (`rowlift workflow resume w`)"},
			state.Error:   {err: "it is in state error, not new: resume it to continue from where it was (`rowlift workflow resume w`)"},
			state.Cutover: {err: "it is in state cutover, which start does not apply to; `rowlift workflow show w` tells what it waits for"},
			state.Done:    {err: "it is in state done, which start does not apply to; `rowlift workflow show w` tells what it waits for"},
		},
		OpStop: {
			state.Init:    {to: state.Stopped, move: true},
			state.Copying: {to: state.Stopped, move: true},
			state.Running: {to: state.Stopped, move: true},
			state.Stopped: {to: state.Stopped},
			state.Error:   {to: state.Error},
			state.Cutover: {err: "it is in state cutover, which stop does not apply to; `rowlift workflow show w` tells what it waits for"},
			state.Done:    {err: "it is in state done, which stop does not apply to; `rowlift workflow show w` tells what it waits for"},
		},
		OpResume: {
			state.Init:    {err: "it is in state init, not started: start it (`rowlift workflow start w`)"},
			state.Copying: {to: state.Copying},
			state.Running: {to: state.Running},
			state.Stopped: {to: state.Copying, move: true},
			state.Error:   {to: state.Copying, move: true},
			state.Cutover: {err: "it is in state cutover, which resume does not apply to; `rowlift workflow show w` tells what it waits for"},
			state.Done:    {err: "it is in state done, which resume does not apply to; `rowlift workflow show w` tells what it waits for"},
		},
	}
	for o, byState := range cases {
		for _, cur := range all {
			w, ok := byState[cur]
			require.True(t, ok, "%s from %s has no expectation", o, cur)
			to, move, err := Move(o, "w", cur, false)
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
		to, move, err := Move(OpResume, "w", cur, true)
		require.NoError(t, err)
		require.True(t, move)
		require.Equal(t, state.Running, to)
	}
}
