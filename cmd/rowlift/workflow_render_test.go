package main

import (
	"github.com/rowlift/rowlift/internal/statustext"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

var renderNow = time.Date(2025, 11, 22, 15, 40, 0, 0, time.UTC)

func us(d time.Duration) int64 { return renderNow.Add(-d).UnixMicro() }

// copyingWorkflow is a move of three tables in the middle of its copy.
func copyingWorkflow() *rowliftv1.Workflow {
	return &rowliftv1.Workflow{
		Spec: &rowliftv1.WorkflowSpec{
			Name:           "shop-move",
			Sources:        []*rowliftv1.SourceShard{{Name: "main", StreamerAddress: "10.0.0.5:7001"}},
			Targets:        []*rowliftv1.TargetShard{{Name: "main"}},
			SourceDatabase: "shop",
			Tables:         []*rowliftv1.TableSpec{{Name: "customers"}, {Name: "orders", Columns: []string{"id", "total"}}, {Name: "audit_log", TargetTable: "_audit_log_frozen"}},
			Options:        &rowliftv1.WorkflowOptions{ChunkRows: 5000, OnDdl: rowliftv1.OnDDL_ON_DDL_IGNORE, CopyMethod: rowliftv1.CopyMethod_COPY_METHOD_LOAD_DATA},
		},
		Status: &rowliftv1.WorkflowStatus{
			State: rowliftv1.WorkflowState_WORKFLOW_STATE_COPYING, Phase: rowliftv1.WorkflowPhase_WORKFLOW_PHASE_COPYING,
			Message: "copying 3 tables", CreatedAtUs: us(9*time.Minute + 30*time.Second),
			Tables: []*rowliftv1.TableStatus{
				{Name: "customers", RowsCopied: 100000, RowsEstimate: 98000, Done: true, Percent: 100, BytesCopied: 9_600_000, BytesEstimate: 11_010_048},
				{Name: "orders", RowsCopied: 1234567, RowsEstimate: 2500000, RowsPerSecond: 41234.4, Percent: 49.38, BytesCopied: 87_136_870, BytesEstimate: 211_182_387},
				{Name: "audit_log", RowsCopied: 0, RowsEstimate: 0},
			},
			Streams: []*rowliftv1.StreamStatus{{Source: "main", Target: "main", Position: &rowliftv1.Position{GtidSet: "0-1-4711"},
				SourceTimeUs: us(2 * time.Second), LagMs: 1200, HeartbeatAtUs: us(400 * time.Millisecond)}},
			EtaSeconds: 30.7, LagMs: 1200, RowsCopied: 1334567, RowsEstimate: 2598000, Percent: 51.37, RowsPerSecond: 41234.4,
			BytesCopied: 96_736_870, BytesEstimate: 222_192_435,
			Throttled: "source Threads_running 57 > 50",
			LastError: "target: Lock wait timeout exceeded", LastErrorAtUs: us(3 * time.Minute),
		},
	}
}

func TestRenderShow(t *testing.T) {
	want := `name      shop-move
created   2025-11-22 15:30:30 UTC (9m30s ago)
sources   main=10.0.0.5:7001
targets   main
database  shop → shop
tables    customers orders:id,total audit_log→_audit_log_frozen
options   --chunk-rows 5000 --on-ddl ignore --copy-method load-data
catch-up  the copy waits while replay lags over 1s, and sizes chunks under writes to be applied within 500ms (the default)

workflow shop-move   copying   lag 1.2s   eta 30s   throttled: source Threads_running 57 > 50
  copying 3 tables

  TABLE     PROGRESS                                                   ROWS                 BYTES      RATE   ETA
  customers [##############################]  100.0%      100,000 / 100,000     9.2 MiB / 9.2 MiB         -  done
  orders    [##############----------------]   49.4%  1,234,567 / 2,500,000  83.1 MiB / 201.4 MiB  41,234/s   30s
  audit_log [??????????????????????????????]       ?                  0 / ?               0 B / ?         -     -
  total     [###############---------------]   51.4%  1,334,567 / 2,598,000  92.3 MiB / 211.9 MiB  41,234/s   30s

  STREAM       LAG   LAST COMMIT  POSITION
  main → main  1.2s  400ms ago    0-1-4711

last error (3m00s ago): target: Lock wait timeout exceeded
`
	require.Equal(t, want, renderShow(copyingWorkflow(), renderNow))
}

func TestRenderStatusOfARunningWorkflow(t *testing.T) {
	w := copyingWorkflow()
	st := w.Status
	st.State, st.Phase, st.Message, st.Throttled, st.EtaSeconds = rowliftv1.WorkflowState_WORKFLOW_STATE_RUNNING, rowliftv1.WorkflowPhase_WORKFLOW_PHASE_CATCHING_UP, "", "", -1
	st.Tables = st.Tables[:1]
	st.RowsCopied, st.RowsEstimate, st.Percent, st.RowsPerSecond = 100000, 98000, 100, 0
	st.BytesCopied, st.BytesEstimate = st.Tables[0].BytesCopied, st.Tables[0].BytesEstimate
	st.Streams[0].Retrying, st.Streams[0].RetryingSinceUs = "streamer 10.0.0.5:7001: connection refused", us(12*time.Second)
	st.LastError = ""
	require.Equal(t, []string{
		"workflow shop-move   catching up   lag 1.2s   eta -   not throttled",
		"",
		"  TABLE     PROGRESS                                               ROWS              BYTES  RATE   ETA",
		"  customers [##############################]  100.0%  100,000 / 100,000  9.2 MiB / 9.2 MiB     -  done",
		"  total     [##############################]  100.0%  100,000 / 100,000  9.2 MiB / 9.2 MiB     -  done",
		"",
		"  STREAM       LAG   LAST COMMIT  POSITION",
		"  main → main  1.2s  400ms ago    0-1-4711",
		"  stream main → main retrying (since 12s ago): streamer 10.0.0.5:7001: connection refused",
	}, renderStatus(w, renderNow))
}

// TestRenderWaitingStream: a stream whose source still locates its start
// position says so in the view, the log line and the list, not as a retry.
func TestRenderWaitingStream(t *testing.T) {
	w := copyingWorkflow()
	st := w.Status
	st.Throttled, st.Message, st.LastError = "", "", ""
	const why = "source is locating GTID 0-1-4711 in binlog binlog.000007: nothing to do"
	st.Streams[0].Waiting, st.Waiting = why, why+" (target main, source main)"
	require.Contains(t, renderStatus(w, renderNow), "  stream main → main waiting: "+why)
	require.True(t, strings.HasSuffix(renderLine(w, renderNow), " waiting: "+why+" (target main, source main)"), renderLine(w, renderNow))
	require.Contains(t, renderList([]*rowliftv1.Workflow{w}), "waiting: "+why)
	require.Contains(t, verifyStalls(st), "; stream main -> main waiting: "+why)
}

func TestRenderLineAndList(t *testing.T) {
	require.Equal(t, "2025-11-22T15:40:00Z shop-move copying 51.4% rows 1,334,567/2,598,000 rate 41,234/s lag 1.2s eta 30s "+
		"throttled: source Threads_running 57 > 50 — copying 3 tables", renderLine(copyingWorkflow(), renderNow))

	fresh := workflowIn("other", rowliftv1.WorkflowState_WORKFLOW_STATE_INIT, rowliftv1.WorkflowPhase_WORKFLOW_PHASE_UNSPECIFIED)
	require.Equal(t, "NAME       PHASE    COPIED  LAG   ETA  MESSAGE\n"+
		"shop-move  copying  51.4%   1.2s  30s  copying 3 tables\n"+
		"other      init     ?       -     -\n", renderList([]*rowliftv1.Workflow{copyingWorkflow(), fresh}))
	require.Equal(t, "no workflows\n", renderList(nil))
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second:                          "0s",
		0:                                     "0s",
		120 * time.Millisecond:                "120ms",
		1249 * time.Millisecond:               "1.2s",
		9960 * time.Millisecond:               "10.0s",
		45*time.Second + 900*time.Millisecond: "45s",
		3*time.Minute + 5*time.Second:         "3m05s",
		59*time.Minute + 59*time.Second + 600*time.Millisecond: "60m00s",
		2*time.Hour + 5*time.Minute + 20*time.Second:           "2h05m",
		3*24*time.Hour + 4*time.Hour + 10*time.Minute:          "3d04h",
	} {
		require.Equal(t, want, formatDuration(d), "%s", d)
	}
	require.Equal(t, "-", formatSeconds(-1))
	require.Equal(t, "1m40s", formatSeconds(100))
	require.Equal(t, "-", formatAgo(renderNow, 0))
	require.Equal(t, "2h00m ago", formatAgo(renderNow, us(2*time.Hour)))
}

func TestFormatNumbers(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234567: "-1,234,567"} {
		require.Equal(t, want, statustext.Count(n))
	}
	require.Equal(t, "-", formatRate(0))
	require.Equal(t, "12,346/s", formatRate(12345.6))
	require.Equal(t, "49.4%", statustext.Percent(49.38))
	require.Equal(t, "?", statustext.Percent(-1))
}

func TestBar(t *testing.T) {
	require.Equal(t, "[----------]", bar(0, 10))
	require.Equal(t, "[####------]", bar(49.9, 10), "a cell fills once wholly reached")
	require.Equal(t, "[#########-]", bar(99.9, 10), "full only when done")
	require.Equal(t, "[##########]", bar(100, 10))
	require.Equal(t, "[##########]", bar(140, 10))
	require.Equal(t, "[??????????]", bar(-1, 10))
}

func TestTableETA(t *testing.T) {
	require.Equal(t, "done", tableETA(&rowliftv1.TableStatus{Done: true, RowsPerSecond: 5}))
	require.Equal(t, "adding keys by_k, by_n", tableETA(&rowliftv1.TableStatus{Done: true, KeysPending: []string{"by_k", "by_n"}}))
	require.Equal(t, "-", tableETA(&rowliftv1.TableStatus{RowsCopied: 10, RowsEstimate: 100}), "no rate yet")
	require.Equal(t, "-", tableETA(&rowliftv1.TableStatus{RowsCopied: 120, RowsEstimate: 100, RowsPerSecond: 5}), "estimate passed")
	require.Equal(t, "1m30s", tableETA(&rowliftv1.TableStatus{RowsCopied: 100, RowsEstimate: 1000, RowsPerSecond: 10}))
}

// TestShownOptionsRecreateTheWorkflow checks that the options `show` prints are
// create flags that set the same options.
func TestShownOptionsRecreateTheWorkflow(t *testing.T) {
	opts := &rowliftv1.WorkflowOptions{
		OnDdl: rowliftv1.OnDDL_ON_DDL_IGNORE, ChunkRows: 1, ChunkBytes: 12, PacketBytes: 2, ParallelTables: 3, ApplyWorkers: 4,
		SkipCreateTables: true, AllowNonemptyTarget: true, OutOfOrderCommit: true, CopyMethod: rowliftv1.CopyMethod_COPY_METHOD_INSERT,
		CommitBatchItems: 5, CommitBatchBytes: 6, CommitBatchMs: 7, MaxReplayLagMs: -1,
		Throttle: &rowliftv1.Throttle{
			Source:          &rowliftv1.ThrottleLimits{ThreadsRunning: 8, HistoryLength: 9, LagQuery: "SELECT 'a b'", MaxLagSeconds: 1.5},
			Target:          &rowliftv1.ThrottleLimits{ThreadsRunning: 10},
			CheckIntervalMs: 11,
		},
	}
	shown := optionFlags(opts)
	var args []string
	for _, f := range shown {
		name, value, hasValue := strings.Cut(f, " ")
		if q, err := strconv.Unquote(value); err == nil {
			value = q
		}
		args = append(args, name)
		if hasValue {
			args = append(args, value)
		}
	}
	var c createFlags
	fs := newTestFlagSet()
	c.register(fs)
	require.NoError(t, fs.Parse(append(args, "--name", "w", "--source", "m=h:1", "--target", "m", "--source-database", "d", "--table", "t")))
	spec, err := c.spec()
	require.NoError(t, err)
	require.True(t, proto.Equal(opts, spec.GetOptions()), "shown %q, got %v", shown, spec.GetOptions())
	require.Empty(t, optionFlags(&rowliftv1.WorkflowOptions{OnDdl: rowliftv1.OnDDL_ON_DDL_EXEC}), "defaults are not shown")
	require.Equal(t, []string{"--on-ddl stop"}, optionFlags(&rowliftv1.WorkflowOptions{}),
		"a workflow from before EXEC was the default stops at a schema change, and says so")
}

func TestWatchEnd(t *testing.T) {
	st := func(phase rowliftv1.WorkflowPhase, message string) *rowliftv1.WorkflowStatus {
		return &rowliftv1.WorkflowStatus{Phase: phase, Message: message, LastError: "last"}
	}
	for _, tc := range []struct {
		status *rowliftv1.WorkflowStatus
		until  string
		end    bool
		err    string
	}{
		{st(rowliftv1.WorkflowPhase_WORKFLOW_PHASE_COPYING, ""), "", false, ""},
		{st(rowliftv1.WorkflowPhase_WORKFLOW_PHASE_RUNNING, ""), "", false, ""},
		{st(rowliftv1.WorkflowPhase_WORKFLOW_PHASE_COPYING, ""), "running", false, ""},
		{st(rowliftv1.WorkflowPhase_WORKFLOW_PHASE_CATCHING_UP, ""), "running", false, ""},
		{st(rowliftv1.WorkflowPhase_WORKFLOW_PHASE_CATCHING_UP, ""), "catching up", true, ""},
		{st(rowliftv1.WorkflowPhase_WORKFLOW_PHASE_RUNNING, ""), "catching up", true, ""},
		{st(rowliftv1.WorkflowPhase_WORKFLOW_PHASE_DONE, ""), "", true, ""},
		{st(rowliftv1.WorkflowPhase_WORKFLOW_PHASE_STOPPED, "by operator"), "", true, ""},
		{st(rowliftv1.WorkflowPhase_WORKFLOW_PHASE_STOPPED, "by operator"), "running", true, "workflow stopped before reaching running: by operator"},
		{st(rowliftv1.WorkflowPhase_WORKFLOW_PHASE_ERROR, "table gone"), "", true, "workflow failed: table gone"},
		{st(rowliftv1.WorkflowPhase_WORKFLOW_PHASE_ERROR, ""), "", true, "workflow failed: last"},
		// A coordinator without phases: the state decides.
		{&rowliftv1.WorkflowStatus{State: rowliftv1.WorkflowState_WORKFLOW_STATE_RUNNING}, "running", true, ""},
	} {
		end, err := watchEnd(tc.status, tc.until)
		require.Equal(t, tc.end, end, "%v until %q", tc.status, tc.until)
		if tc.err == "" {
			require.NoError(t, err)
		} else {
			require.EqualError(t, err, tc.err)
		}
	}
}

func TestLiveViewRedrawsInPlace(t *testing.T) {
	var out strings.Builder
	v := &liveView{w: &out, width: func() int { return 12 }}
	require.NoError(t, v.draw([]string{"one", "a line too long for the width", ""}))
	require.Equal(t, "\r\x1b[2Kone\n\x1b[2Ka line too…\n\x1b[2K\n\x1b[J", out.String(),
		"cut to one column less than the width, so the terminal never wraps")
	out.Reset()
	require.NoError(t, v.draw([]string{"two"}))
	require.Equal(t, "\x1b[3A\r\x1b[2Ktwo\n\x1b[J", out.String(), "up over the 3 lines drawn, and the rest cleared")
	out.Reset()
	v.width = func() int { return 0 }
	require.NoError(t, v.draw([]string{"a line too long for the width"}))
	require.Equal(t, "\x1b[1A\r\x1b[2Ka line too long for the width\n\x1b[J", out.String(), "unknown width: no cut")
}

func TestRenderShowCutover(t *testing.T) {
	w := copyingWorkflow()
	st := w.Status
	st.State, st.Phase, st.Throttled = rowliftv1.WorkflowState_WORKFLOW_STATE_SWITCHED, rowliftv1.WorkflowPhase_WORKFLOW_PHASE_SWITCHED, ""
	st.Cutover = &rowliftv1.CutoverStatus{Direction: "switch", Step: "done", ReverseWorkflow: "shop-move_reverse",
		FreezePositions: []string{"main: 0-1-4711"}, WritePauseMs: 48, StartedAtUs: renderNow.Add(-2 * time.Minute).UnixMicro()}
	out := renderShow(w, renderNow)
	require.Contains(t, out, "cutover   switch done (started 2m00s ago), write pause 48 ms, frozen at main: 0-1-4711, reverse workflow shop-move_reverse\n")
	require.Contains(t, out, "workflow shop-move   switched")

	st.Cutover = &rowliftv1.CutoverStatus{Direction: "reverse", Step: "rolled_back", WritePauseMs: -1,
		Message: "the streams did not apply the freeze positions before the deadline"}
	require.Contains(t, renderShow(w, renderNow), "cutover   reverse rolled back: the streams did not apply the freeze positions before the deadline\n",
		"a journal of an older coordinator, with no steps, shows its last one")

	start := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	at := func(ms int) int64 { return start.Add(time.Duration(ms) * time.Millisecond).UnixMicro() }
	st.Cutover.StartedAtUs = start.UnixMicro()
	st.Cutover.Steps = []*rowliftv1.CutoverStep{{Step: "freezing", AtUs: at(0)}, {Step: "frozen", AtUs: at(35)},
		{Step: "rolling_back", AtUs: at(60_012), Message: "the streams did not apply the freeze positions before the deadline"},
		{Step: "rolled_back", AtUs: at(60_140)}}
	require.Contains(t, renderShow(w, renderNow), "cutover   reverse rolled back (started "+formatAgo(renderNow, start.UnixMicro())+
		"): the streams did not apply the freeze positions before the deadline\n"+
		"          07:08:09.000 UTC  freezing at +0 ms\n"+
		"          07:08:09.035 UTC  frozen at +35 ms\n"+
		"          07:09:09.012 UTC  rolling back at +60,012 ms: the streams did not apply the freeze positions before the deadline\n"+
		"          07:09:09.140 UTC  rolled back at +60,140 ms\n")
}

func TestRenderVerify(t *testing.T) {
	require.Equal(t, "never verified", statustext.Verify(nil))
	v := &rowliftv1.VerifyStatus{State: rowliftv1.VerifyState_VERIFY_STATE_RUNNING, RowsCompared: 12345, Percent: 40}
	require.Equal(t, "verify running, 40.0%: 12,345 rows compared, no difference", statustext.Verify(v))
	v = &rowliftv1.VerifyStatus{State: rowliftv1.VerifyState_VERIFY_STATE_DONE, Repair: true, RowsCompared: 3000, Missing: 1, Different: 2, Repaired: 3,
		Tables: []*rowliftv1.VerifyTable{
			{Name: "a", RowsCompared: 1000, Done: true},
			{Name: "b", RowsCompared: 2000, Missing: 1, Different: 2, Repaired: 3, Done: true,
				Examples: []string{"missing on target: (id=5)", "different: (k='a'), on target (k='A')"}},
		}}
	require.Equal(t, `verify with repair done: 3,000 rows compared, 1 missing on target, 0 extra on target, 2 different, 3 repaired
  a: identical, 1,000 rows
  b: 1 missing on target, 0 extra on target, 2 different of 2,000 rows, 3 repaired
    missing on target: (id=5)
    different: (k='a'), on target (k='A')
    (first 2 of 3; every repaired key is in the applier's log)
`, renderVerifyResult(v))
}

func TestRenderVerifyEndedEarly(t *testing.T) {
	v := &rowliftv1.VerifyStatus{State: rowliftv1.VerifyState_VERIFY_STATE_CANCELLED, RowsCompared: 420, Percent: 42,
		Message: "cancelled by `rowlift workflow verify race --cancel`"}
	require.Equal(t, "verify cancelled at 42.0%: 420 rows compared, no difference (cancelled by `rowlift workflow verify race --cancel`)", statustext.Verify(v))
	v = &rowliftv1.VerifyStatus{State: rowliftv1.VerifyState_VERIFY_STATE_FAILED, RowsCompared: 10, Message: "table race.ints no longer exists"}
	require.Equal(t, "verify failed: 10 rows compared, no difference (table race.ints no longer exists)", statustext.Verify(v))
	v.Tables = []*rowliftv1.VerifyTable{{Name: "ints", RowsCompared: 10, Done: true, Message: "table race.ints no longer exists"},
		{Name: "uniq", RowsCompared: 0, Done: true}}
	require.Equal(t, `verify failed: 10 rows compared, no difference (table race.ints no longer exists)
  ints: stopped after 10 rows, no difference so far: table race.ints no longer exists
  uniq: identical, 0 rows
`, renderVerifyResult(v))
	v = &rowliftv1.VerifyStatus{State: rowliftv1.VerifyState_VERIFY_STATE_CANCELLED, RowsCompared: 30, Percent: 30, Message: "cancelled by a switch",
		Tables: []*rowliftv1.VerifyTable{{Name: "a", RowsCompared: 20, Done: true}, {Name: "b", RowsCompared: 10, Done: true, Message: "cancelled by a switch"}}}
	require.Equal(t, `verify cancelled at 30.0%: 30 rows compared, no difference (cancelled by a switch)
  a: identical, 20 rows
  b: cancelled after 10 rows, no difference so far
`, renderVerifyResult(v))
	v = &rowliftv1.VerifyStatus{State: rowliftv1.VerifyState_VERIFY_STATE_RUNNING, RowsCompared: 10, Percent: -1}
	require.Equal(t, "verify running: 10 rows compared, no difference", statustext.Verify(v), "no estimate: no percentage")
}

// TestVerifyStalls: --wait's progress line names a retrying stream and a
// workflow that stopped, which keep a verify from moving.
func TestVerifyStalls(t *testing.T) {
	st := &rowliftv1.WorkflowStatus{State: rowliftv1.WorkflowState_WORKFLOW_STATE_RUNNING, Streams: []*rowliftv1.StreamStatus{
		{Source: "main", Target: "main", Retrying: "retrying (attempt 3, next in 2s): streamer 127.0.0.1:7001 (source main): connection refused"},
		{Source: "other", Target: "main"},
	}}
	require.Equal(t, "; stream main -> main retrying (attempt 3, next in 2s): streamer 127.0.0.1:7001 (source main): connection refused", verifyStalls(st))
	st = &rowliftv1.WorkflowStatus{State: rowliftv1.WorkflowState_WORKFLOW_STATE_ERROR, Message: "DDL on race.ints"}
	require.Equal(t, "; the verify waits for the workflow, which is error (DDL on race.ints)", verifyStalls(st))
	require.Empty(t, verifyStalls(&rowliftv1.WorkflowStatus{State: rowliftv1.WorkflowState_WORKFLOW_STATE_RUNNING}))
}

// TestRenderTargetError: the coordinator's message names the target, so the
// line shows it once ("target main: target main (...)" did), and adds the
// workflows it hides.
func TestRenderTargetError(t *testing.T) {
	te := &rowliftv1.TargetError{Target: "main", Message: "target main (10.0.0.5:3306): server unreachable", Workflows: []string{"a", "b"}}
	require.Equal(t, "target main (10.0.0.5:3306): server unreachable (not listed, as their status would be incomplete: a, b)", renderTargetError(te))
	te.Workflows = nil
	require.Equal(t, "target main (10.0.0.5:3306): server unreachable", renderTargetError(te))
}
