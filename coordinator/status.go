package coordinator

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rowlift/rowlift/internal/keyrange"
	"github.com/rowlift/rowlift/internal/reshard"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

const (
	// CatchUpLag is the lag above which a workflow whose copy is done is
	// catching up rather than running: what "the target follows the source" means.
	CatchUpLag = 5 * time.Second
	// staleAfter is how long a stream may commit nothing before its lag is
	// counted up to now: a healthy stream commits at least every heartbeat (1 s)
	// or chunk, so one that does not is stalled, and its last lag would flatter it.
	staleAfter = 10 * time.Second
	// rateWindow is how far back rates and the catch-up speed are measured, so
	// they follow a copy that slows down or speeds up (a throttle, a busy target).
	rateWindow = 30 * time.Second
	// minSpan is the least time between two samples for a rate measured from them.
	minSpan = 3 * time.Second
	// sampleEvery is the least time between two kept samples, which bounds the
	// memory a busy client's reads take.
	sampleEvery = 250 * time.Millisecond
	// keepIdle is how long the samples of a workflow nobody reads are kept.
	keepIdle = 10 * time.Minute
	// noApplierAfter is how long a workflow that should be moving may go with
	// no applier on its target before status says so: appliers pick up new
	// workflows within their poll interval.
	noApplierAfter = 5 * time.Second
)

// view is one target's record of a workflow: what status is computed from.
type view struct {
	target   string
	wf       *state.Workflow
	copies   []state.TableCopy
	streams  []state.Stream
	verifies []state.TableVerify
	// applier is whether an applier runs on the target.
	applier bool
}

// sample is what one status read saw of one stream: its rows copied per table
// and its lag. Samples kept between reads give rates and the catch-up speed.
type sample struct {
	at   time.Time
	rows map[string]int64
	lag  time.Duration
}

// streamKey names a (target, source) stream of a workflow.
func streamKey(target, source string) string { return target + "/" + source }

// history keeps recent samples of every workflow this coordinator was asked
// about. It is only an aid to estimates: a restarted coordinator starts with
// none and falls back on the rates recorded in the sidecar schema.
type history struct {
	mu sync.Mutex
	// byWorkflow is keyed by name and creation time, so a workflow deleted and
	// created again starts afresh.
	byWorkflow map[string]*workflowSamples
}

type workflowSamples struct {
	read    time.Time
	streams map[string][]sample
}

func newHistory() *history { return &history{byWorkflow: map[string]*workflowSamples{}} }

// record adds the samples of now's views and returns, per stream, the samples
// to measure rates against (the oldest within rateWindow first).
func (h *history) record(name string, views []view, now time.Time) map[string][]sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, ws := range h.byWorkflow {
		if now.Sub(ws.read) > keepIdle {
			delete(h.byWorkflow, k)
		}
	}
	var created time.Time
	for _, v := range views {
		if v.wf != nil {
			created = v.wf.CreatedAt
			break
		}
	}
	key := fmt.Sprintf("%s@%d", name, created.UnixMicro())
	ws := h.byWorkflow[key]
	if ws == nil {
		ws = &workflowSamples{streams: map[string][]sample{}}
		h.byWorkflow[key] = ws
	}
	ws.read = now
	out := map[string][]sample{}
	for _, v := range views {
		for _, st := range v.streams {
			k := streamKey(v.target, st.Source)
			s := sample{at: now, rows: map[string]int64{}, lag: effectiveLag(st, now)}
			for _, c := range v.copies {
				if c.Source == st.Source {
					s.rows[c.Table] = c.RowsCopied
				}
			}
			var kept []sample
			for _, old := range ws.streams[k] {
				if now.Sub(old.at) <= rateWindow {
					kept = append(kept, old)
				}
			}
			if len(kept) == 0 || now.Sub(kept[len(kept)-1].at) >= sampleEvery {
				kept = append(kept, s)
			}
			ws.streams[k] = kept
			// The rates compare the oldest sample with now's read, kept or not.
			out[k] = kept
		}
	}
	return out
}

// effectiveLag is the stream's lag at its last commit, or, for a stream that
// has committed nothing for staleAfter, the time since the source time it last
// applied: a stalled stream falls further behind every second.
func effectiveLag(st state.Stream, now time.Time) time.Duration {
	if st.SourceTimeUS > 0 && st.AppliedAtUS > 0 && now.Sub(time.UnixMicro(st.AppliedAtUS)) > staleAfter {
		return max(now.Sub(time.UnixMicro(st.SourceTimeUS)), st.Lag())
	}
	return st.Lag()
}

// buildStatus computes a workflow's status from its targets' records at now
// and the samples of earlier reads (from history.record; nil when none). It
// does no I/O.
// streamShare is what part of its source's tables a stream carries.
type streamShare struct {
	keyRange string
	// fraction of a sharded table's source rows the stream carries, by its
	// share of the source's keyspace; whole marks the tables it carries whole.
	fraction float64
	whole    map[string]bool
}

// streamShares are the shares of a target's streams, by source: the source's
// row estimates are for whole tables, and a reshard splits them.
func streamShares(spec *rowliftv1.WorkflowSpec, target string) map[string]streamShare {
	streams, _ := reshard.ForTarget(spec, target)
	out := map[string]streamShare{}
	for _, st := range streams {
		sh := streamShare{keyRange: st.KeyRange(), fraction: 1, whole: map[string]bool{}}
		if st.Filtered {
			// A lone source has no range: the zero Range is the whole keyspace.
			src, _ := keyrange.Parse(st.Source.GetKeyRange())
			sh.fraction = st.Range.Fraction() / src.Fraction()
		}
		for _, t := range st.Spec.GetTables() {
			sh.whole[t.GetName()] = !st.Filtered || t.GetReference()
		}
		out[st.Source.GetName()] = sh
	}
	return out
}

func buildStatus(spec *rowliftv1.WorkflowSpec, views []view, samples map[string][]sample, now time.Time) *rowliftv1.WorkflowStatus {
	out := &rowliftv1.WorkflowStatus{EtaSeconds: -1}
	var states []state.State
	var where []string
	tables := map[string]*rowliftv1.TableStatus{}
	for _, t := range spec.GetTables() {
		ts := &rowliftv1.TableStatus{Name: t.GetName(), Done: true}
		tables[t.GetName()] = ts
		out.Tables = append(out.Tables, ts)
	}
	copyDone := true
	var throttled, waiting []string
	var maxLag time.Duration
	var etas []float64 // per stream, negative when unknown
	for _, v := range views {
		if v.wf == nil {
			where = append(where, fmt.Sprintf("target %s: missing", v.target))
			continue
		}
		states = append(states, v.wf.State)
		where = append(where, fmt.Sprintf("target %s: %s", v.target, v.wf.State))
		if c := v.wf.CreatedAt.UnixMicro(); out.CreatedAtUs == 0 || c < out.CreatedAtUs {
			out.CreatedAtUs = c
		}
		out.UpdatedAtUs = max(out.UpdatedAtUs, v.wf.UpdatedAt.UnixMicro())
		if !v.wf.LastErrorAt.IsZero() && v.wf.LastErrorAt.UnixMicro() > out.LastErrorAtUs {
			out.LastError, out.LastErrorAtUs = v.wf.LastError, v.wf.LastErrorAt.UnixMicro()
		}
		shares := streamShares(spec, v.target)
		for _, st := range v.streams {
			key := streamKey(v.target, st.Source)
			share, ok := shares[st.Source]
			if !ok {
				share.fraction = 1 // a stream the spec no longer names
			}
			lag := effectiveLag(st, now)
			maxLag = max(maxLag, lag)
			out.Streams = append(out.Streams, &rowliftv1.StreamStatus{
				Source:          st.Source,
				Target:          v.target,
				Position:        &rowliftv1.Position{GtidSet: st.Position},
				SourceTimeUs:    st.SourceTimeUS,
				LagMs:           lag.Milliseconds(),
				HeartbeatAtUs:   st.AppliedAtUS,
				Retrying:        st.Message,
				RetryingSinceUs: st.MessageAtUS,
				Throttled:       st.Throttled,
				KeyRange:        share.keyRange,
				Lost:            st.Lost,
				Repairing:       st.Repairing,
				SourceServer:    st.SourceServer,
			})
			ss := out.Streams[len(out.Streams)-1]
			// Only a copy is throttled; a stopped stream may have left its reason.
			if st.Throttled != "" && v.wf.State == state.Copying {
				throttled = append(throttled, fmt.Sprintf("%s (target %s, source %s)", st.Throttled, v.target, st.Source))
			}
			// Only a moving stream waits on its source; a killed applier may have
			// left its last report.
			if st.Waiting != "" && (v.wf.State == state.Copying || v.wf.State == state.Running) {
				ss.Waiting = st.Waiting
				waiting = append(waiting, fmt.Sprintf("%s (target %s, source %s)", st.Waiting, v.target, st.Source))
			}
			if st.Message != "" && st.MessageAtUS > out.LastErrorAtUs {
				out.LastError, out.LastErrorAtUs = st.Message, st.MessageAtUS
			}
			var copies []state.TableCopy
			for _, c := range v.copies {
				if c.Source == st.Source {
					if !share.whole[c.Table] {
						c.RowsEstimate = int64(float64(c.RowsEstimate) * share.fraction)
						c.BytesEstimate = int64(float64(c.BytesEstimate) * share.fraction)
					}
					c.BytesEstimate = bytesEstimate(c)
					copies = append(copies, c)
					ss.RowsCopied += c.RowsCopied
				}
			}
			past := samples[key]
			streamDone := true
			for _, c := range copies {
				ts := tables[c.Table]
				if ts == nil {
					continue
				}
				ts.RowsCopied += c.RowsCopied
				ts.RowsEstimate += c.RowsEstimate
				ts.BytesCopied += c.BytesCopied
				ts.BytesEstimate += c.BytesEstimate
				ts.Done = ts.Done && c.Done
				for _, k := range c.KeysPending {
					if !slices.Contains(ts.KeysPending, k) {
						ts.KeysPending = append(ts.KeysPending, k)
					}
				}
				ts.UpdatedAtUs = max(ts.UpdatedAtUs, c.UpdatedAtUS)
				if !c.Done {
					streamDone = false
					ts.RowsPerSecond += tableRate(c, past, now)
				}
			}
			copyDone = copyDone && streamDone
			etas = append(etas, streamETA(copies, streamDone, past, lag, now))
		}
	}
	if len(views) > 0 && len(states) == 0 {
		return out
	}
	out.State = protoState(summaryState(states))
	for _, v := range views {
		if v.wf != nil && v.wf.State == summaryState(states) {
			out.Message = v.wf.Message
			break
		}
	}
	if disagree(states) || len(states) < len(views) {
		msg := strings.Join(where, ", ")
		if out.Message != "" {
			msg += "; " + out.Message
		}
		out.Message = msg
	}
	if idle := unapplied(views, now); len(idle) > 0 {
		msg := fmt.Sprintf("no applier is running for target %s: start one (rowlift applier --target-dsn ...) "+
			"and the workflow goes on", strings.Join(idle, ", "))
		if out.Message != "" {
			msg += "; " + out.Message
		}
		out.Message = msg
	}
	for _, ts := range out.Tables {
		ts.Percent = percent(ts.RowsCopied, ts.RowsEstimate, ts.Done)
		out.RowsCopied += ts.RowsCopied
		out.RowsEstimate += ts.RowsEstimate
		out.BytesCopied += ts.BytesCopied
		out.BytesEstimate += ts.BytesEstimate
		out.RowsPerSecond += ts.RowsPerSecond
	}
	out.Percent = percent(out.RowsCopied, out.RowsEstimate, copyDone)
	out.Verify = verifyStatus(spec, views, out.RowsEstimate)
	out.LagMs = maxLag.Milliseconds()
	out.Throttled = strings.Join(throttled, "; ")
	out.Waiting = strings.Join(waiting, "; ")
	out.Phase = phaseOf(summaryState(states), copyDone, maxLag)
	switch out.Phase {
	case rowliftv1.WorkflowPhase_WORKFLOW_PHASE_RUNNING:
		out.EtaSeconds = 0
	case rowliftv1.WorkflowPhase_WORKFLOW_PHASE_COPYING, rowliftv1.WorkflowPhase_WORKFLOW_PHASE_CATCHING_UP:
		out.EtaSeconds = 0
		for _, eta := range etas {
			if eta < 0 {
				out.EtaSeconds = -1
				break
			}
			out.EtaSeconds = max(out.EtaSeconds, eta)
		}
	}
	return out
}

// unapplied names the targets where the workflow should be moving (copying or
// running) and no applier has run for noApplierAfter since its last change.
func unapplied(views []view, now time.Time) []string {
	var out []string
	for _, v := range views {
		if v.wf == nil || v.applier || (v.wf.State != state.Copying && v.wf.State != state.Running) {
			continue
		}
		if now.Sub(v.wf.UpdatedAt) >= noApplierAfter {
			out = append(out, v.target)
		}
	}
	return out
}

func disagree(states []state.State) bool {
	for _, st := range states {
		if st != states[0] {
			return true
		}
	}
	return false
}

// phaseOf is what a workflow in state st is doing.
func phaseOf(st state.State, copyDone bool, lag time.Duration) rowliftv1.WorkflowPhase {
	switch st {
	case state.Init:
		return rowliftv1.WorkflowPhase_WORKFLOW_PHASE_INIT
	case state.Copying, state.Running:
		switch {
		case copyDone && lag > CatchUpLag:
			return rowliftv1.WorkflowPhase_WORKFLOW_PHASE_CATCHING_UP
		case st == state.Running:
			return rowliftv1.WorkflowPhase_WORKFLOW_PHASE_RUNNING
		}
		return rowliftv1.WorkflowPhase_WORKFLOW_PHASE_COPYING
	case state.Stopped:
		return rowliftv1.WorkflowPhase_WORKFLOW_PHASE_STOPPED
	case state.Error:
		return rowliftv1.WorkflowPhase_WORKFLOW_PHASE_ERROR
	case state.Cutover:
		return rowliftv1.WorkflowPhase_WORKFLOW_PHASE_CUTOVER
	case state.Done:
		return rowliftv1.WorkflowPhase_WORKFLOW_PHASE_DONE
	case state.Switched:
		return rowliftv1.WorkflowPhase_WORKFLOW_PHASE_SWITCHED
	}
	return rowliftv1.WorkflowPhase_WORKFLOW_PHASE_UNSPECIFIED
}

func protoState(st state.State) rowliftv1.WorkflowState {
	switch st {
	case state.Init:
		return rowliftv1.WorkflowState_WORKFLOW_STATE_INIT
	case state.Copying:
		return rowliftv1.WorkflowState_WORKFLOW_STATE_COPYING
	case state.Running:
		return rowliftv1.WorkflowState_WORKFLOW_STATE_RUNNING
	case state.Stopped:
		return rowliftv1.WorkflowState_WORKFLOW_STATE_STOPPED
	case state.Error:
		return rowliftv1.WorkflowState_WORKFLOW_STATE_ERROR
	case state.Cutover:
		return rowliftv1.WorkflowState_WORKFLOW_STATE_CUTOVER
	case state.Done:
		return rowliftv1.WorkflowState_WORKFLOW_STATE_DONE
	case state.Switched:
		return rowliftv1.WorkflowState_WORKFLOW_STATE_SWITCHED
	}
	return rowliftv1.WorkflowState_WORKFLOW_STATE_UNSPECIFIED
}

// percent is copied of estimate in percent: 100 only once done, because the
// estimate is approximate.
func percent(copied, estimate int64, done bool) float64 {
	switch {
	case done:
		return 100
	case estimate <= 0:
		return 0
	}
	return math.Min(99.9, 100*float64(copied)/float64(estimate))
}

// oldest returns the earliest sample taken since since and at least minSpan
// before now, if any.
func oldest(past []sample, since, now time.Time) (sample, bool) {
	for _, s := range past {
		if s.at.Before(since) {
			continue
		}
		return s, now.Sub(s.at) >= minSpan
	}
	return sample{}, false
}

// tableRate is a copying table's rows per second: over the samples of the
// recent past when there are some, else since its stream's current run began
// (the sidecar schema's record, which survives a coordinator restart). Samples
// from before the run are left out: they would count the stream's restart as
// copy time.
func tableRate(c state.TableCopy, past []sample, now time.Time) float64 {
	if then, ok := oldest(past, time.UnixMicro(c.RunStartedAtUS), now); ok {
		return float64(c.RowsCopied-then.rows[c.Table]) / now.Sub(then.at).Seconds()
	}
	if c.RunStartedAtUS <= 0 {
		return 0
	}
	secs := now.Sub(time.UnixMicro(c.RunStartedAtUS)).Seconds()
	if secs <= 0 {
		return 0
	}
	return float64(c.RowsCopied-c.RunStartRows) / secs
}

// streamRate is how fast a stream copies, all its tables together: tables copy
// a few at a time, so the stream's throughput, not one table's, says how soon
// the rows left are copied.
func streamRate(copies []state.TableCopy, past []sample, now time.Time) float64 {
	var run int64
	for _, c := range copies {
		run = max(run, c.RunStartedAtUS)
	}
	if then, ok := oldest(past, time.UnixMicro(run), now); ok {
		var rows int64
		for _, c := range copies {
			rows += c.RowsCopied - then.rows[c.Table]
		}
		return float64(rows) / now.Sub(then.at).Seconds()
	}
	secs := now.Sub(time.UnixMicro(run)).Seconds()
	if run <= 0 || secs <= 0 {
		return 0
	}
	var rows int64
	for _, c := range copies {
		if c.RunStartedAtUS == run {
			rows += c.RowsCopied - c.RunStartRows
		}
	}
	return float64(rows) / secs
}

// streamETA is the seconds until a stream's copy is done and its lag is down
// to CatchUpLag, or -1 when that cannot be estimated: the rows left over the
// copy rate, plus the lag above CatchUpLag over the speed the lag shrank at
// between the samples (seconds of lag per second).
func streamETA(copies []state.TableCopy, done bool, past []sample, lag time.Duration, now time.Time) float64 {
	var eta float64
	if !done {
		var left int64
		for _, c := range copies {
			if c.Done {
				continue
			}
			if c.RunStartedAtUS <= 0 {
				return -1 // no estimate recorded yet: nothing says how big it is
			}
			left += max(c.RowsEstimate-c.RowsCopied, 0)
		}
		if left > 0 {
			rate := streamRate(copies, past, now)
			if rate <= 0 {
				return -1
			}
			eta = float64(left) / rate
		}
	}
	if lag > CatchUpLag {
		then, ok := oldest(past, time.Time{}, now)
		if !ok {
			return -1
		}
		speed := (then.lag - lag).Seconds() / now.Sub(then.at).Seconds()
		if speed <= 0 {
			return -1
		}
		eta += (lag - CatchUpLag).Seconds() / speed
	}
	return eta
}

// verifyStatus sums a workflow's verify over its targets and sources, per
// table in the spec's order; nil when no verify was started. estimate is the
// source rows the copy expected, for the percentage.
func verifyStatus(spec *rowliftv1.WorkflowSpec, views []view, estimate int64) *rowliftv1.VerifyStatus {
	var out *rowliftv1.VerifyStatus
	tables := map[string]*rowliftv1.VerifyTable{}
	for _, t := range spec.GetTables() {
		tables[t.GetName()] = &rowliftv1.VerifyTable{Name: t.GetName(), Done: true}
	}
	done := true
	outcomes := map[state.VerifyOutcome]bool{}
	var messages []string
	for _, v := range views {
		for _, tv := range v.verifies {
			vt := tables[tv.Table]
			if vt == nil {
				continue
			}
			if out == nil {
				out = &rowliftv1.VerifyStatus{Repair: tv.Repair, StartedAtUs: tv.StartedAtUS}
			}
			out.StartedAtUs = min(out.StartedAtUs, tv.StartedAtUS)
			out.FinishedAtUs = max(out.FinishedAtUs, tv.FinishedAtUS)
			vt.RowsCompared += tv.RowsCompared
			vt.Missing += tv.Missing
			vt.Extra += tv.Extra
			vt.Different += tv.Different
			vt.Repaired += tv.Repaired
			vt.Done = vt.Done && tv.Done
			done = done && tv.Done
			if tv.Outcome != "" {
				outcomes[tv.Outcome] = true
				if vt.Message == "" {
					vt.Message = tv.Message
				}
				if !slices.Contains(messages, tv.Message) {
					messages = append(messages, tv.Message)
				}
			}
			for _, e := range tv.Examples {
				if len(vt.Examples) < state.MaxVerifyExamples {
					vt.Examples = append(vt.Examples, e)
				}
			}
		}
	}
	if out == nil {
		return nil
	}
	for _, t := range spec.GetTables() {
		vt := tables[t.GetName()]
		out.Tables = append(out.Tables, vt)
		out.RowsCompared += vt.RowsCompared
		out.Missing += vt.Missing
		out.Extra += vt.Extra
		out.Different += vt.Different
		out.Repaired += vt.Repaired
	}
	out.Message = strings.Join(messages, "; ")
	switch {
	case !done:
		out.State = rowliftv1.VerifyState_VERIFY_STATE_RUNNING
		out.FinishedAtUs = 0
	case outcomes[state.VerifyCancelled]:
		out.State = rowliftv1.VerifyState_VERIFY_STATE_CANCELLED
	case outcomes[state.VerifyFailed]:
		out.State = rowliftv1.VerifyState_VERIFY_STATE_FAILED
	default:
		out.State = rowliftv1.VerifyState_VERIFY_STATE_DONE
	}
	// A verify that ended early says how far it got; without an estimate (a
	// reverse workflow copied nothing) how far is unknown, not 0.
	out.Percent = percent(out.RowsCompared, estimate, out.State == rowliftv1.VerifyState_VERIFY_STATE_DONE)
	if estimate <= 0 && out.State != rowliftv1.VerifyState_VERIFY_STATE_DONE {
		out.Percent = -1
	}
	return out
}

// bytesEstimate is the bytes a table's copy from one source moves in all, in
// bytes_copied's units: once rows are copied, the bytes per row measured so
// far times the row estimate (never below what is copied; exactly that once
// done); before, the source's size on disk, the only scale known then.
func bytesEstimate(c state.TableCopy) int64 {
	switch {
	case c.Done:
		return c.BytesCopied
	case c.RowsCopied > 0 && c.RowsEstimate > 0:
		return max(c.BytesCopied, int64(float64(c.BytesCopied)/float64(c.RowsCopied)*float64(c.RowsEstimate)))
	}
	return c.BytesEstimate
}
