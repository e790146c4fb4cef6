package coordinator

import (
	"github.com/rowlift/rowlift/state"
)

// statePriority orders states for a workflow whose targets disagree: the
// summary shows the state that most needs the operator.
var statePriority = []state.State{state.Error, state.Stopped, state.Init, state.Copying, state.Cutover, state.Running, state.Switched, state.Done}

// summaryState is the state shown for a workflow that is in states on its
// targets: the first of statePriority that any target is in.
func summaryState(states []state.State) state.State {
	for _, p := range statePriority {
		for _, st := range states {
			if st == p {
				return p
			}
		}
	}
	if len(states) > 0 {
		return states[0]
	}
	return ""
}
