package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rowlift/rowlift/applier"
	"github.com/rowlift/rowlift/internal/statustext"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/streamer"
)

// The text views are pure functions of a Workflow and the time now, so that what
// an operator reads is tested as text.

// barWidth is the number of cells of a progress bar between its brackets.
const barWidth = 30

// bar draws a progress bar of percent (0 to 100); a negative percent is unknown.
func bar(percent float64, width int) string {
	if percent < 0 {
		return "[" + strings.Repeat("?", width) + "]"
	}
	filled := int(math.Floor(math.Min(percent, 100) / 100 * float64(width)))
	return "[" + strings.Repeat("#", filled) + strings.Repeat("-", width-filled) + "]"
}

// formatRate is a rows-per-second rate, "-" when there is none.
func formatRate(perSecond float64) string {
	if perSecond <= 0 {
		return "-"
	}
	return statustext.Count(int64(math.Round(perSecond))) + "/s"
}

// formatDuration is d rounded to what an operator reads at a glance: 120ms, 1.2s,
// 45s, 3m05s, 2h05m, 3d04h.
func formatDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < 10*time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	d = d.Round(time.Hour)
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

// formatSeconds is a number of seconds as formatDuration shows it, "-" when
// negative (unknown).
func formatSeconds(s float64) string {
	if s < 0 || math.IsNaN(s) || math.IsInf(s, 0) {
		return "-"
	}
	return formatDuration(time.Duration(s * float64(time.Second)))
}

// formatAgo is how long before now the microsecond timestamp us was, "-" when unset.
func formatAgo(now time.Time, us int64) string {
	if us <= 0 {
		return "-"
	}
	return formatDuration(now.Sub(time.UnixMicro(us))) + " ago"
}

// tablePercent is a table's percent copied, negative when unknown: the estimate
// is missing and the copy not done.
func tablePercent(t *rowliftv1.TableStatus) float64 {
	if !t.GetDone() && t.GetRowsEstimate() <= 0 {
		return -1
	}
	return t.GetPercent()
}

// tableETA is the time a table's copy has left at its current rate.
func tableETA(t *rowliftv1.TableStatus) string {
	left := t.GetRowsEstimate() - t.GetRowsCopied()
	switch {
	case t.GetDone() && len(t.GetKeysPending()) > 0:
		return "adding keys " + strings.Join(t.GetKeysPending(), ", ")
	case t.GetDone():
		return "done"
	case t.GetRowsPerSecond() <= 0 || left <= 0:
		return "-"
	}
	return formatSeconds(float64(left) / t.GetRowsPerSecond())
}

// ofEstimate is "copied / estimate" in format's words (rows or bytes), the
// estimate "?" while unknown and the amount copied once done.
func ofEstimate(copied, estimate int64, done bool, format func(int64) string) string {
	est := "?"
	switch {
	case done:
		est = format(copied)
	case estimate > 0:
		est = format(estimate)
	}
	return format(copied) + " / " + est
}

// lagText is the workflow's lag, "-" until a stream has applied anything.
func lagText(st *rowliftv1.WorkflowStatus) string {
	for _, s := range st.GetStreams() {
		if s.GetSourceTimeUs() > 0 {
			return formatDuration(time.Duration(st.GetLagMs()) * time.Millisecond)
		}
	}
	return "-"
}

// throttleText says whether a throttle holds the copy, and why.
func throttleText(st *rowliftv1.WorkflowStatus) string {
	if t := st.GetThrottled(); t != "" {
		return "throttled: " + t
	}
	return "not throttled"
}

// renderStatus is the live view of a workflow: a header with phase, lag, ETA and
// throttle, a progress bar per table and overall, the streams, and the last error.
// It is what watch redraws and the second half of show.
func renderStatus(w *rowliftv1.Workflow, now time.Time) []string {
	st := w.GetStatus()
	lines := []string{fmt.Sprintf("workflow %s   %s   lag %s   eta %s   %s",
		w.GetSpec().GetName(), statustext.Phase(st), lagText(st), formatSeconds(st.GetEtaSeconds()), throttleText(st))}
	if msg := st.GetMessage(); msg != "" {
		lines = append(lines, "  "+msg)
	}
	// Numbers read best right-aligned (AlignRight pads every cell on the left),
	// so the name and the bar, which read best left-aligned, share one cell
	// padded by hand.
	nameWidth := len("total")
	for _, t := range st.GetTables() {
		nameWidth = max(nameWidth, len(t.GetName()))
	}
	lines = append(lines, "")
	lines = append(lines, columns(tabwriter.AlignRight, func(w io.Writer) {
		row := func(name, bar, percent, rows, bytes, rate, eta string) {
			fmt.Fprintf(w, "%-*s %s\t%s\t%s\t%s\t%s\t%s\t\n", nameWidth, name, bar, percent, rows, bytes, rate, eta)
		}
		row("TABLE", fmt.Sprintf("%-*s", barWidth+2, "PROGRESS"), "", "ROWS", "BYTES", "RATE", "ETA")
		for _, t := range st.GetTables() {
			p := tablePercent(t)
			row(t.GetName(), bar(p, barWidth), statustext.Percent(p), ofEstimate(t.GetRowsCopied(), t.GetRowsEstimate(), t.GetDone(), statustext.Count),
				ofEstimate(t.GetBytesCopied(), t.GetBytesEstimate(), t.GetDone(), statustext.Bytes), formatRate(t.GetRowsPerSecond()), tableETA(t))
		}
		total, eta := totalPercent(st), formatSeconds(st.GetEtaSeconds())
		if total >= 100 {
			eta = "done"
		}
		row("total", bar(total, barWidth), statustext.Percent(total), ofEstimate(st.GetRowsCopied(), st.GetRowsEstimate(), total >= 100, statustext.Count),
			ofEstimate(st.GetBytesCopied(), st.GetBytesEstimate(), total >= 100, statustext.Bytes), formatRate(st.GetRowsPerSecond()), eta)
	})...)

	if streams := st.GetStreams(); len(streams) > 0 {
		lines = append(lines, "")
		lines = append(lines, columns(0, func(w io.Writer) {
			// A reshard's streams each carry a key range and their own rows.
			reshard := slices.ContainsFunc(streams, func(s *rowliftv1.StreamStatus) bool { return s.GetKeyRange() != "" })
			if reshard {
				fmt.Fprintln(w, "  STREAM\tRANGE\tROWS\tLAG\tLAST COMMIT\tPOSITION")
			} else {
				fmt.Fprintln(w, "  STREAM\tLAG\tLAST COMMIT\tPOSITION")
			}
			for _, s := range streams {
				lag := "-"
				if s.GetSourceTimeUs() > 0 {
					lag = formatDuration(time.Duration(s.GetLagMs()) * time.Millisecond)
				}
				fmt.Fprintf(w, "  %s → %s\t", s.GetSource(), s.GetTarget())
				if reshard {
					fmt.Fprintf(w, "%s\t%s\t", s.GetKeyRange(), statustext.Count(s.GetRowsCopied()))
				}
				fmt.Fprintf(w, "%s\t%s\t%s\n", lag, formatAgo(now, s.GetHeartbeatAtUs()), s.GetPosition().GetGtidSet())
			}
		})...)
		for _, s := range streams {
			if srv := s.GetSourceServer(); srv != "" {
				lines = append(lines, fmt.Sprintf("  stream %s → %s reads source server %s", s.GetSource(), s.GetTarget(), srv))
			}
			if r := s.GetRetrying(); r != "" {
				lines = append(lines, fmt.Sprintf("  stream %s → %s retrying (since %s): %s", s.GetSource(), s.GetTarget(), formatAgo(now, s.GetRetryingSinceUs()), r))
			}
			if w := s.GetWaiting(); w != "" {
				lines = append(lines, fmt.Sprintf("  stream %s → %s waiting: %s", s.GetSource(), s.GetTarget(), w))
			}
			if l := s.GetLost(); l != "" {
				lines = append(lines, fmt.Sprintf("  stream %s → %s: its source lacks transactions the target applied: %s (rowlift workflow rewind)", s.GetSource(), s.GetTarget(), l))
			}
			if r := s.GetRepairing(); r != "" {
				lines = append(lines, fmt.Sprintf("  stream %s → %s repairing after a rewind past %s: replay writes idempotently until the verify with repair finishes", s.GetSource(), s.GetTarget(), r))
			}
		}
	}
	if e := st.GetLastError(); e != "" {
		lines = append(lines, "", fmt.Sprintf("last error (%s): %s", formatAgo(now, st.GetLastErrorAtUs()), e))
	}
	return lines
}

// renderShow is `workflow show`: the definition, with the options as the create
// flags that set them, then the status view.
func renderShow(w *rowliftv1.Workflow, now time.Time) string {
	spec, st := w.GetSpec(), w.GetStatus()
	var def []string
	def = append(def, fmt.Sprintf("name\t%s", spec.GetName()))
	if us := st.GetCreatedAtUs(); us > 0 {
		def = append(def, fmt.Sprintf("created\t%s (%s)", time.UnixMicro(us).UTC().Format("2006-01-02 15:04:05 MST"), formatAgo(now, us)))
	}
	var parts []string
	for _, s := range spec.GetSources() {
		p := s.GetName() + "=" + s.GetStreamerAddress()
		if k := s.GetKeyRange(); k != "" {
			p += " (" + k + ")"
		}
		parts = append(parts, p)
	}
	def = append(def, fmt.Sprintf("sources\t%s", strings.Join(parts, ", ")))
	parts = parts[:0]
	for _, t := range spec.GetTargets() {
		p := t.GetName()
		if a := t.GetApplierAddress(); a != "" {
			p += "=" + a
		}
		if k := t.GetKeyRange(); k != "" {
			p += " (" + k + ")"
		}
		parts = append(parts, p)
	}
	def = append(def, fmt.Sprintf("targets\t%s", strings.Join(parts, ", ")))
	def = append(def, fmt.Sprintf("database\t%s → %s", spec.GetSourceDatabase(), applier.TargetDatabase(spec)))
	parts = parts[:0]
	for _, t := range spec.GetTables() {
		p := t.GetName()
		if cols := t.GetColumns(); len(cols) > 0 {
			p += ":" + strings.Join(cols, ",")
		}
		if name, mapped := applier.TargetTable(spec, t.GetName()); mapped {
			p += "→" + name
		}
		switch {
		case t.GetShardingColumn() != "":
			fn := t.GetShardingFunction()
			if fn == "" {
				fn = "hash"
			}
			p += " (by " + t.GetShardingColumn() + ":" + fn + ")"
		case t.GetReference():
			p += " (reference)"
		}
		parts = append(parts, p)
	}
	def = append(def, fmt.Sprintf("tables\t%s", strings.Join(parts, " ")))
	if opts := optionFlags(spec.GetOptions()); len(opts) > 0 {
		def = append(def, fmt.Sprintf("options\t%s", strings.Join(opts, " ")))
	}
	def = append(def, "catch-up\t"+renderCatchUp(spec.GetOptions()))
	if v := st.GetVerify(); v != nil {
		def = append(def, "verify\t"+statustext.Verify(v))
	}
	if c := st.GetCutover(); c != nil {
		def = append(def, "cutover\t"+renderCutover(c, now))
		for _, step := range c.GetSteps() {
			def = append(def, "\t"+time.UnixMicro(step.GetAtUs()).UTC().Format("15:04:05.000 MST")+"  "+statustext.CutoverStep(step, c.GetStartedAtUs()))
		}
	}
	lines := columns(0, func(w io.Writer) { fmt.Fprintln(w, strings.Join(def, "\n")) })
	lines = append(append(lines, ""), renderStatus(w, now)...)
	return strings.Join(lines, "\n") + "\n"
}

// renderCutover is the last switch or reverse on one line: what, where it
// is, and the write pause once known.
func renderCutover(c *rowliftv1.CutoverStatus, now time.Time) string {
	p := c.GetDirection() + " " + strings.ReplaceAll(c.GetStep(), "_", " ")
	if us := c.GetStartedAtUs(); us > 0 {
		p += " (started " + formatAgo(now, us) + ")"
	}
	if ms := c.GetWritePauseMs(); ms >= 0 {
		p += fmt.Sprintf(", write pause %d ms", ms)
	}
	if pos := c.GetFreezePositions(); len(pos) > 0 {
		p += ", frozen at " + strings.Join(pos, ", ")
	}
	if r := c.GetReverseWorkflow(); r != "" {
		p += ", reverse workflow " + r
	}
	if m := c.GetMessage(); m != "" {
		p += ": " + m
	}
	return p
}

// renderCatchUp says how the copy yields to replay (max_replay_lag_ms),
// default included: what an operator asks when a copy pauses under writes.
func renderCatchUp(o *rowliftv1.WorkflowOptions) string {
	ms := o.GetMaxReplayLagMs()
	switch {
	case ms < 0:
		return "off: the copy never waits for replay (--max-replay-lag-ms " + strconv.FormatInt(ms, 10) + ")"
	case ms == 0:
		return catchUp(streamer.DefaultMaxReplayLag) + " (the default)"
	}
	return catchUp(time.Duration(ms) * time.Millisecond)
}

// catchUp words a bound in force: the gate and the pacing it sets.
func catchUp(bound time.Duration) string {
	return "the copy waits while replay lags over " + bound.String() + ", and sizes chunks under writes to be applied within " + (bound / 2).String()
}

// optionFlags are the create flags that set o's non-default options.
func optionFlags(o *rowliftv1.WorkflowOptions) []string {
	var f []string
	num := func(name string, v int64) {
		if v != 0 {
			f = append(f, "--"+name+" "+strconv.FormatInt(v, 10))
		}
	}
	flag := func(name string, on bool) {
		if on {
			f = append(f, "--"+name)
		}
	}
	num("chunk-rows", o.GetChunkRows())
	num("chunk-bytes", o.GetChunkBytes())
	num("packet-bytes", o.GetPacketBytes())
	num("parallel-tables", int64(o.GetParallelTables()))
	num("apply-workers", int64(o.GetApplyWorkers()))
	num("commit-batch-items", int64(o.GetCommitBatchItems()))
	num("commit-batch-bytes", o.GetCommitBatchBytes())
	num("commit-batch-ms", int64(o.GetCommitBatchMs()))
	num("max-replay-lag-ms", o.GetMaxReplayLagMs())
	flag("out-of-order-commit", o.GetOutOfOrderCommit())
	flag("json-as-text", o.GetJsonAsText())
	switch d := o.GetOnDdl(); d {
	case rowliftv1.OnDDL_ON_DDL_EXEC: // the default
	case rowliftv1.OnDDL_ON_DDL_UNSPECIFIED: // a workflow from before EXEC was the default
		f = append(f, "--on-ddl stop")
	default:
		f = append(f, "--on-ddl "+statustext.EnumWords(d.String(), "ON_DDL_"))
	}
	if m := o.GetCopyMethod(); m != rowliftv1.CopyMethod_COPY_METHOD_UNSPECIFIED {
		f = append(f, "--copy-method "+strings.ReplaceAll(statustext.EnumWords(m.String(), "COPY_METHOD_"), " ", "-"))
	}
	flag("skip-create-tables", o.GetSkipCreateTables())
	flag("allow-nonempty-target", o.GetAllowNonemptyTarget())
	flag("keep-secondary-keys", o.GetKeepSecondaryKeys())
	for _, side := range []struct {
		name string
		l    *rowliftv1.ThrottleLimits
	}{{"source", o.GetThrottle().GetSource()}, {"target", o.GetThrottle().GetTarget()}} {
		p := "throttle-" + side.name + "-"
		num(p+"threads-running", side.l.GetThreadsRunning())
		num(p+"history-length", side.l.GetHistoryLength())
		if q := side.l.GetLagQuery(); q != "" {
			f = append(f, "--"+p+"lag-query "+strconv.Quote(q))
		}
		if s := side.l.GetMaxLagSeconds(); s != 0 {
			f = append(f, "--"+p+"max-lag-seconds "+strconv.FormatFloat(s, 'g', -1, 64))
		}
	}
	num("throttle-check-ms", o.GetThrottle().GetCheckIntervalMs())
	return f
}

// renderList is `workflow list`: one line per workflow.
func renderList(ws []*rowliftv1.Workflow) string {
	if len(ws) == 0 {
		return "no workflows\n"
	}
	return strings.Join(columns(0, func(tw io.Writer) {
		fmt.Fprintln(tw, "NAME\tPHASE\tCOPIED\tLAG\tETA\tMESSAGE")
		for _, w := range ws {
			st := w.GetStatus()
			msg := st.GetMessage()
			if msg == "" && st.GetThrottled() != "" {
				msg = throttleText(st)
			}
			if msg == "" && st.GetWaiting() != "" {
				msg = "waiting: " + st.GetWaiting()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", w.GetSpec().GetName(), statustext.Phase(st), statustext.Percent(totalPercent(st)),
				lagText(st), formatSeconds(st.GetEtaSeconds()), msg)
		}
	}), "\n") + "\n"
}

// renderTargetError is the line for a target ListWorkflows could not read.
func renderTargetError(te *rowliftv1.TargetError) string {
	line := te.GetMessage() // it names the target
	if len(te.GetWorkflows()) > 0 {
		line += " (not listed, as their status would be incomplete: " + strings.Join(te.GetWorkflows(), ", ") + ")"
	}
	return line
}

// columns lays out the tab-separated cells fill writes as aligned columns two
// spaces apart (tabwriter flags), as lines without trailing spaces.
func columns(flags uint, fill func(w io.Writer)) []string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', flags)
	fill(tw)
	_ = tw.Flush() // a strings.Builder does not fail
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return lines
}

// totalPercent is the workflow's percent copied, negative when unknown.
func totalPercent(st *rowliftv1.WorkflowStatus) float64 {
	if st.GetRowsEstimate() <= 0 && st.GetPercent() < 100 {
		return -1
	}
	return st.GetPercent()
}

// renderLine is one line of watch's plain output (not a terminal): a timestamped
// summary an operator can follow in a log.
func renderLine(w *rowliftv1.Workflow, now time.Time) string {
	st := w.GetStatus()
	line := fmt.Sprintf("%s %s %s %s rows %s rate %s lag %s eta %s",
		now.Format(time.RFC3339), w.GetSpec().GetName(), statustext.Phase(st), statustext.Percent(totalPercent(st)),
		strings.ReplaceAll(ofEstimate(st.GetRowsCopied(), st.GetRowsEstimate(), totalPercent(st) >= 100, statustext.Count), " ", ""),
		formatRate(st.GetRowsPerSecond()), lagText(st), formatSeconds(st.GetEtaSeconds()))
	if t := st.GetThrottled(); t != "" {
		line += " throttled: " + t
	}
	if w := st.GetWaiting(); w != "" {
		line += " waiting: " + w
	}
	if msg := st.GetMessage(); msg != "" {
		line += " — " + msg
	}
	return line
}
