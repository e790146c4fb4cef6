package coordinator

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/rowlift/rowlift/applier"
	"github.com/rowlift/rowlift/coordinator/cutover"
	"github.com/rowlift/rowlift/internal/frozen"
	"github.com/rowlift/rowlift/internal/grpctls"
	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/reshard"
	"github.com/rowlift/rowlift/internal/testhook"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// Defaults of a SwitchRequest's zero values.
const (
	DefaultMaxLag        = 5 * time.Second
	DefaultSwitchTimeout = time.Minute
	// hookTimeout bounds the routing hook: the switch is done by then, and
	// an operator waits for the answer.
	hookTimeout = 30 * time.Second
	// ReverseSuffix names a workflow's reverse workflow.
	ReverseSuffix = cutover.ReverseSuffix
	// resumeEvery is how often the coordinator looks for cutovers that a dead
	// coordinator left unfinished.
	resumeEvery = 2 * time.Second
	// leaseMargin is how long a LOCK freeze's lease outlasts the switch's
	// timeout, so the lock holds until the deadline's rollback releases it.
	leaseMargin = 10 * time.Second
)

// The directions of a cutover.
const (
	dirSwitch  = cutover.DirSwitch
	dirReverse = cutover.DirReverse
)

// pair is a workflow and its reverse, with the targets that hold each.
type pair struct {
	forward, reverse           *rowliftv1.WorkflowSpec
	forwardAt, reverseAt       []*target
	forwardViews, reverseViews []view
}

// side is one direction of a pair: old stops taking the writes' stream,
// new starts following the other way.
type side struct {
	old, new     *rowliftv1.WorkflowSpec
	oldAt, newAt []*target
}

func (p *pair) side(direction string) side {
	if direction == dirSwitch {
		return side{old: p.forward, new: p.reverse, oldAt: p.forwardAt, newAt: p.reverseAt}
	}
	return side{old: p.reverse, new: p.forward, oldAt: p.reverseAt, newAt: p.forwardAt}
}

// reverseSpec is the workflow that copies a switched workflow's target writes
// back: every target becomes a source (read by the streamer next to it) and
// every source a target (the coordinator's target of that source server).
func reverseSpec(f *rowliftv1.WorkflowSpec) *rowliftv1.WorkflowSpec {
	r := &rowliftv1.WorkflowSpec{Name: f.GetName() + ReverseSuffix, SourceDatabase: applier.TargetDatabase(f),
		TargetDatabase: f.GetSourceDatabase(), Options: proto.Clone(f.GetOptions()).(*rowliftv1.WorkflowOptions)}
	if r.Options == nil {
		r.Options = &rowliftv1.WorkflowOptions{}
	}
	r.Options.Throttle = nil // a reverse workflow has no copy to throttle
	// A reshard's reverse runs M→N with the old shards' ranges; a lone source
	// without one held the whole keyspace.
	sharded := reshard.Resharding(f)
	for _, t := range f.GetTargets() {
		r.Sources = append(r.Sources, &rowliftv1.SourceShard{Name: t.GetName(), StreamerAddress: t.GetReverseStreamerAddress(), ReverseTarget: t.GetName(),
			KeyRange: t.GetKeyRange()})
	}
	for _, s := range f.GetSources() {
		kr := s.GetKeyRange()
		if sharded && kr == "" {
			kr = "-"
		}
		r.Targets = append(r.Targets, &rowliftv1.TargetShard{Name: s.GetReverseTarget(), ReverseStreamerAddress: s.GetStreamerAddress(), KeyRange: kr})
	}
	for _, t := range f.GetTables() {
		r.Tables = append(r.Tables, &rowliftv1.TableSpec{Name: t.GetName(), Columns: t.GetColumns(), ShardingColumn: t.GetShardingColumn(),
			ShardingFunction: t.GetShardingFunction(), Reference: t.GetReference()})
	}
	return r
}

// checkSwitchable refuses a workflow a cutover cannot switch, saying what to
// configure.
func (s *Server) checkSwitchable(f *rowliftv1.WorkflowSpec) error {
	if strings.HasSuffix(f.GetName(), ReverseSuffix) {
		return status.Errorf(codes.InvalidArgument, "workflow %q is a reverse workflow: switch and reverse its forward workflow %q",
			f.GetName(), strings.TrimSuffix(f.GetName(), ReverseSuffix))
	}
	if len(f.GetName())+len(ReverseSuffix) > 64 {
		return status.Errorf(codes.FailedPrecondition, "workflow %q: its reverse workflow's name would exceed 64 characters; "+
			"create the workflow with a shorter name to switch it", f.GetName())
	}
	if (len(f.GetSources()) != 1 || len(f.GetTargets()) != 1) && !reshard.Resharding(f) {
		return status.Errorf(codes.FailedPrecondition, "workflow %q has %d sources and %d targets without key ranges: switching writes "+
			"needs every row to have one home on each side, which key ranges give; create it as a reshard (--target NAME=RANGE, "+
			"--source-range) or as 1-to-1 moves", f.GetName(), len(f.GetSources()), len(f.GetTargets()))
	}
	var missing []string
	for _, src := range f.GetSources() {
		switch {
		case src.GetReverseTarget() == "":
			missing = append(missing, fmt.Sprintf("source %s has no reverse target (create --source %s=ADDR --reverse-target %s=NAME, "+
				"where NAME is the source server configured on the coordinator with --target NAME=DSN)", src.GetName(), src.GetName(), src.GetName()))
		case s.targets[src.GetReverseTarget()] == nil:
			missing = append(missing, fmt.Sprintf("source %s's reverse target %q is not configured on this coordinator: add --target %s=DSN "+
				"(the source server)", src.GetName(), src.GetReverseTarget(), src.GetReverseTarget()))
		}
	}
	for _, t := range f.GetTargets() {
		if t.GetReverseStreamerAddress() == "" {
			missing = append(missing, fmt.Sprintf("target %s has no reverse streamer (create --reverse-streamer %s=ADDR: a streamer next to the target server)",
				t.GetName(), t.GetName()))
		}
	}
	for _, t := range f.GetTables() {
		if _, err := frozen.Name(t.GetName()); err != nil {
			missing = append(missing, err.Error())
		}
	}
	if len(missing) > 0 {
		return status.Errorf(codes.FailedPrecondition, "workflow %q cannot switch: %s", f.GetName(), strings.Join(missing, "; "))
	}
	return nil
}

// loadPair reads a forward workflow and its reverse (which may not exist yet).
func (s *Server) loadPair(ctx context.Context, ref *rowliftv1.WorkflowRef) (*pair, error) {
	f, at, err := s.locate(ctx, ref)
	if err != nil {
		return nil, err
	}
	if err := s.checkSwitchable(f); err != nil {
		return nil, err
	}
	p := &pair{forward: f, forwardAt: at, reverse: reverseSpec(f)}
	if p.reverseAt, err = s.specTargets(p.reverse); err != nil {
		return nil, err
	}
	if p.forwardViews, err = s.read(ctx, f.GetName(), at); err != nil {
		return nil, err
	}
	if p.reverseViews, err = s.read(ctx, p.reverse.GetName(), p.reverseAt); err != nil {
		return nil, err
	}
	for _, v := range p.reverseViews {
		if v.wf != nil {
			// The stored reverse spec carries its current table mapping.
			p.reverse = v.wf.Spec
			break
		}
	}
	return p, nil
}

// SwitchWorkflow moves a workflow's writes to its targets.
func (s *Server) SwitchWorkflow(ctx context.Context, req *rowliftv1.SwitchRequest) (*rowliftv1.SwitchResponse, error) {
	return s.cutover(ctx, req, dirSwitch)
}

// ReverseWorkflow moves a switched workflow's writes back to its sources.
func (s *Server) ReverseWorkflow(ctx context.Context, req *rowliftv1.SwitchRequest) (*rowliftv1.SwitchResponse, error) {
	return s.cutover(ctx, req, dirReverse)
}

func (s *Server) cutover(ctx context.Context, req *rowliftv1.SwitchRequest, direction string) (*rowliftv1.SwitchResponse, error) {
	p, err := s.loadPair(ctx, req.GetWorkflow())
	if err != nil {
		return nil, err
	}
	name := p.forward.GetName()
	home := p.forwardAt[0]
	timeout := time.Duration(req.GetTimeoutMs()) * time.Millisecond
	if timeout <= 0 {
		timeout = DefaultSwitchTimeout
	}
	unlock, err := home.lock(ctx, "rowlift.cutover."+name, timeout)
	if err != nil {
		return nil, err
	}
	defer unlock()
	store, err := home.open(ctx)
	if err != nil {
		return nil, err
	}
	prev, err := store.Journal(ctx, name)
	if err != nil && !errors.Is(err, state.ErrNotFound) {
		return nil, home.fail(err)
	}
	maxLag := time.Duration(req.GetMaxLagSeconds() * float64(time.Second))
	if maxLag <= 0 {
		maxLag = DefaultMaxLag
	}
	plan, err := cutover.AdmitCutover(p.admission(prev, maxLag, time.Now()), direction)
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	j := prev
	var cancelled []string
	if plan.Resume {
		s.log.Info("resuming an unfinished cutover", zap.String("workflow", name), zap.String("step", prev.Step))
	} else {
		if j, err = s.newJournal(ctx, p, req, direction, plan, timeout); err != nil {
			return nil, err
		}
		following := p.side(direction).new.GetName()
		for _, w := range plan.CancelVerify {
			spec, at := p.forward, p.forwardAt
			if w != name {
				spec, at = p.reverse, p.reverseAt
			}
			c, err := s.cancelVerify(ctx, spec, at, fmt.Sprintf("cancelled by the %s of %s before its freeze, which renames the tables "+
				"the verify reads; verify %s once the %s is done", direction, name, following, direction))
			if err != nil {
				return nil, err
			}
			if c != "" {
				cancelled = append(cancelled, c)
			}
		}
		if err := record(ctx, store, j); err != nil {
			return nil, home.fail(err)
		}
	}
	if err := s.drive(ctx, j); err != nil {
		return nil, err
	}
	resp, err := s.cutoverResponse(ctx, p, j)
	if len(cancelled) == 0 {
		return resp, err
	}
	what := strings.Join(cancelled, "; ")
	if err != nil {
		// Rolled back: the verify's workflow takes the stream again.
		return nil, status.Errorf(status.Code(err), "%s; before the freeze it %s: run it again (`rowlift workflow verify %s --wait`)",
			status.Convert(err).Message(), what, p.side(direction).old.GetName())
	}
	following := p.side(direction).new.GetName()
	resp.CancelledVerify = fmt.Sprintf("%s; run it again after the cutover, on %s (`rowlift workflow verify %s --wait`)", what, following, following)
	return resp, nil
}

// newJournal checks, past the admission that plan holds, what only the
// servers can tell (binlog settings, privileges) and returns the journal of a
// cutover that may start now.
func (s *Server) newJournal(ctx context.Context, p *pair, req *rowliftv1.SwitchRequest, direction string, plan cutover.Plan,
	timeout time.Duration) (*state.Journal, error) {
	name := p.forward.GetName()
	sd := p.side(direction)
	now := time.Now()
	// The following workflow must be able to stream from the side that gains
	// the writes: its server's binlog settings and tables, before anything is frozen.
	copied := map[string]state.TableCopy{}
	for _, t := range sd.new.GetTables() {
		copied[t.GetName()] = state.TableCopy{Done: true}
	}
	if _, _, _, err := s.validateSources(ctx, sd.new, copied); err != nil {
		return nil, err
	}
	j := &state.Journal{Workflow: name, Partner: p.reverse.GetName(), Direction: direction,
		Mode: req.GetFreeze(), UnfreezeMode: rowliftv1.FreezeMode_FREEZE_MODE_NONE, TimeoutMS: timeout.Milliseconds(),
		HookCmd: req.GetHookCmd(), StartedAtUS: now.UnixMicro(), DeadlineUS: now.Add(timeout).UnixMicro()}
	j.Enter(string(cutover.Freezing), "", now)
	if j.Mode == rowliftv1.FreezeMode_FREEZE_MODE_UNSPECIFIED {
		j.Mode = rowliftv1.FreezeMode_FREEZE_MODE_RENAME
	}
	if err := checkLockLease(j.Mode, timeout); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "cannot %s workflow %q: %v", direction, name, err)
	}
	if plan.UnfreezeRenamed {
		j.UnfreezeMode = rowliftv1.FreezeMode_FREEZE_MODE_RENAME
	}
	// The cutover writes the following workflow's state on the side gaining
	// the writes (for a first switch, the reverse targets, which creation
	// does not check), after the freeze: check it may before.
	for _, t := range sd.newAt {
		if err := t.check(ctx, state.Probes()); err != nil {
			return nil, status.Errorf(status.Code(err), "cannot %s workflow %q: %s", direction, name, status.Convert(err).Message())
		}
	}
	// The source users' privileges to freeze (and unfreeze) are checked here,
	// not at creation: see Streamer.CheckFreeze.
	if err := s.checkFreeze(ctx, sd.old, j.Mode); err != nil {
		return nil, status.Errorf(status.Code(err), "cannot %s workflow %q: %s", direction, name, status.Convert(err).Message())
	}
	if j.UnfreezeMode == rowliftv1.FreezeMode_FREEZE_MODE_RENAME {
		if err := s.checkFreeze(ctx, sd.new, j.UnfreezeMode); err != nil {
			return nil, status.Errorf(status.Code(err), "cannot %s workflow %q: %s", direction, name, status.Convert(err).Message())
		}
	}
	return j, nil
}

// lastOf is what a pair's last journal (nil: none) says of its tables.
func lastOf(j *state.Journal) *cutover.Last {
	if j == nil {
		return nil
	}
	return &cutover.Last{Direction: j.Direction, Step: cutover.Step(j.Step), FrozeRenamed: j.Renamed(),
		GainingRenamed: j.UnfreezeMode == rowliftv1.FreezeMode_FREEZE_MODE_RENAME}
}

// checkLockLease refuses a LOCK freeze whose lease (the timeout plus
// leaseMargin) would exceed the streamers' cap, before anything is frozen.
func checkLockLease(mode rowliftv1.FreezeMode, timeout time.Duration) error {
	if mode != rowliftv1.FreezeMode_FREEZE_MODE_LOCK || timeout+leaseMargin <= frozen.MaxLockLease {
		return nil
	}
	return fmt.Errorf("--timeout %s is too long for --freeze lock: the lock blocks every writer of the tables for up to the timeout "+
		"plus %s, and a lock's lease is capped at %s; use --timeout %s or less, or --freeze rename", timeout, leaseMargin,
		frozen.MaxLockLease, frozen.MaxLockLease-leaseMargin)
}

// admission is what the admission of a command reads of the pair: its views
// and its last journal (nil: none), judging lag at now against maxLag.
func (p *pair) admission(last *state.Journal, maxLag time.Duration, now time.Time) cutover.Pair {
	return cutover.Pair{Name: p.forward.GetName(), Forward: admissionViews(p.forwardViews, maxLag, now),
		Reverse: admissionViews(p.reverseViews, maxLag, now), Last: lastOf(last)}
}

// admissionViews is what the admission of a command reads of a workflow's
// views; the lag of its streams is judged at now against maxLag, unless
// maxLag is 0 (for commands that do not care).
func admissionViews(views []view, maxLag time.Duration, now time.Time) []cutover.View {
	out := make([]cutover.View, len(views))
	for i, v := range views {
		out[i] = cutover.View{Target: v.target}
		if v.wf == nil {
			continue
		}
		out[i].State = v.wf.State
		for _, c := range v.copies {
			if !c.Copied() && out[i].Copying == "" {
				out[i].Copying = c.Table
			}
		}
		for _, st := range v.streams {
			if lag := effectiveLag(st, now); maxLag > 0 && lag > maxLag && out[i].Lagging == "" {
				out[i].Lagging = fmt.Sprintf("stream %s -> %s lags %s, over the limit of %s", st.Source, v.target, lag.Round(time.Millisecond), maxLag)
			}
		}
		for _, tv := range v.verifies {
			out[i].Verifying = out[i].Verifying || !tv.Done
		}
	}
	return out
}

// drive runs a journal to its end, one recorded step at a time.
func (s *Server) drive(ctx context.Context, j *state.Journal) error {
	p, err := s.loadPair(ctx, &rowliftv1.WorkflowRef{Name: j.Workflow})
	if err != nil {
		return err
	}
	home := p.forwardAt[0]
	store, err := home.open(ctx)
	if err != nil {
		return err
	}
	sd := p.side(j.Direction)
	log := s.log.With(zap.String("workflow", j.Workflow), zap.String("direction", j.Direction))
	for {
		facts := cutover.Facts{NowUS: time.Now().UnixMicro(), DeadlineUS: j.DeadlineUS}
		if cutover.Step(j.Step) == cutover.Frozen {
			if facts.Applied, facts.Stuck, err = s.applied(ctx, sd, j.FreezePositions); err != nil {
				return err
			}
			if facts.Applied && j.Mode == rowliftv1.FreezeMode_FREEZE_MODE_LOCK {
				if facts.Applied, err = s.lockHeld(ctx, j, sd, store, log); err != nil {
					// Never park on a lock that may be gone; the deadline
					// rolls back if the streamers stay unreachable.
					log.Warn("cannot check the freeze lock before the park; retrying", zap.Error(err))
					facts.Applied = false
				}
			}
		}
		action, next, why := cutover.Next(cutover.Step(j.Step), facts)
		if action == cutover.None {
			return nil
		}
		if err := s.act(ctx, action, j, sd, store, log); err != nil {
			log.Warn("cutover step failed; retrying", zap.String("step", j.Step), zap.String("action", string(action)), zap.Error(err))
			// Before the park, retrying is safe and the deadline turns it into
			// a rollback (itself retried until the frozen side answers); after
			// it, the next request or the resume loop goes on.
			if step := cutover.Step(j.Step); step == cutover.Freezing || step == cutover.Frozen || step == cutover.RollingBack {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			return status.Errorf(codes.Unavailable, "cutover of %q at step %s: %v; the step is idempotent: run the same command again to resume",
				j.Workflow, j.Step, err)
		}
		if next == cutover.Step(j.Step) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		now := time.Now()
		j.Enter(string(next), why, now)
		if cutover.Finished(next) {
			j.FinishedAtUS = now.UnixMicro()
		}
		if err := record(context.WithoutCancel(ctx), store, j); err != nil {
			return home.fail(err)
		}
		log.Info("cutover step", zap.String("step", j.Step), zap.String("action", string(action)), zap.Int64("write_pause_ms", j.WritePauseMS()))
	}
}

// lockHeld checks, right before the park, that the LOCK freeze whose
// positions the journal holds still holds, by freezing again: a streamer that
// holds it renews its lease and answers the position at which it was taken,
// and one that lost it (restarted, lease passed, session killed) locks again
// at a later position. Writers went on while the tables were unlocked, so the
// freeze positions move there (recorded, so a resumed cutover waits for them
// too) and the stopping workflow must apply them before the park: false.
func (s *Server) lockHeld(ctx context.Context, j *state.Journal, sd side, store *state.Store, log *zap.Logger) (bool, error) {
	pos, err := s.freeze(ctx, sd.old, j.Mode, false, j.TimeoutMS)
	if err != nil {
		return false, err
	}
	var lost []string
	for src, p := range pos {
		same, err := gtid.Covers(j.FreezePositions[src], p)
		if err != nil {
			return false, fmt.Errorf("compare the freeze positions of %s: %w", src, err)
		}
		if !same {
			lost = append(lost, src)
		}
	}
	if len(lost) == 0 {
		return true, nil
	}
	slices.Sort(lost)
	moved := *j
	moved.FreezePositions = pos
	moved.Steps = slices.Clone(j.Steps) // Enter must not write into j's, which a failed record keeps
	moved.Enter(j.Step, fmt.Sprintf("the freeze lock on %s was lost (streamer restarted, lease passed or session killed) and taken again; "+
		"writes made meanwhile are applied before the switch", strings.Join(lost, ", ")), time.Now())
	if err := record(context.WithoutCancel(ctx), store, &moved); err != nil {
		return false, fmt.Errorf("record the new freeze positions: %w", err)
	}
	*j = moved
	log.Warn("freeze lock lost before the park and taken again: waiting for the new freeze positions", zap.Strings("sources", lost),
		zap.String("positions", strings.Join(formatPositions(pos), ", ")))
	return false, nil
}

// record saves the journal; tests pause here to kill processes at a step.
func record(ctx context.Context, store *state.Store, j *state.Journal) error {
	if err := store.SaveJournal(ctx, j); err != nil {
		return err
	}
	testhook.Delay(ctx, testhook.CutoverStep)
	return nil
}

// act performs one cutover action and puts what it learned in the journal.
func (s *Server) act(ctx context.Context, a cutover.Action, j *state.Journal, sd side, store *state.Store, log *zap.Logger) error {
	switch a {
	case cutover.Freeze:
		if j.FreezeAtUS == 0 {
			// Recorded before the freeze, so a resumed cutover still measures
			// the whole write pause.
			j.FreezeAtUS = time.Now().UnixMicro()
			if err := record(ctx, store, j); err != nil {
				return err
			}
		}
		pos, err := s.freeze(ctx, sd.old, j.Mode, false, j.TimeoutMS)
		if err != nil {
			return err
		}
		j.FreezePositions = pos
	case cutover.Wait, cutover.Abandon: // nothing but the record
	case cutover.Park:
		for _, t := range sd.oldAt {
			st, err := t.open(ctx)
			if err != nil {
				return err
			}
			msg := fmt.Sprintf("writes %s to its targets at %s", map[string]string{dirSwitch: "switched", dirReverse: "switched back"}[j.Direction],
				time.Now().UTC().Format(time.RFC3339))
			if _, err := st.Transition(ctx, sd.old.GetName(), []state.State{state.Running, state.Copying}, state.Switched, msg); err != nil {
				return t.fail(err)
			}
		}
	case cutover.UnfreezeGaining:
		pos, err := s.freeze(ctx, sd.new, j.UnfreezeMode, true, j.TimeoutMS)
		if err != nil {
			return err
		}
		j.StartPositions = pos
		j.WritableAtUS = time.Now().UnixMicro()
	case cutover.Follow:
		// The routing hook first: the gaining side takes writes since the
		// start positions were recorded, and the following workflow streams
		// from them whenever it starts, so the writers need not wait for it.
		switch {
		case j.Mode == rowliftv1.FreezeMode_FREEZE_MODE_LOCK:
			if err := s.renameLocked(ctx, j, sd, store, log); err != nil {
				return err
			}
		case j.HookCmd != "":
			j.HookOutput = runHook(ctx, j)
			log.Info("routing hook ran", zap.String("output", j.HookOutput))
		}
		j.Routed = true
		spec := proto.Clone(sd.new).(*rowliftv1.WorkflowSpec)
		for _, t := range spec.GetTables() {
			t.TargetTable = ""
			if j.Renamed() {
				t.TargetTable, _ = frozen.Name(t.GetName()) // checked by checkSwitchable
			}
		}
		for _, t := range sd.newAt {
			st, err := t.open(ctx)
			if err != nil {
				return err
			}
			msg := fmt.Sprintf("following the writes %s since %s", map[string]string{dirSwitch: "switched to its sources", dirReverse: "switched back to its sources"}[j.Direction],
				time.Now().UTC().Format(time.RFC3339))
			if _, err := st.Follow(ctx, spec, t.name, j.StartPositions, msg); err != nil {
				return t.fail(err)
			}
		}
	case cutover.Finish:
		if j.HookCmd != "" && !j.Routed && !j.LockRenamed { // an older coordinator's Follow did not run it
			j.HookOutput = runHook(ctx, j)
			log.Info("routing hook ran", zap.String("output", j.HookOutput))
		}
		if j.Mode == rowliftv1.FreezeMode_FREEZE_MODE_LOCK && !j.LockRenamed {
			// A journal of an older coordinator, whose following workflow writes
			// into the tables in place: release the lock as it did.
			if _, err := s.freeze(ctx, sd.old, j.Mode, true, j.TimeoutMS); err != nil {
				return err
			}
		}
	case cutover.Rollback:
		if _, err := s.freeze(ctx, sd.old, j.Mode, true, j.TimeoutMS); err != nil {
			return err
		}
		log.Warn("cutover rolled back; the frozen side is unfrozen and keeps the writes")
	}
	return nil
}

// renameLocked ends a LOCK freeze the way a RENAME freeze ends, once the
// stopping workflow is parked and the gaining side takes writes. Left in place
// once unlocked, the frozen side's tables would take the writes queued behind
// the lock, and any later ones, where no workflow streams them, and collide
// with the following workflow's. So, with the lock renewed (or taken again if
// it was lost, which the journal then reports), the routing hook runs while
// the writers wait; then the streamers rename the tables to their frozen names
// while the lock still holds (the writers queued behind it get "doesn't
// exist") and release it. The following workflow writes into the renamed
// tables, as after a RENAME freeze. The rename is in the frozen side's binlog
// after the freeze positions, where the parked workflow no longer reads: it
// restarts past it, at the positions after the next cutover's unfreeze.
//
// Repeated after a crash, the hook runs again and the rename changes nothing
// (renewing a lock on tables already renamed fails, and is not needed).
func (s *Server) renameLocked(ctx context.Context, j *state.Journal, sd side, store *state.Store, log *zap.Logger) error {
	pos, err := s.freeze(ctx, sd.old, j.Mode, false, j.TimeoutMS)
	if err != nil {
		log.Warn("cannot renew the freeze lock before the routing hook (the tables may be renamed already)", zap.Error(err))
	}
	var lost []string
	for src, p := range pos {
		if same, err := gtid.Covers(j.FreezePositions[src], p); err == nil && !same {
			lost = append(lost, src)
		}
	}
	if len(lost) > 0 {
		slices.Sort(lost)
		j.Message = fmt.Sprintf("the freeze lock on %s was lost after the park (coordinator away past its lease, or streamer restarted) "+
			"and taken again: writes made to the frozen tables meanwhile (up to %s) may have escaped the stream; verify the reverse workflow",
			strings.Join(lost, ", "), strings.Join(formatPositions(pos), ", "))
		log.Warn("freeze lock lost after the park", zap.Strings("sources", lost), zap.String("positions", strings.Join(formatPositions(pos), ", ")))
		if err := record(context.WithoutCancel(ctx), store, j); err != nil {
			return fmt.Errorf("record the lost lock: %w", err)
		}
	}
	if j.HookCmd != "" {
		j.HookOutput = runHook(ctx, j)
		log.Info("routing hook ran", zap.String("output", j.HookOutput))
	}
	if _, err := s.freeze(ctx, sd.old, rowliftv1.FreezeMode_FREEZE_MODE_RENAME, false, j.TimeoutMS); err != nil {
		return fmt.Errorf("rename the tables frozen by the lock: %w", err)
	}
	j.LockRenamed = true
	return nil
}

// runHook runs the operator's routing hook and returns its output, or why it failed.
func runHook(ctx context.Context, j *state.Journal) string {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hookTimeout)
	defer cancel()
	cmd := exec.CommandContext(hctx, "sh", "-c", j.HookCmd)
	cmd.Env = append(os.Environ(), "ROWLIFT_WORKFLOW="+j.Workflow, "ROWLIFT_DIRECTION="+j.Direction,
		fmt.Sprintf("ROWLIFT_WRITE_PAUSE_MS=%d", j.WritePauseMS()))
	out, err := cmd.CombinedOutput()
	text := strings.TrimSpace(string(out))
	if len(text) > 4096 {
		text = text[:4096] + "..."
	}
	if err != nil {
		return fmt.Sprintf("hook failed (%v): %s", err, text)
	}
	return text
}

// freeze freezes (or unfreezes) the tables of every source of spec through
// their streamers, and returns each source's position after it.
func (s *Server) freeze(ctx context.Context, spec *rowliftv1.WorkflowSpec, mode rowliftv1.FreezeMode, unfreeze bool, timeoutMS int64) (map[string]string, error) {
	req := freezeRequest(spec, mode)
	req.LeaseMs = timeoutMS + leaseMargin.Milliseconds()
	out := make([]string, len(spec.GetSources()))
	g, gctx := errgroup.WithContext(ctx)
	for i, src := range spec.GetSources() {
		g.Go(func() error {
			conn, client, err := s.dialStreamer(src)
			if err != nil {
				return err
			}
			defer conn.Close()
			call := client.Freeze
			if unfreeze {
				call = client.Unfreeze
			}
			cctx, cancel := context.WithTimeout(gctx, 30*time.Second)
			defer cancel()
			resp, err := call(cctx, req)
			if err != nil {
				return fmt.Errorf("streamer %s of %s: %s", src.GetStreamerAddress(), src.GetName(), grpctls.Explain(status.Convert(err).Message()))
			}
			out[i] = resp.GetPosition().GetGtidSet()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	pos := map[string]string{}
	for i, src := range spec.GetSources() {
		pos[src.GetName()] = out[i]
	}
	return pos, nil
}

// applied reports whether every stream of the stopping workflow has applied
// its source's freeze position, or why it never will.
func (s *Server) applied(ctx context.Context, sd side, freeze map[string]string) (bool, string, error) {
	all := true
	for _, t := range sd.oldAt {
		st, err := t.open(ctx)
		if err != nil {
			return false, "", err
		}
		w, err := st.Workflow(ctx, sd.old.GetName())
		if err != nil {
			return false, "", t.fail(err)
		}
		if w.State == state.Error || w.State == state.Stopped {
			return false, fmt.Sprintf("workflow %q is in state %s on target %s: %s", sd.old.GetName(), w.State, t.name, w.Message), nil
		}
		streams, err := st.Streams(ctx, sd.old.GetName())
		if err != nil {
			return false, "", t.fail(err)
		}
		for _, stream := range streams {
			ok, err := gtid.Covers(stream.Position, freeze[stream.Source])
			if err != nil {
				return false, "", err
			}
			all = all && ok
		}
	}
	return all, "", nil
}

func (s *Server) cutoverResponse(ctx context.Context, p *pair, j *state.Journal) (*rowliftv1.SwitchResponse, error) {
	if cutover.Step(j.Step) == cutover.RolledBack {
		return nil, status.Errorf(codes.Aborted, "%s of %q rolled back: %s; the frozen side was unfrozen and keeps taking writes",
			j.Direction, j.Workflow, j.Message)
	}
	w, err := s.workflow(ctx, p.forward, p.forwardAt)
	if err != nil {
		return nil, err
	}
	resp := &rowliftv1.SwitchResponse{Workflow: w, WritePauseMs: j.WritePauseMS(), ReverseWorkflow: j.Partner, HookOutput: j.HookOutput,
		FreezePositions: formatPositions(j.FreezePositions)}
	return resp, nil
}

func formatPositions(pos map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(pos)) {
		out = append(out, k+": "+pos[k])
	}
	return out
}

// cutoverStatus is a journal as the status shows it.
func cutoverStatus(j *state.Journal) *rowliftv1.CutoverStatus {
	steps := make([]*rowliftv1.CutoverStep, len(j.Steps))
	for i, s := range j.Steps {
		steps[i] = &rowliftv1.CutoverStep{Step: s.Step, AtUs: s.AtUS, Message: s.Message}
	}
	return &rowliftv1.CutoverStatus{Direction: j.Direction, Step: j.Step, ReverseWorkflow: j.Partner, FreezePositions: formatPositions(j.FreezePositions),
		WritePauseMs: j.WritePauseMS(), StartedAtUs: j.StartedAtUS, FinishedAtUs: j.FinishedAtUS, Message: j.Message, Steps: steps}
}

// lock takes a named lock on the target for the whole of an operation that
// must not run twice at once (two coordinators resuming the same cutover),
// waiting up to wait; unlock releases it.
func (t *target) lock(ctx context.Context, name string, wait time.Duration) (unlock func(), err error) {
	conn, err := t.db.Conn(ctx)
	if err != nil {
		return nil, t.fail(err)
	}
	server := serverLockName(name)
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", server, max(int64(wait.Seconds()), 0)).Scan(&got); err != nil {
		conn.Close()
		return nil, t.fail(err)
	}
	if got.Int64 != 1 {
		conn.Close()
		return nil, status.Errorf(codes.Aborted, "another coordinator is running %s on target %s; wait for it, then retry", name, t.name)
	}
	return func() {
		conn.ExecContext(context.WithoutCancel(ctx), "DO RELEASE_LOCK(?)", server) //nolint:errcheck // closing the connection releases it too
		conn.Close()
	}, nil
}

// Run resumes, until ctx ends, the cutovers that a coordinator left unfinished
// when it died, so a source frozen by a dead coordinator is switched or
// unfrozen without an operator. It looks at once, then every resumeEvery: a
// restarted coordinator's first act is to end the freeze its predecessor left.
func (s *Server) Run(ctx context.Context) {
	tick := time.NewTicker(resumeEvery)
	defer tick.Stop()
	for {
		s.resumeUnfinished(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// resumeUnfinished drives each unfinished journal on every target.
func (s *Server) resumeUnfinished(ctx context.Context) {
	for _, t := range s.targets {
		st, err := t.open(ctx)
		if err != nil {
			continue
		}
		names, err := st.UnfinishedJournals(ctx)
		if err != nil {
			continue
		}
		for _, name := range names {
			s.resume(ctx, t, name)
		}
	}
}

// resume drives one unfinished journal if no one else does.
func (s *Server) resume(ctx context.Context, t *target, name string) {
	unlock, err := t.lock(ctx, "rowlift.cutover."+name, 0)
	if err != nil {
		return // someone is driving it
	}
	defer unlock()
	st, err := t.open(ctx)
	if err != nil {
		return
	}
	j, err := st.Journal(ctx, name)
	if err != nil || cutover.Finished(cutover.Step(j.Step)) {
		return
	}
	s.log.Info("resuming a cutover left unfinished", zap.String("workflow", name), zap.String("step", j.Step))
	if err := s.drive(ctx, j); err != nil {
		s.log.Warn("cannot finish the cutover yet", zap.String("workflow", name), zap.Error(err))
	}
}
