package cutover

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/state"
)

// The pair model: a pure world of one workflow pair (the forward workflow
// streams side S into side T, its reverse T into S), in which every operator
// command, every fault (a coordinator crash at every driver operation, an
// applier down, a workflow failing, a deadline passing) and every write and
// stream catching up is tried in every reachable state. Cutovers are driven
// by the real Next one driver operation at a time, and commands are admitted
// by the real admission functions; after every event the invariants of
// checkWorld hold, a refused command named the state and the command to run
// and changed nothing, and from every state a crash can leave, re-running
// the command or the resume loop finishes the cutover.
//
// The exploration is breadth first over deduplicated worlds, to the fixpoint:
// every event is tried from every reachable world, so every sequence of any
// length is covered (two rolled-back cutovers, a crash before and after the
// action of every step: TestPairModel asserts that those were reached).

// The two sides; a side's index is also that of the workflow streaming from
// it (the forward workflow reads S, the reverse one T).
const (
	sideS = 0
	sideT = 1
)

var workflowNames = [2]string{"wf", "wf" + ReverseSuffix}

// tables is how a side holds the pair's tables.
type tables uint8

const (
	// live: in place and taking the application's writes when routed there.
	live tables = iota
	// inPlace: in place, not taking writes: a copy's target, or frozen by a
	// NONE freeze (the operator stopped the writers).
	inPlace
	// renamed: under their frozen names (RENAME freeze, or LOCK turned into it).
	renamed
	// locked: in place under a freeze lock.
	locked
)

func (t tables) String() string { return [...]string{"live", "in place", "renamed", "locked"}[t] }

// mode is a cutover's freeze mode.
type mode uint8

const (
	modeRename mode = iota
	modeLock
	modeNone
)

func (m mode) String() string { return [...]string{"rename", "lock", "none"}[m] }

// wfState is a workflow's state.State, small for the visited set's sake.
type wfState uint8

const (
	wfMissing wfState = iota
	wfInit
	wfCopying
	wfRunning
	wfStopped
	wfError
	wfSwitched
)

var wfStates = [...]state.State{"", state.Init, state.Copying, state.Running, state.Stopped, state.Error, state.Switched}

func (s wfState) state() state.State { return wfStates[s] }

func wfStateOf(st state.State) wfState { return wfState(slices.Index(wfStates[:], st)) }

// stepCode is a Step, small for the visited set's sake.
type stepCode uint8

var steps = [...]Step{Freezing, Frozen, RollingBack, Applied, Writable, Started, Done, RolledBack}

func (c stepCode) step() Step { return steps[c] }

func codeOf(s Step) stepCode { return stepCode(slices.Index(steps[:], s)) }

// dirs are the directions by the index of the side each freezes.
var dirs = [2]string{DirSwitch, DirReverse}

// journal is the pair's one journal row.
type journal struct {
	on bool
	// dir indexes dirs; it is also the side the cutover freezes.
	dir            uint8
	step           stepCode
	mode           mode
	gainingRenamed bool // the UnfreezeMode its admission chose
	lockRenamed    bool
	late           bool // past the deadline
	// covers: the stopping workflow's stream has applied the freeze position.
	covers bool
}

// driver is a coordinator driving the journal: a command's request, or the
// resume loop (cmd "").
type driver struct {
	on bool
	// cmd is the command's direction (dirs) plus one; 0: the resume loop.
	cmd   uint8
	acted bool // performed the action for next, not yet recorded
	next  stepCode
}

// pairWorld is everything the model tracks of a pair; it is comparable, the
// key of the visited set.
type pairWorld struct {
	sides    [2]tables
	wf       [2]wfState
	copyDone bool // the forward workflow's copy
	j        journal
	drv      driver
	// pending[x]: writes committed on side x that its streaming workflow has
	// not applied yet.
	pending [2]bool
	down    [2]bool // the workflow's applier is down
	verify  [2]bool // a verify of the workflow runs
	// into[w]: workflow w writes into its target's frozen names (the table
	// mapping the cutover that started it gave it).
	into   [2]bool
	routed uint8 // the side the application writes to
	gone   bool  // completed or cancelled
	// rollbacks counts rolled-back cutovers (up to 2), so the test can tell
	// that the exploration covered two of them.
	rollbacks uint8
}

func initial() pairWorld {
	return pairWorld{sides: [2]tables{live, inPlace}, wf: [2]wfState{wfInit, wfMissing}, routed: sideS}
}

// rules are the decisions under test; broken variants replace some.
type rules struct {
	next   func(Step, Facts) (Action, Step, string)
	admit  func(Pair, string) (Plan, error)
	cancel func(name, pair string, views []View, last *Last) error
	// verifyIdle is the cutover check of a verify of workflow i.
	verifyIdle func(i int, last *Last) error
}

var realRules = rules{next: Next, admit: AdmitCutover, cancel: AdmitCancel,
	verifyIdle: func(_ int, last *Last) error { return Idle(workflowNames[0], last) }}

type kind uint8

const (
	evStart kind = iota
	evStop
	evResume
	evVerify
	evVerifyCancel
	evSwitch
	evReverse
	evComplete
	evCancel
	evCrash
	evResumeLoop
	evDrive
	evRecord
	evDeadline
	evWrite
	evStream
	evCopied
	evDown
	evFail
)

type event struct {
	k   kind
	arg uint8
}

func (e event) String() string {
	name := [...]string{"start", "stop", "resume", "verify", "verify cancel", "switch", "reverse", "complete", "cancel", "crash",
		"resume loop", "drive", "record", "deadline", "write", "stream", "copied", "applier down/up", "fail"}[e.k]
	switch e.k {
	case evStart, evStop, evResume, evVerify, evVerifyCancel, evCancel, evDown, evFail:
		return name + " " + workflowNames[e.arg]
	case evSwitch, evReverse:
		return name + " --freeze " + mode(e.arg).String()
	case evWrite, evStream:
		return name + " " + "ST"[e.arg:e.arg+1]
	}
	return name
}

var allEvents = func() []event {
	var out []event
	for k := evStart; k <= evFail; k++ {
		n := uint8(1)
		switch k {
		case evStop, evResume, evVerify, evVerifyCancel, evCancel, evDown, evFail, evWrite, evStream:
			n = 2
		case evSwitch, evReverse:
			n = 3
		}
		for a := range n {
			out = append(out, event{k, a})
		}
	}
	return out
}()

func (w pairWorld) last() *Last {
	if !w.j.on {
		return nil
	}
	return &Last{Direction: dirs[w.j.dir], Step: w.j.step.step(), FrozeRenamed: w.j.mode == modeRename || w.j.lockRenamed, GainingRenamed: w.j.gainingRenamed}
}

func (w pairWorld) view(i int) []View {
	v := View{Target: "ST"[1-i : 2-i], State: w.wf[i].state(), Verifying: w.verify[i]}
	if i == 0 && !w.copyDone {
		v.Copying = "t"
	}
	if w.down[i] {
		v.Lagging = fmt.Sprintf("stream %s -> %s lags 9s, over the limit of 5s", "ST"[i:i+1], v.Target)
	}
	return []View{v}
}

func (w pairWorld) pair() Pair {
	return Pair{Name: workflowNames[0], Forward: w.view(0), Reverse: w.view(1), Last: w.last()}
}

// inFlight: a cutover's journal has not ended; the sides may both be frozen.
func (w pairWorld) inFlight() bool { return w.j.on && !Finished(w.j.step.step()) }

// refusal is a command's refusal: the test checks its message.
type refusal struct{ err error }

var namesState = regexp.MustCompile(`state \w+|at step \w+|missing|still copying|lags|not switched|reverse workflow of|is done|rolled back`)

// apply runs event e on w under r. It returns the next pairWorld, or a
// violation; a refused command returns w and its refusal.
func apply(r rules, w pairWorld, e event) (pairWorld, *refusal, error) {
	switch e.k {
	case evStart, evStop, evResume:
		i := int(e.arg)
		if w.wf[i] == wfMissing {
			return w, nil, nil // not found: nothing to move
		}
		o := [...]Op{evStart: OpStart, evStop: OpStop, evResume: OpResume}[e.k]
		to, move, err := Move(o, workflowNames[i], w.wf[i].state(), i == 1 || w.copyDone)
		if err != nil {
			return w, &refusal{err}, nil
		}
		if move {
			w.wf[i] = wfStateOf(to)
		}
	case evVerify:
		i := int(e.arg)
		if w.wf[i] == wfMissing {
			return w, nil, nil
		}
		if err := r.verifyIdle(i, w.last()); err != nil {
			return w, &refusal{err}, nil
		}
		if err := Verifiable(workflowNames[i], w.view(i)[0]); err != nil {
			return w, &refusal{err}, nil
		}
		w.verify[i] = true
	case evVerifyCancel:
		w.verify[e.arg] = false
	case evSwitch, evReverse:
		if w.gone || w.drv.on {
			return w, nil, nil // not found, or the cutover lock is held
		}
		d := uint8(e.k - evSwitch)
		plan, err := r.admit(w.pair(), dirs[d])
		if err != nil {
			return w, &refusal{err}, nil
		}
		if plan.Resume {
			w.drv = driver{on: true, cmd: d + 1}
			break
		}
		if w.inFlight() {
			return w, nil, fmt.Errorf("a %s started a second freeze on top of the %s at step %s", dirs[d], dirs[w.j.dir], w.j.step.step())
		}
		for _, name := range plan.CancelVerify {
			w.verify[slices.Index(workflowNames[:], name)] = false
		}
		w.j = journal{on: true, dir: d, step: codeOf(Freezing), mode: mode(e.arg), gainingRenamed: plan.UnfreezeRenamed}
		w.drv = driver{on: true, cmd: d + 1}
	case evComplete:
		if w.gone {
			return w, nil, nil
		}
		sourceRenamed, err := AdmitComplete(w.pair())
		if err != nil {
			return w, &refusal{err}, nil
		}
		if sourceRenamed != (w.sides[sideS] == renamed) {
			return w, nil, fmt.Errorf("complete names the source tables as renamed=%v, but they are %s", sourceRenamed, w.sides[sideS])
		}
		if w.sides[sideT] != live || w.routed != sideT {
			return w, nil, fmt.Errorf("complete succeeded with the targets' tables %s", w.sides[sideT])
		}
		w.gone, w.wf, w.verify = true, [2]wfState{}, [2]bool{}
	case evCancel:
		i := int(e.arg)
		if w.wf[i] == wfMissing {
			return w, nil, nil
		}
		if err := r.cancel(workflowNames[i], workflowNames[0], w.view(i), w.last()); err != nil {
			return w, &refusal{err}, nil
		}
		if i == 1 { // a cancel of the reverse workflow alone removes it alone
			w.wf[1], w.verify[1] = wfMissing, false
			break
		}
		if w.sides[sideS] != live || w.routed != sideS {
			return w, nil, fmt.Errorf("cancel succeeded with the sources' tables %s", w.sides[sideS])
		}
		if w.into[0] != (w.sides[sideT] == renamed) {
			return w, nil, fmt.Errorf("cancel names the target tables as renamed=%v, but they are %s", w.into[0], w.sides[sideT])
		}
		w.gone, w.wf, w.verify = true, [2]wfState{}, [2]bool{}
	case evCrash:
		w.drv = driver{}
	case evResumeLoop:
		if !w.drv.on && w.inFlight() && !w.gone {
			w.drv = driver{on: true}
		}
	case evDrive:
		if !w.drv.on || w.drv.acted {
			break
		}
		return drive(r, w)
	case evRecord:
		if !w.drv.on || !w.drv.acted {
			break
		}
		w.j.step, w.drv.acted = w.drv.next, false
		if w.j.step.step() == RolledBack {
			w.rollbacks = min(w.rollbacks+1, 2)
		}
	case evDeadline:
		if w.inFlight() {
			w.j.late = true
		}
	case evWrite:
		x := int(e.arg)
		if !w.gone && int(w.routed) == x && w.sides[x] == live {
			w.pending[x] = true
		}
	case evStream:
		x := int(e.arg)
		if w.pending[x] && (w.wf[x] == wfRunning || w.wf[x] == wfCopying) && !w.down[x] {
			w.pending[x] = false
			if w.inFlight() && int(w.j.dir) == x {
				w.j.covers = true
			}
		}
	case evCopied:
		if w.wf[0] == wfCopying && !w.down[0] {
			w.wf[0], w.copyDone = wfRunning, true
		}
	case evDown:
		if !w.gone {
			w.down[e.arg] = !w.down[e.arg]
		}
	case evFail:
		if w.wf[e.arg] == wfRunning || w.wf[e.arg] == wfCopying {
			w.wf[e.arg] = wfError
		}
	}
	return w, nil, nil
}

// drive is one turn of the coordinator's drive loop: observe, ask Next,
// perform the action (recording it is the next event, so a crash can fall
// between the two).
func drive(r rules, w pairWorld) (pairWorld, *refusal, error) {
	x := int(w.j.dir)
	y := 1 - x
	dir := dirs[x]
	f := Facts{NowUS: 1, DeadlineUS: 2}
	if w.j.late {
		f.NowUS = 3
	}
	if w.j.step.step() == Frozen {
		if st := w.wf[x]; st == wfError || st == wfStopped {
			f.Stuck = "the stopping workflow is in state " + string(st.state())
		} else {
			f.Applied = w.j.covers
		}
		if f.Applied && w.j.mode == modeLock && w.sides[x] != locked {
			// lockHeld: the lock was lost; freezing again moves the freeze
			// positions to where it is taken again.
			w.sides[x], w.j.covers, f.Applied = locked, !w.pending[x], false
		}
	}
	a, next, _ := r.next(w.j.step.step(), f)
	switch a {
	case None:
		if w.drv.cmd != 0 && w.j.step.step() == Done {
			// a switch names side T, a reverse side S
			want := 2 - int(w.drv.cmd)
			if w.sides[want] != live || int(w.routed) != want {
				return w, nil, fmt.Errorf("%s reported success with the side it names %s", dirs[w.drv.cmd-1], w.sides[want])
			}
		}
		w.drv = driver{}
		return w, nil, nil
	case Wait:
		return w, nil, nil
	case Freeze:
		if w.verify[0] || w.verify[1] {
			return w, nil, fmt.Errorf("the %s froze side %s while a verify runs on it", dir, "ST"[x:x+1])
		}
		if w.sides[x] == live {
			w.sides[x] = [...]tables{renamed, locked, inPlace}[w.j.mode]
		}
		w.j.covers = !w.pending[x]
	case Park:
		if w.pending[x] {
			return w, nil, fmt.Errorf("the %s parked %s with writes on side %s it has not applied", dir, workflowNames[x], "ST"[x:x+1])
		}
		if w.wf[x] == wfRunning || w.wf[x] == wfCopying {
			w.wf[x] = wfSwitched
		}
	case UnfreezeGaining:
		switch {
		case w.j.gainingRenamed && w.sides[y] == renamed:
			w.sides[y] = live
		case w.j.gainingRenamed && w.sides[y] != live:
			return w, nil, fmt.Errorf("the %s renames back tables that are %s", dir, w.sides[y])
		case !w.j.gainingRenamed && w.sides[y] == inPlace:
			w.sides[y] = live
		}
		w.pending[y] = false // the following workflow starts here
	case Follow:
		if w.j.mode == modeLock {
			w.sides[x], w.j.lockRenamed, w.routed = renamed, true, uint8(y)
		}
		if w.wf[y] == wfMissing || w.wf[y] == wfSwitched {
			w.wf[y] = wfRunning
			w.into[y] = w.j.mode != modeNone
		}
	case Finish:
		w.routed = uint8(y)
	case Rollback:
		w.sides[x] = live
	}
	w.drv.acted, w.drv.next = true, codeOf(next)
	return w, nil, nil
}

// checkWorld is the invariants that hold after every event.
func checkWorld(w pairWorld) error {
	if w.inFlight() {
		return nil
	}
	var lives []int
	for x, t := range w.sides {
		if t == live {
			lives = append(lives, x)
		}
	}
	if len(lives) != 1 {
		return fmt.Errorf("no cutover runs, and the sides' tables are S %s, T %s: %d live", w.sides[0], w.sides[1], len(lives))
	}
	l := lives[0]
	if w.gone {
		return nil
	}
	if int(w.routed) != l {
		return fmt.Errorf("the writes go to side %s, whose tables are %s", "ST"[w.routed:w.routed+1], w.sides[w.routed])
	}
	if st := w.wf[l]; st == wfMissing || st == wfSwitched {
		return fmt.Errorf("side %s takes the writes, and %s, which streams them, is %q", "ST"[l:l+1], workflowNames[l], st.state())
	}
	if n := 1 - l; w.into[l] != (w.sides[n] == renamed) {
		return fmt.Errorf("%s writes into renamed=%v tables on side %s, which holds them %s", workflowNames[l], w.into[l], "ST"[n:n+1], w.sides[n])
	}
	return nil
}

type node struct {
	w      pairWorld
	parent int32
	ev     event
	depth  int32
}

// exploration is what explore found.
type exploration struct {
	states, transitions, maxDepth int
	violation                     error
	trace                         []string
	// crashedAt are the (direction, step, acted) at which a crash was tried.
	crashedAt  map[string]bool
	rollbacks2 bool
}

// explore visits every state reachable from the initial pairWorld under r,
// breadth first, and stops at the first violation with the events leading
// to it.
func explore(r rules) exploration {
	nodes := []node{{w: initial(), parent: -1}}
	seen := map[pairWorld]int32{nodes[0].w: 0}
	ex := exploration{crashedAt: map[string]bool{}}
	checked := map[string]bool{} // refusal messages found to name a state and a command
	fail := func(i int32, e event, err error) exploration {
		for ; i > 0; i = nodes[i].parent {
			ex.trace = append(ex.trace, nodes[i].ev.String())
		}
		slices.Reverse(ex.trace)
		ex.trace = append(ex.trace, e.String())
		ex.violation = err
		return ex
	}
	for i := int32(0); int(i) < len(nodes); i++ {
		w := nodes[i].w
		if err := converges(r, w); err != nil {
			return fail(i, event{k: evResumeLoop}, err)
		}
		ex.rollbacks2 = ex.rollbacks2 || w.rollbacks == 2
		for _, e := range allEvents {
			next, ref, err := apply(r, w, e)
			ex.transitions++
			if err == nil && ref != nil {
				if next != w {
					err = fmt.Errorf("refused (%v) but changed the pairWorld", ref.err)
				} else if msg := ref.err.Error(); !checked[msg] {
					if !strings.Contains(msg, "rowlift workflow ") || !namesState.MatchString(msg) {
						err = fmt.Errorf("refusal names no state or no command: %s", msg)
					}
					checked[msg] = true
				}
			}
			if err == nil {
				err = checkWorld(next)
			}
			if err != nil {
				return fail(i, e, err)
			}
			if e.k == evCrash && w.drv.on {
				ex.crashedAt[fmt.Sprintf("%s/%s/%v", dirs[w.j.dir], w.j.step.step(), w.drv.acted)] = true
			}
			if _, ok := seen[next]; !ok {
				seen[next] = int32(len(nodes))
				nodes = append(nodes, node{w: next, parent: i, ev: e, depth: nodes[i].depth + 1})
				ex.maxDepth = max(ex.maxDepth, int(nodes[i].depth+1))
			}
		}
	}
	ex.states = len(nodes)
	return ex
}

// converges checks that a journal a crash left unfinished in w ends, driven
// by the resume loop alone with time passing (streams down, workflows
// failed: whatever the pairWorld), and that re-running its command resumes it.
func converges(r rules, w pairWorld) error {
	if !w.inFlight() || w.gone {
		return nil
	}
	if !w.drv.on {
		plan, err := r.admit(w.pair(), dirs[w.j.dir])
		if err != nil || !plan.Resume {
			return fmt.Errorf("re-running the %s at step %s does not resume it: %+v, %v", dirs[w.j.dir], w.j.step.step(), plan, err)
		}
		w.drv = driver{on: true}
	}
	for range 50 {
		if !w.drv.on {
			return nil
		}
		e := event{k: evDrive}
		if w.drv.acted {
			e = event{k: evRecord}
		}
		next, _, err := apply(r, w, e)
		if err == nil {
			err = checkWorld(next)
		}
		if err != nil {
			return fmt.Errorf("resuming: %w", err)
		}
		if next == w { // waiting: let the deadline pass
			next.j.late = true
		}
		w = next
	}
	return fmt.Errorf("the %s does not end: step %s", dirs[w.j.dir], w.j.step.step())
}

// TestPairModel explores every sequence of commands and faults on a pair.
func TestPairModel(t *testing.T) {
	ex := explore(realRules)
	if ex.violation != nil {
		t.Fatalf("%v\nafter: %s", ex.violation, strings.Join(ex.trace, ", "))
	}
	t.Logf("%d states, %d transitions (event sequences extended by one event), BFS depth %d", ex.states, ex.transitions, ex.maxDepth)
	require.True(t, ex.rollbacks2, "two rolled-back cutovers were never reached")
	for _, dir := range []string{DirSwitch, DirReverse} {
		for _, step := range []Step{Freezing, Frozen, RollingBack, Applied, Writable, Started} {
			for _, acted := range []bool{false, true} {
				require.True(t, ex.crashedAt[fmt.Sprintf("%s/%s/%v", dir, step, acted)], "no crash of a %s at step %s (acted %v)", dir, step, acted)
			}
		}
	}
}

// TestPairModelCatchesBrokenVariants: the exploration finds a violation in
// each of these, the first being how rowlift chose the unfreeze mode before
// GainingRenamed.
func TestPairModelCatchesBrokenVariants(t *testing.T) {
	variants := map[string]struct {
		r    rules
		want string
	}{
		"unfreeze renames only after a done cutover": {with(realRules, func(r *rules) { r.admit = oldUnfreezeRule }), "0 live"},
		"a second freeze on an unfinished journal": {with(realRules, func(r *rules) {
			r.admit = func(p Pair, dir string) (Plan, error) {
				if p.Last != nil && !Finished(p.Last.Step) {
					p.Last = nil
				}
				return AdmitCutover(p, dir)
			}
		}), "does not resume it"},
		"a cutover that leaves a verify running": {with(realRules, func(r *rules) {
			r.admit = func(p Pair, dir string) (Plan, error) {
				plan, err := AdmitCutover(p, dir)
				plan.CancelVerify = nil
				return plan, err
			}
		}), "while a verify runs"},
		"a rollback unfreezes before it is recorded": {with(realRules, func(r *rules) {
			r.next = func(s Step, f Facts) (Action, Step, string) {
				a, next, why := Next(s, f)
				if a == Abandon {
					return Rollback, RolledBack, why
				}
				return a, next, why
			}
		}), "2 live"},
		// rowlift before this model: the reverse workflow could be cancelled
		// on its own, and a verify of it looked for a journal under its own
		// name, where there is none.
		"a cancel of the reverse workflow": {with(realRules, func(r *rules) {
			r.cancel = func(_, pair string, views []View, last *Last) error { return AdmitCancel(pair, pair, views, last) }
		}), "wf_reverse, which streams them"},
		"a verify of the reverse workflow blind to the cutover": {with(realRules, func(r *rules) {
			r.verifyIdle = func(i int, last *Last) error {
				if i == 1 {
					return nil
				}
				return Idle(workflowNames[0], last)
			}
		}), "while a verify runs"},
	}
	for name, v := range variants {
		ex := explore(v.r)
		require.Error(t, ex.violation, "broken variant %q passed the model", name)
		require.Contains(t, ex.violation.Error(), v.want, name)
		t.Logf("%s: %v\n  after: %s", name, ex.violation, strings.Join(ex.trace, ", "))
	}
}

// with is r changed by change: a broken variant.
func with(r rules, change func(*rules)) rules {
	change(&r)
	return r
}

// oldUnfreezeRule is how rowlift chose the unfreeze mode before
// GainingRenamed: RENAME only after a Done cutover that renamed.
func oldUnfreezeRule(p Pair, dir string) (Plan, error) {
	plan, err := AdmitCutover(p, dir)
	if err == nil && !plan.Resume {
		plan.UnfreezeRenamed = p.Last != nil && p.Last.Step == Done && p.Last.FrozeRenamed
	}
	return plan, err
}

// TestPairModelReplaysIssue23 replays failure 1 of issue 23 (switch, reverse,
// a switch that rolls back, switch) on the model: the old unfreeze rule
// leaves both sides frozen, GainingRenamed the targets live.
func TestPairModelReplaysIssue23(t *testing.T) {
	cut := func(k kind) []event {
		out := []event{{k, uint8(modeRename)}}
		for range 5 { // freeze, park, unfreeze, follow, finish
			out = append(out, event{k: evDrive}, event{k: evRecord})
		}
		return append(out, event{k: evDrive}) // the response
	}
	script := []event{{k: evStart}, {k: evCopied}}
	script = append(script, cut(evSwitch)...)
	script = append(script, cut(evReverse)...)
	// A write the forward workflow has not applied when the switch freezes
	// the sources, and still has not by the deadline: the switch rolls back.
	script = append(script, event{evWrite, sideS}, event{evSwitch, uint8(modeRename)}, event{k: evDrive}, event{k: evRecord},
		event{k: evDeadline}, event{k: evDrive}, event{k: evRecord}, event{k: evDrive}, event{k: evRecord}, event{k: evDrive},
		event{evStream, sideS})
	script = append(script, cut(evSwitch)...)
	replay := func(r rules) (pairWorld, error) {
		w := initial()
		for i, e := range script {
			next, ref, err := apply(r, w, e)
			if err == nil && ref != nil {
				err = ref.err
			}
			if err == nil {
				err = checkWorld(next)
			}
			if err != nil {
				return w, fmt.Errorf("event %d (%s): %w", i, e, err)
			}
			w = next
		}
		return w, nil
	}
	w, err := replay(realRules)
	require.NoError(t, err)
	require.Equal(t, [2]tables{renamed, live}, w.sides)
	require.Equal(t, Done, w.j.step.step())
	require.Equal(t, uint8(1), w.rollbacks)
	_, err = replay(with(realRules, func(r *rules) { r.admit = oldUnfreezeRule }))
	require.ErrorContains(t, err, "S renamed, T renamed: 0 live")
}
