package cutover

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/state"
)

// TestAdmitCutover: what a switch or reverse answers in the states an
// operator meets most, word for word where the message is the interface.
func TestAdmitCutover(t *testing.T) {
	fwd := func(st state.State) []View { return []View{{Target: "t1", State: st}} }
	rev := func(st state.State) []View { return []View{{Target: "s1", State: st}} }
	renamedSwitch := &Last{Direction: DirSwitch, Step: Done, FrozeRenamed: true}
	for _, tc := range []struct {
		name string
		p    Pair
		dir  string
		want Plan
		err  string
	}{
		{"first switch", Pair{Name: "w", Forward: fwd(state.Running), Reverse: rev("")}, DirSwitch, Plan{}, ""},
		{"reverse after a renaming switch", Pair{Name: "w", Forward: fwd(state.Switched), Reverse: rev(state.Running), Last: renamedSwitch},
			DirReverse, Plan{UnfreezeRenamed: true}, ""},
		{"retried after a crash", Pair{Name: "w", Forward: fwd(state.Running), Last: &Last{Direction: DirSwitch, Step: Frozen}}, DirSwitch,
			Plan{Resume: true}, ""},
		{"the other direction after a crash", Pair{Name: "w", Forward: fwd(state.Running), Last: &Last{Direction: DirSwitch, Step: Frozen}},
			DirReverse, Plan{}, "workflow \"w\": a switch is in progress at step frozen; finish it with `rowlift workflow switch w`"},
		{"a verify runs", Pair{Name: "w", Forward: []View{{Target: "t1", State: state.Running, Verifying: true}}, Reverse: rev("")}, DirSwitch,
			Plan{CancelVerify: []string{"w"}}, ""},
		{"stopped", Pair{Name: "w", Forward: fwd(state.Stopped), Reverse: rev("")}, DirSwitch, Plan{},
			"cannot switch workflow \"w\": \"w\" is in state stopped on target t1; a cutover needs it running with its copy done: " +
				"resume it first (`rowlift workflow resume w`), then wait for phase running (`rowlift workflow watch w --until running`)"},
		{"switched already", Pair{Name: "w", Forward: fwd(state.Switched), Reverse: rev(state.Running), Last: renamedSwitch}, DirSwitch, Plan{},
			"it is switched already: reverse it to switch back (`rowlift workflow reverse w`)"},
		{"nothing to reverse", Pair{Name: "w", Forward: fwd(state.Running), Reverse: rev("")}, DirReverse, Plan{},
			"there is nothing to reverse; `rowlift workflow switch w` switches it"},
		{"reversed already", Pair{Name: "w", Forward: fwd(state.Running), Reverse: rev(state.Switched)}, DirReverse, Plan{},
			"the writes are back on its sources already: switch it to move them again (`rowlift workflow switch w`)"},
		{"copying", Pair{Name: "w", Forward: []View{{Target: "t1", State: state.Running, Copying: "a"}}}, DirSwitch, Plan{},
			"table a is still copying; wait for phase running (`rowlift workflow watch w --until running`)"},
		{"lagging", Pair{Name: "w", Forward: []View{{Target: "t1", State: state.Running, Lagging: "stream s1 -> t1 lags 9s, over the limit of 5s"}}},
			DirSwitch, Plan{}, "stream s1 -> t1 lags 9s, over the limit of 5s; wait for it to catch up (`rowlift workflow show w`) or raise --max-lag"},
		{"the reverse runs on its own", Pair{Name: "w", Forward: fwd(state.Running), Reverse: rev(state.Stopped)}, DirSwitch, Plan{},
			"\"w_reverse\" is in state stopped on target s1, not switched; stop using it by hand, or delete it if it is left over " +
				"(`rowlift workflow delete w_reverse`)"},
	} {
		plan, err := AdmitCutover(tc.p, tc.dir)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.name)
			continue
		}
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, plan, tc.name)
	}
}

// TestCutoverRefusalSaysWhatToRun: a cutover refused for the state of the
// workflow it would stop ends with what to run to get past that state, for
// every state, word for word: it once ended "(switch it)" for a workflow in
// state init, which read as an order to do what was just refused.
func TestCutoverRefusalSaysWhatToRun(t *testing.T) {
	const prefix = "cannot switch workflow \"mv\": \"mv\" is in state "
	wait := "wait for phase running (`rowlift workflow watch mv --until running`)"
	for st, want := range map[state.State]string{
		state.Init: "init on target main; a cutover needs it running with its copy done: " +
			"start it first (`rowlift workflow start mv`), then " + wait,
		state.Copying: "copying on target main; a cutover needs it running with its copy done: " + wait,
		state.Stopped: "stopped on target main; a cutover needs it running with its copy done: " +
			"resume it first (`rowlift workflow resume mv`), then " + wait,
		state.Error: "error on target main; a cutover needs it running with its copy done: " +
			"resume it first (`rowlift workflow resume mv`), then " + wait,
		state.Cutover: "cutover on target main; a cutover needs it running with its copy done: " +
			"`rowlift workflow show mv` tells what it waits for",
		state.Done: "done on target main; a cutover needs it running with its copy done: " +
			"`rowlift workflow show mv` tells what it waits for",
		state.Switched: "switched on target main; it is switched already: reverse it to switch back (`rowlift workflow reverse mv`)",
	} {
		_, err := AdmitCutover(Pair{Name: "mv", Forward: []View{{Target: "main", State: st}}}, DirSwitch)
		require.EqualError(t, err, prefix+want, st)
	}
	_, err := AdmitCutover(Pair{Name: "mv", Forward: []View{{Target: "main", State: state.Running}},
		Reverse: []View{{Target: "src", State: state.Init}}}, DirReverse)
	require.EqualError(t, err, "cannot reverse workflow \"mv\": \"mv_reverse\" is in state init on target src; "+
		"a cutover needs it running with its copy done: start it first (`rowlift workflow start mv_reverse`), "+
		"then wait for phase running (`rowlift workflow watch mv_reverse --until running`)")
}

// TestAdmitCancelAndComplete: cancel and complete refuse under a cutover, in
// the wrong state, and (cancel) through the reverse workflow.
func TestAdmitCancelAndComplete(t *testing.T) {
	running := &Last{Direction: DirReverse, Step: Writable}
	require.EqualError(t, AdmitCancel("w", "w", []View{{Target: "t1", State: state.Running}}, running),
		"workflow \"w\": a reverse is in progress at step writable; let it finish (`rowlift workflow reverse w` resumes it)")
	require.ErrorContains(t, AdmitCancel("w", "w", []View{{Target: "t1", State: state.Switched}}, nil),
		"it is in state switched, its writes go to target t1 since its switch; reverse it first (`rowlift workflow reverse w`)")
	require.ErrorContains(t, AdmitCancel("w_reverse", "w", []View{{Target: "s1", State: state.Running}}, nil),
		"it is the reverse workflow of \"w\"")
	require.NoError(t, AdmitCancel("w", "w", []View{{Target: "t1", State: state.Running}}, nil))

	_, err := AdmitComplete(Pair{Name: "w", Forward: []View{{Target: "t1", State: state.Running}}})
	require.ErrorContains(t, err, "it is in state running on target t1; complete ends a workflow whose writes were switched to its targets: "+
		"switch it first (`rowlift workflow switch w`)")
	renamed, err := AdmitComplete(Pair{Name: "w", Forward: []View{{Target: "t1", State: state.Switched}},
		Last: &Last{Direction: DirSwitch, Step: Done, FrozeRenamed: true}})
	require.NoError(t, err)
	require.True(t, renamed)
}
