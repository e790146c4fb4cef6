package cutover

import (
	"fmt"
	"strings"

	"github.com/rowlift/rowlift/state"
)

// The directions of a cutover, as journals record them: the admission and
// GainingRenamed tell a journal that may be resumed from one that blocks the
// other direction by them.
const (
	DirSwitch  = "switch"
	DirReverse = "reverse"
)

// ReverseSuffix names a workflow's reverse workflow: the pair's one journal is
// kept under the forward workflow's name, so a command given the reverse
// workflow finds it by trimming this.
const ReverseSuffix = "_reverse"

// View is what the coordinator read of one workflow of a pair on one of its
// targets. Every admission below decides from views and the pair's last
// journal alone, so that the pair model can put every command to every state
// the coordinator could read.
type View struct {
	Target string
	// State is "" when the workflow is missing on the target.
	State state.State
	// Copying names a table whose copy is not done ("" when every one is).
	Copying string
	// Lagging says which stream is over the lag limit, and by how much ("":
	// none is).
	Lagging string
	// Verifying: a verify of the workflow has not finished there.
	Verifying bool
}

// Pair is what a switch, a reverse or a complete reads of a workflow pair:
// both workflows, because a cutover stops one and starts the other, and the
// last journal, because only it tells an unfinished cutover and how the
// sides' tables were left.
type Pair struct {
	// Name is the forward workflow's; the reverse one's is Name+ReverseSuffix.
	Name             string
	Forward, Reverse []View
	// Last is the pair's last journal (nil: never cut over).
	Last *Last
}

// Plan is what an admitted switch or reverse does before its first step,
// decided here so that the pair model checks the same decisions the
// coordinator carries out.
type Plan struct {
	// Resume: drive the pair's unfinished journal (a retried command after a
	// crash) instead of starting a cutover, so that a second freeze never
	// starts on top of the first.
	Resume bool
	// UnfreezeRenamed: the side gaining the writes holds its tables under
	// their frozen names (see GainingRenamed); the journal's UnfreezeMode.
	UnfreezeRenamed bool
	// CancelVerify names the workflows whose verify must be cancelled before
	// the freeze: a verify reads the tables the cutover renames or locks, and
	// its stream is parked, so it would never finish, or read tables that
	// are no longer there.
	CancelVerify []string
}

// AdmitCutover decides whether a cutover in direction dir may start on pair
// p, or resume the one a crash left unfinished. The stopping workflow (the
// forward one for a switch) must be running everywhere with its copy done
// and its lag under the limit; the following one must be missing (a first
// switch) or parked (switched). The error names the state in the way and the
// command to run.
func AdmitCutover(p Pair, dir string) (Plan, error) {
	if p.Last != nil && !Finished(p.Last.Step) {
		if p.Last.Direction != dir {
			return Plan{}, fmt.Errorf("workflow %q: a %s is in progress at step %s; finish it with `rowlift workflow %s %s`",
				p.Name, p.Last.Direction, p.Last.Step, p.Last.Direction, p.Name)
		}
		return Plan{Resume: true}, nil
	}
	oldName, old, newName, gaining := p.Name, p.Forward, p.Name+ReverseSuffix, p.Reverse
	if dir == DirReverse {
		oldName, old, newName, gaining = newName, gaining, oldName, old
	}
	for _, v := range old {
		if v.State == "" {
			if dir == DirReverse {
				return Plan{}, fmt.Errorf("workflow %q was not switched (no reverse workflow %q on target %s): there is nothing to reverse; "+
					"`rowlift workflow switch %s` switches it", p.Name, oldName, v.Target, p.Name)
			}
			return Plan{}, fmt.Errorf("workflow %q is missing on target %s, a delete that did not finish: delete it again (`rowlift workflow delete %s`)",
				oldName, v.Target, oldName)
		}
		if v.State != state.Running {
			return Plan{}, fmt.Errorf("cannot %s workflow %q: %q is in state %s on target %s; %s",
				dir, p.Name, oldName, v.State, v.Target, untilRunning(dir, p.Name, oldName, v.State))
		}
		if v.Copying != "" {
			return Plan{}, fmt.Errorf("cannot %s workflow %q: table %s is still copying; wait for phase running (`rowlift workflow watch %s --until running`)",
				dir, p.Name, v.Copying, oldName)
		}
		if v.Lagging != "" {
			return Plan{}, fmt.Errorf("cannot %s workflow %q: %s; wait for it to catch up (`rowlift workflow show %s`) or raise --max-lag",
				dir, p.Name, v.Lagging, oldName)
		}
	}
	if exists(gaining) {
		for _, v := range gaining {
			if v.State != "" && v.State != state.Switched {
				return Plan{}, fmt.Errorf("cannot %s workflow %q: %q is in state %s on target %s, not switched; stop using it by hand, "+
					"or delete it if it is left over (`rowlift workflow delete %s`)", dir, p.Name, newName, v.State, v.Target, newName)
			}
		}
	}
	renamed, err := GainingRenamed(p.Last, dir)
	if err != nil {
		return Plan{}, fmt.Errorf("cannot %s workflow %q: %v; `rowlift workflow show %s` tells which side takes the writes", dir, p.Name, err, p.Name)
	}
	plan := Plan{UnfreezeRenamed: renamed}
	for _, w := range []struct {
		name  string
		views []View
	}{{p.Name, p.Forward}, {p.Name + ReverseSuffix, p.Reverse}} {
		for _, v := range w.views {
			if v.Verifying {
				plan.CancelVerify = append(plan.CancelVerify, w.name)
				break
			}
		}
	}
	return plan, nil
}

// untilRunning says what brings the stopping workflow name, in state cur, to
// where a cutover in direction dir can stop it, as the command to run: a
// refusal read in a hurry must not be taken for the command it refused.
func untilRunning(dir, pair, name string, cur state.State) string {
	const needs = "a cutover needs it running with its copy done: "
	wait := fmt.Sprintf("wait for phase running (`rowlift workflow watch %s --until running`)", name)
	switch cur {
	case state.Switched:
		if dir == DirSwitch {
			return fmt.Sprintf("it is switched already: reverse it to switch back (`rowlift workflow reverse %s`)", pair)
		}
		return fmt.Sprintf("the writes are back on its sources already: switch it to move them again (`rowlift workflow switch %s`)", pair)
	case state.Init:
		return needs + fmt.Sprintf("start it first (`rowlift workflow start %s`), then ", name) + wait
	case state.Copying:
		return needs + wait
	case state.Stopped, state.Error:
		return needs + fmt.Sprintf("resume it first (`rowlift workflow resume %s`), then ", name) + wait
	}
	return needs + fmt.Sprintf("`rowlift workflow show %s` tells what it waits for", name)
}

func exists(views []View) bool {
	for _, v := range views {
		if v.State != "" {
			return true
		}
	}
	return false
}

// Idle refuses while the pair of forward workflow pair has a cutover in
// progress (last is its last journal, nil: none): finishing or cancelling a
// workflow under a running cutover would leave a side frozen, and a verify
// would read tables the cutover is renaming.
func Idle(pair string, last *Last) error {
	if last != nil && !Finished(last.Step) {
		return fmt.Errorf("workflow %q: a %s is in progress at step %s; let it finish (`rowlift workflow %s %s` resumes it)",
			pair, last.Direction, last.Step, last.Direction, pair)
	}
	return nil
}

// AdmitComplete decides whether pair p may be completed: only once its
// writes were switched to the forward workflow's targets everywhere, since
// complete drops the reverse workflow that carries them back. sourceRenamed
// says whether the source tables are under their frozen names, which is how
// complete must name them to keep or drop them.
func AdmitComplete(p Pair) (sourceRenamed bool, err error) {
	if err := Idle(p.Name, p.Last); err != nil {
		return false, err
	}
	for _, v := range p.Forward {
		if v.State != state.Switched {
			st := v.State
			if st == "" {
				st = "missing"
			}
			return false, fmt.Errorf("cannot complete workflow %q: it is in state %s on target %s; complete ends a workflow whose writes were "+
				"switched to its targets: switch it first (`rowlift workflow switch %s`), or cancel it to give the move up (`rowlift workflow cancel %s`)",
				p.Name, st, v.Target, p.Name, p.Name)
		}
	}
	// The sources' tables are as a reverse would find them on the side it
	// gives the writes back to.
	renamed, err := GainingRenamed(p.Last, DirReverse)
	if err != nil {
		return false, fmt.Errorf("cannot complete workflow %q: %v; `rowlift workflow show %s` tells which side takes the writes", p.Name, err, p.Name)
	}
	return renamed, nil
}

// AdmitCancel decides whether workflow name, whose views are given, may be
// cancelled. pair is the forward workflow of its pair (name itself unless
// name is a reverse workflow) and last the pair's last journal. A cancel
// removes the forward workflow and its reverse, so it must not run while the
// writes are on the forward workflow's targets (the reverse carries them
// back), nor through the reverse workflow, which would leave the forward one
// without it.
func AdmitCancel(name, pair string, views []View, last *Last) error {
	if name != pair {
		return fmt.Errorf("cannot cancel workflow %q: it is the reverse workflow of %q, which carries the writes back after a switch; "+
			"cancel the move with `rowlift workflow cancel %s` (after `rowlift workflow reverse %s` if it is switched)", name, pair, pair, pair)
	}
	if err := Idle(pair, last); err != nil {
		return err
	}
	for _, v := range views {
		if v.State == state.Switched {
			return fmt.Errorf("cannot cancel workflow %q: it is in state switched, its writes go to target %s since its switch; "+
				"reverse it first (`rowlift workflow reverse %s`) and then cancel, or complete it to keep the move (`rowlift workflow complete %s`)",
				name, v.Target, name, name)
		}
	}
	return nil
}

// Verifiable refuses a verify of workflow name on a target where its stream
// cannot run it: it runs on the stream, after the copy. (The pair must also
// be Idle.)
func Verifiable(name string, v View) error {
	switch v.State {
	case "":
		return fmt.Errorf("workflow %q is missing on target %s, a delete that did not finish: delete it again (`rowlift workflow delete %s`)",
			name, v.Target, name)
	case state.Running:
		return nil
	case state.Init, state.Copying:
		return fmt.Errorf("cannot verify workflow %q yet: its copy is not done on target %s (state %s); "+
			"wait until `rowlift workflow watch %s --until running` returns", name, v.Target, v.State, name)
	case state.Switched:
		return fmt.Errorf("cannot verify workflow %q: it is in state switched, its writes were switched to target %s and it waits for the "+
			"next switch; verify the workflow that replicates the writes now (`rowlift workflow verify %s`)", name, v.Target, partnerOf(name))
	}
	return fmt.Errorf("cannot verify workflow %q: it is in state %s on target %s, and a verify runs on its "+
		"stream: resume it first (`rowlift workflow resume %s`)", name, v.State, v.Target, name)
}

// partnerOf is the other workflow of name's pair.
func partnerOf(name string) string {
	if forward, ok := strings.CutSuffix(name, ReverseSuffix); ok {
		return forward
	}
	return name + ReverseSuffix
}
