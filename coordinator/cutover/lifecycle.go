package cutover

import (
	"fmt"
	"strings"

	"github.com/rowlift/rowlift/state"
)

// Op is an operator's request to move a workflow through its life cycle. It
// lives here, next to the cutover's admission, because the pair model tries
// it in every state a cutover can leave a workflow in.
type Op string

// The life-cycle operations.
const (
	OpStart  Op = "start"
	OpStop   Op = "stop"
	OpResume Op = "resume"
)

// Move decides where o moves workflow name that is in state cur on one
// target: the state to move to, or move=false when the workflow already is
// where o would put it (so a retried request, or one that reached only some
// targets before, changes nothing). copyDone says whether every table's copy
// is done, which decides where a resume goes. The error names the state and
// the command to run instead.
func Move(o Op, name string, cur state.State, copyDone bool) (to state.State, move bool, err error) {
	switch o {
	case OpStart:
		switch cur {
		case state.Init:
			return state.Copying, true, nil
		case state.Copying, state.Running:
			return cur, false, nil
		case state.Stopped, state.Error:
			return "", false, fmt.Errorf("it is in state %s, not new: resume it to continue from where it was (`rowlift workflow resume %s`)", cur, name)
		}
	case OpStop:
		switch cur {
		case state.Init, state.Copying, state.Running:
			return state.Stopped, true, nil
		case state.Stopped, state.Error:
			// Neither streams; an error keeps its message.
			return cur, false, nil
		}
	case OpResume:
		switch cur {
		case state.Stopped, state.Error:
			if copyDone {
				return state.Running, true, nil
			}
			return state.Copying, true, nil
		case state.Copying, state.Running:
			return cur, false, nil
		case state.Init:
			return "", false, fmt.Errorf("it is in state init, not started: start it (`rowlift workflow start %s`)", name)
		}
	}
	if cur == state.Switched {
		if forward, ok := strings.CutSuffix(name, ReverseSuffix); ok {
			return "", false, fmt.Errorf("it is in state switched: the writes went back to its targets, and it waits for the next switch "+
				"to follow them again: switch its forward workflow (`rowlift workflow switch %s`)", forward)
		}
		return "", false, fmt.Errorf("it is in state switched: its writes were switched to its targets, and its reverse workflow copies them back: "+
			"reverse it to switch back, or complete it (`rowlift workflow reverse %s`, `rowlift workflow complete %s`)", name, name)
	}
	return "", false, fmt.Errorf("it is in state %s, which %s does not apply to; `rowlift workflow show %s` tells what it waits for", cur, o, name)
}
