package coordinator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func us(d time.Duration) int64 { return t0.Add(d).UnixMicro() }

func TestPhase(t *testing.T) {
	for _, tc := range []struct {
		st   state.State
		done bool
		lag  time.Duration
		want rowliftv1.WorkflowPhase
	}{
		{state.Init, false, 0, rowliftv1.WorkflowPhase_WORKFLOW_PHASE_INIT},
		{state.Copying, false, time.Minute, rowliftv1.WorkflowPhase_WORKFLOW_PHASE_COPYING},
		{state.Copying, true, time.Second, rowliftv1.WorkflowPhase_WORKFLOW_PHASE_COPYING}, // running a moment later
		{state.Copying, true, time.Minute, rowliftv1.WorkflowPhase_WORKFLOW_PHASE_CATCHING_UP},
		{state.Running, true, CatchUpLag, rowliftv1.WorkflowPhase_WORKFLOW_PHASE_RUNNING},
		{state.Running, true, CatchUpLag + time.Millisecond, rowliftv1.WorkflowPhase_WORKFLOW_PHASE_CATCHING_UP},
		{state.Stopped, true, time.Hour, rowliftv1.WorkflowPhase_WORKFLOW_PHASE_STOPPED},
		{state.Error, false, 0, rowliftv1.WorkflowPhase_WORKFLOW_PHASE_ERROR},
	} {
		require.Equal(t, tc.want, phaseOf(tc.st, tc.done, tc.lag), "%s done=%v lag=%s", tc.st, tc.done, tc.lag)
	}
}

func TestPercent(t *testing.T) {
	require.EqualValues(t, 25, percent(250, 1000, false))
	require.EqualValues(t, 99.9, percent(1200, 1000, false), "an estimate passed is not done")
	require.EqualValues(t, 100, percent(900, 1000, true))
	require.EqualValues(t, 0, percent(10, 0, false), "unknown without an estimate")
}

// copying is a table of one stream, copy run started 10 s before t0 at 0 rows.
func copying(table string, copied, estimate int64) state.TableCopy {
	return state.TableCopy{Source: "main", Table: table, RowsCopied: copied, RowsEstimate: estimate, RunStartedAtUS: us(-10 * time.Second)}
}

func TestStreamETA(t *testing.T) {
	copies := []state.TableCopy{copying("a", 2000, 10000)}
	// No samples: the run's rate, 2000 rows in 10 s.
	require.InDelta(t, 40, streamETA(copies, false, nil, 0, t0), 1e-9)
	// Samples: the rate over the recent past, 500 rows in the last 5 s.
	past := []sample{{at: t0.Add(-5 * time.Second), rows: map[string]int64{"a": 1500}}}
	require.InDelta(t, 80, streamETA(copies, false, past, 0, t0), 1e-9)
	// A sample younger than minSpan is not enough for a rate: the run's is used.
	young := []sample{{at: t0.Add(-time.Second), rows: map[string]int64{"a": 1990}}}
	require.InDelta(t, 40, streamETA(copies, false, young, 0, t0), 1e-9)
	// Samples from before the run started (a restart) do not count.
	old := []sample{{at: t0.Add(-20 * time.Second), rows: map[string]int64{"a": 0}}}
	require.InDelta(t, 40, streamETA(copies, false, old, 0, t0), 1e-9)

	// Two tables copy one after the other: the stream's throughput counts.
	two := []state.TableCopy{
		{Source: "main", Table: "a", RowsCopied: 1000, RowsEstimate: 1000, Done: true, RunStartedAtUS: us(-10 * time.Second)},
		copying("b", 1000, 9000),
	}
	require.InDelta(t, 40, streamETA(two, false, nil, 0, t0), 1e-9, "8000 rows left at 200 rows/s")

	// Lag above CatchUpLag adds the time to work it down at the observed speed:
	// 25 s of lag 5 s ago, 15 s now, 2 s of lag per second: (15-5)/2 = 5 s more.
	lagging := []sample{{at: t0.Add(-5 * time.Second), rows: map[string]int64{"a": 1500}, lag: 25 * time.Second}}
	require.InDelta(t, 85, streamETA(copies, false, lagging, 15*time.Second, t0), 1e-9)
	require.InDelta(t, 5, streamETA(nil, true, lagging, 15*time.Second, t0), 1e-9, "catching up after the copy")
	require.Zero(t, streamETA(nil, true, nil, 4*time.Second, t0), "lag within CatchUpLag adds nothing")

	// Unknown: a lag that does not shrink, a lag with no samples to measure its
	// speed, a copy that has not moved, a stream that has not started.
	growing := []sample{{at: t0.Add(-5 * time.Second), rows: map[string]int64{"a": 1500}, lag: 10 * time.Second}}
	require.EqualValues(t, -1, streamETA(copies, false, growing, 15*time.Second, t0))
	require.EqualValues(t, -1, streamETA(nil, true, nil, 15*time.Second, t0))
	stalled := []sample{{at: t0.Add(-5 * time.Second), rows: map[string]int64{"a": 2000}}}
	require.EqualValues(t, -1, streamETA(copies, false, stalled, 0, t0))
	require.EqualValues(t, -1, streamETA([]state.TableCopy{{Table: "a"}}, false, nil, 0, t0))
}

func TestEffectiveLag(t *testing.T) {
	fresh := state.Stream{SourceTimeUS: us(-3 * time.Second), AppliedAtUS: us(-time.Second)}
	require.Equal(t, 2*time.Second, effectiveLag(fresh, t0), "the lag at the last commit")
	stalled := state.Stream{SourceTimeUS: us(-time.Minute), AppliedAtUS: us(-time.Minute + time.Second)}
	require.Equal(t, time.Minute, effectiveLag(stalled, t0), "a stream that commits nothing falls behind")
	require.Zero(t, effectiveLag(state.Stream{}, t0))
}

// TestBuildStatusWaiting: a stream whose source still locates its start says
// so while its workflow moves, not once it is stopped (a killed applier may
// have left its report).
func TestBuildStatusWaiting(t *testing.T) {
	spec := &rowliftv1.WorkflowSpec{Name: "w", Tables: []*rowliftv1.TableSpec{{Name: "a"}}}
	const why = "source is locating GTID 0-1-5 in binlog binlog.000003: nothing to do"
	for _, tc := range []struct {
		st   state.State
		want string
	}{
		{state.Running, why + " (target t1, source main)"},
		{state.Copying, why + " (target t1, source main)"},
		{state.Stopped, ""},
		{state.Error, ""},
	} {
		views := []view{{target: "t1", wf: &state.Workflow{State: tc.st, CreatedAt: t0, UpdatedAt: t0},
			streams: []state.Stream{{Source: "main", Position: "0-1-5", Waiting: why}}, applier: true}}
		st := buildStatus(spec, views, nil, t0)
		require.Equal(t, tc.want, st.GetWaiting(), "%s", tc.st)
		if tc.want != "" {
			require.Equal(t, why, st.GetStreams()[0].GetWaiting())
		}
	}
}

// TestBytesEstimate: the bytes a copy comes to are in the copy's own units
// once it has rows to measure, the source's size on disk only before.
func TestBytesEstimate(t *testing.T) {
	for _, c := range []struct {
		name string
		copy state.TableCopy
		want int64
	}{
		{"before the first chunk: the size on disk", state.TableCopy{RowsEstimate: 1000, BytesEstimate: 90_000}, 90_000},
		{"no row estimate: the size on disk", state.TableCopy{RowsCopied: 10, BytesCopied: 1000, BytesEstimate: 90_000}, 90_000},
		{"measured per row", state.TableCopy{RowsCopied: 100, BytesCopied: 15_000, RowsEstimate: 1000, BytesEstimate: 90_000}, 150_000},
		{"past the row estimate: what is copied", state.TableCopy{RowsCopied: 1200, BytesCopied: 180_000, RowsEstimate: 1000, BytesEstimate: 90_000}, 180_000},
		{"done: exactly what was copied", state.TableCopy{Done: true, RowsCopied: 990, BytesCopied: 148_500, RowsEstimate: 1000, BytesEstimate: 90_000}, 148_500},
	} {
		require.Equal(t, c.want, bytesEstimate(c.copy), c.name)
	}
}

func TestBuildStatusOverTargets(t *testing.T) {
	spec := &rowliftv1.WorkflowSpec{Name: "w", Tables: []*rowliftv1.TableSpec{{Name: "a"}}}
	wf := func(st state.State, msg string) *state.Workflow {
		return &state.Workflow{State: st, Message: msg, CreatedAt: t0.Add(-time.Hour), UpdatedAt: t0.Add(-time.Minute)}
	}
	stream := state.Stream{Source: "main", Position: "0-1-5", SourceTimeUS: us(-2 * time.Second), AppliedAtUS: us(-time.Second), Throttled: "source Threads_running 60 > 50"}
	views := []view{
		{target: "t1", wf: wf(state.Copying, ""), copies: []state.TableCopy{copying("a", 2000, 10000)}, streams: []state.Stream{stream}, applier: true},
		{target: "t2", wf: wf(state.Stopped, "stopped by an operator"), copies: []state.TableCopy{copying("a", 1000, 10000)},
			streams: []state.Stream{stream}, applier: true},
	}
	views[1].wf.LastError, views[1].wf.LastErrorAt = "boom", t0.Add(-30*time.Minute)
	views[0].copies[0].BytesCopied, views[0].copies[0].BytesEstimate = 200<<10, 1<<20
	views[1].copies[0].BytesCopied, views[1].copies[0].BytesEstimate = 100<<10, 1<<20
	views[1].streams[0].Message, views[1].streams[0].MessageAtUS = "retrying (attempt 2): refused", us(-10*time.Second)
	st := buildStatus(spec, views, nil, t0)
	require.Equal(t, rowliftv1.WorkflowState_WORKFLOW_STATE_STOPPED, st.GetState(), "the state that needs the operator")
	require.Equal(t, "target t1: copying, target t2: stopped; stopped by an operator", st.GetMessage())
	require.Equal(t, rowliftv1.WorkflowPhase_WORKFLOW_PHASE_STOPPED, st.GetPhase())
	require.EqualValues(t, -1, st.GetEtaSeconds(), "nothing to estimate while stopped")
	require.EqualValues(t, 3000, st.GetRowsCopied())
	require.EqualValues(t, 20000, st.GetRowsEstimate())
	require.EqualValues(t, 15, st.GetPercent())
	require.EqualValues(t, 300<<10, st.GetBytesCopied())
	require.EqualValues(t, 2*1000<<10, st.GetBytesEstimate(), "each target's bytes per row so far times its 10,000 rows, not the 1 MiB on disk")
	require.EqualValues(t, 300<<10, st.GetTables()[0].GetBytesCopied())
	require.InDelta(t, 300, st.GetRowsPerSecond(), 1e-9)
	require.Len(t, st.GetStreams(), 2)
	require.EqualValues(t, 1000, st.GetLagMs())
	require.Equal(t, "retrying (attempt 2): refused", st.GetLastError(), "the newest error")
	require.Equal(t, "source Threads_running 60 > 50 (target t1, source main)", st.GetThrottled(), "only the copying target is throttled")
	require.Empty(t, st.GetWaiting())

	views[1].wf.State = state.Copying
	st = buildStatus(spec, views, nil, t0)
	require.Equal(t, rowliftv1.WorkflowPhase_WORKFLOW_PHASE_COPYING, st.GetPhase())
	require.InDelta(t, 90, st.GetEtaSeconds(), 1e-9, "the slower target: 9000 rows at 100 rows/s")
}

// A workflow that should move and has no applier on a target says so once
// the applier has had time to pick it up, and names the targets; stopped,
// failed or finished workflows need none.
func TestStatusSaysWhenNoApplierRuns(t *testing.T) {
	spec := &rowliftv1.WorkflowSpec{Name: "w", Tables: []*rowliftv1.TableSpec{{Name: "a"}}}
	mk := func(target string, st state.State, changed time.Duration, applier bool) view {
		return view{target: target, applier: applier, wf: &state.Workflow{State: st, CreatedAt: t0.Add(-time.Hour), UpdatedAt: t0.Add(-changed)}}
	}
	for _, tc := range []struct {
		views []view
		want  string
	}{
		{[]view{mk("t1", state.Copying, time.Second, false)}, ""},
		{[]view{mk("t1", state.Copying, noApplierAfter, false)},
			"no applier is running for target t1: start one (rowlift applier --target-dsn ...) and the workflow goes on"},
		{[]view{mk("t1", state.Running, time.Minute, false), mk("t2", state.Running, time.Minute, false)},
			"no applier is running for target t1, t2: start one (rowlift applier --target-dsn ...) and the workflow goes on"},
		{[]view{mk("t1", state.Running, time.Minute, true), mk("t2", state.Running, time.Minute, false)},
			"no applier is running for target t2: start one (rowlift applier --target-dsn ...) and the workflow goes on"},
		{[]view{mk("t1", state.Copying, time.Minute, true)}, ""},
		{[]view{mk("t1", state.Stopped, time.Minute, false)}, ""},
		{[]view{mk("t1", state.Error, time.Minute, false)}, ""},
		{[]view{mk("t1", state.Done, time.Minute, false)}, ""},
		{[]view{mk("t1", state.Copying, time.Minute, false), mk("t2", state.Stopped, time.Minute, true)},
			"no applier is running for target t1: start one (rowlift applier --target-dsn ...) and the workflow goes on; target t1: copying, target t2: stopped"},
	} {
		require.Equal(t, tc.want, buildStatus(spec, tc.views, nil, t0).GetMessage())
	}
}

func TestVerifyStatusSumsTargetsAndSources(t *testing.T) {
	spec := &rowliftv1.WorkflowSpec{Name: "w", Tables: []*rowliftv1.TableSpec{{Name: "a"}, {Name: "b"}}}
	require.Nil(t, verifyStatus(spec, []view{{target: "t1"}}, 100), "never verified")
	views := []view{
		{target: "t1", verifies: []state.TableVerify{
			{Table: "a", StartedAtUS: 10, Repair: true, Done: true, FinishedAtUS: 50, Examples: []string{"missing on target: (id=1)"},
				VerifyCounts: state.VerifyCounts{RowsCompared: 40, Missing: 1, Repaired: 1}},
			{Table: "b", StartedAtUS: 10, Repair: true, VerifyCounts: state.VerifyCounts{RowsCompared: 10}},
		}},
		{target: "t2", verifies: []state.TableVerify{
			{Table: "a", StartedAtUS: 9, Repair: true, Done: true, FinishedAtUS: 60, VerifyCounts: state.VerifyCounts{RowsCompared: 30, Extra: 2, Different: 3, Repaired: 5}},
			{Table: "b", StartedAtUS: 9, Repair: true, Done: true, FinishedAtUS: 70, VerifyCounts: state.VerifyCounts{RowsCompared: 5}},
		}},
	}
	v := verifyStatus(spec, views, 100)
	require.Equal(t, rowliftv1.VerifyState_VERIFY_STATE_RUNNING, v.GetState(), "until every stream's every table is done")
	require.Zero(t, v.GetFinishedAtUs())
	require.EqualValues(t, 9, v.GetStartedAtUs())
	require.True(t, v.GetRepair())
	require.EqualValues(t, 85, v.GetRowsCompared())
	require.EqualValues(t, [4]int64{1, 2, 3, 6}, [4]int64{v.GetMissing(), v.GetExtra(), v.GetDifferent(), v.GetRepaired()})
	require.InDelta(t, 85, v.GetPercent(), 1e-9)
	require.Equal(t, "a", v.GetTables()[0].GetName())
	require.True(t, v.GetTables()[0].GetDone())
	require.False(t, v.GetTables()[1].GetDone())
	require.Equal(t, []string{"missing on target: (id=1)"}, v.GetTables()[0].GetExamples())

	views[0].verifies[1].Done, views[0].verifies[1].FinishedAtUS = true, 80
	v = verifyStatus(spec, views, 100)
	require.Equal(t, rowliftv1.VerifyState_VERIFY_STATE_DONE, v.GetState())
	require.EqualValues(t, 80, v.GetFinishedAtUs())
	require.EqualValues(t, 100, v.GetPercent())
}

// TestVerifyStatusEndedEarly: a verify with a table cancelled is cancelled
// (even with another failed), one with a table failed is failed once every
// table ended, each says why, and keeps the percentage it reached; without
// a row estimate (a reverse workflow copies nothing) the percentage is
// unknown rather than 0.
func TestVerifyStatusEndedEarly(t *testing.T) {
	spec := &rowliftv1.WorkflowSpec{Name: "w", Tables: []*rowliftv1.TableSpec{{Name: "a"}, {Name: "b"}}}
	views := []view{{target: "t1", verifies: []state.TableVerify{
		{Table: "a", Done: true, Outcome: state.VerifyFailed, Message: "table db.a no longer exists", VerifyCounts: state.VerifyCounts{RowsCompared: 10}},
		{Table: "b", VerifyCounts: state.VerifyCounts{RowsCompared: 20}},
	}}}
	v := verifyStatus(spec, views, 100)
	require.Equal(t, rowliftv1.VerifyState_VERIFY_STATE_RUNNING, v.GetState(), "a failed table does not end the others")
	require.Equal(t, "table db.a no longer exists", v.GetMessage())
	require.Equal(t, "table db.a no longer exists", v.GetTables()[0].GetMessage())

	views[0].verifies[1].Done = true
	v = verifyStatus(spec, views, 100)
	require.Equal(t, rowliftv1.VerifyState_VERIFY_STATE_FAILED, v.GetState())
	require.InDelta(t, 30, v.GetPercent(), 1e-9, "how far it got, not 100")

	views[0].verifies[1].Outcome, views[0].verifies[1].Message = state.VerifyCancelled, "cancelled by a switch"
	v = verifyStatus(spec, views, 100)
	require.Equal(t, rowliftv1.VerifyState_VERIFY_STATE_CANCELLED, v.GetState())
	require.Equal(t, "table db.a no longer exists; cancelled by a switch", v.GetMessage())
	require.Negative(t, verifyStatus(spec, views, 0).GetPercent(), "no estimate: unknown")
}

// A table whose rows are copied and whose deferred keys are being added shows
// them, once however many sources copied it, and is not done with the
// workflow's copy (cutover admission refuses it as still copying).
func TestStatusShowsKeysPending(t *testing.T) {
	spec := &rowliftv1.WorkflowSpec{Name: "w", Tables: []*rowliftv1.TableSpec{{Name: "a"}}}
	done := func(source string) state.TableCopy {
		return state.TableCopy{Source: source, Table: "a", RowsCopied: 10, RowsEstimate: 10, Done: true, KeysPending: []string{"by_k", "by_n"}}
	}
	views := []view{{target: "t1", wf: &state.Workflow{State: state.Copying, CreatedAt: t0, UpdatedAt: t0},
		copies:  []state.TableCopy{done("s1"), done("s2")},
		streams: []state.Stream{{Source: "s1"}, {Source: "s2"}}, applier: true}}
	st := buildStatus(spec, views, nil, t0)
	require.Equal(t, []string{"by_k", "by_n"}, st.GetTables()[0].GetKeysPending())
	require.True(t, st.GetTables()[0].GetDone(), "its rows are copied")
	require.Equal(t, "a", admissionViews(views, 0, t0)[0].Copying)
}
