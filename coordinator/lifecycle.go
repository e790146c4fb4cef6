package coordinator

import (
	"fmt"

	"github.com/rowlift/rowlift/state"
)

// op is an operator's request to move a workflow through its life cycle.
type op string

const (
	opStart  op = "start"
	opStop   op = "stop"
	opResume op = "resume"
)

// next decides where op moves a workflow that is in state cur on one target:
// the state to move to, or move=false when the workflow already is where op
// would put it (so a retried request, or one that reached only some targets
// before, changes nothing). copyDone says whether every table's copy is done,
// which decides where a resume goes. It does no I/O; the error says what the
// operator should do instead.
func next(o op, cur state.State, copyDone bool) (to state.State, move bool, err error) {
	switch o {
	case opStart:
		switch cur {
		case state.Init:
			return state.Copying, true, nil
		case state.Copying, state.Running:
			return cur, false, nil
		case state.Stopped, state.Error:
			return "", false, fmt.Errorf("it is in state %s, not new: resume it to continue from where it was", cur)
		}
	case opStop:
		switch cur {
		case state.Init, state.Copying, state.Running:
			return state.Stopped, true, nil
		case state.Stopped, state.Error:
			// Neither streams; an error keeps its message.
			return cur, false, nil
		}
	case opResume:
		switch cur {
		case state.Stopped, state.Error:
			if copyDone {
				return state.Running, true, nil
			}
			return state.Copying, true, nil
		case state.Copying, state.Running:
			return cur, false, nil
		case state.Init:
			return "", false, fmt.Errorf("it has not been started: start it")
		}
	}
	if cur == state.Switched {
		return "", false, fmt.Errorf("its writes were switched to its targets, and its reverse workflow copies them back: " +
			"reverse it to switch back, or complete it")
	}
	return "", false, fmt.Errorf("it is in state %s, which %s does not apply to", cur, o)
}

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
