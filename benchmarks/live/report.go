package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
)

// report is what a run prints and stores as JSON: the headline numbers at
// the top level, then both windows in full and the move's samples.
type report struct {
	benchkit.Header
	Flags flags   `json:"flags"`
	SeedS float64 `json:"seed_s"`

	// CopyS is t0 until every table's copy was done, CaughtUpS t0 until the
	// first sample from then on with a heartbeat lag of at most 1 s, and
	// LagPeakS the largest heartbeat lag from t0 until the copy was done.
	CopyS     float64 `json:"copy_s"`
	CaughtUpS float64 `json:"caught_up_s"`
	LagPeakS  float64 `json:"lag_peak_s"`
	// RowliftLagPeakS is the largest lag the store recorded (at the
	// applier's commits) from t0 until the copy was done.
	RowliftLagPeakS float64 `json:"rowlift_lag_peak_s"`

	AppP50MsBaseline float64 `json:"app_p50_ms_baseline"`
	AppP95MsBaseline float64 `json:"app_p95_ms_baseline"`
	AppP99MsBaseline float64 `json:"app_p99_ms_baseline"`
	AppP50MsMove     float64 `json:"app_p50_ms_move"`
	AppP95MsMove     float64 `json:"app_p95_ms_move"`
	AppP99MsMove     float64 `json:"app_p99_ms_move"`
	TPSBaseline      float64 `json:"tps_baseline"`
	TPSMove          float64 `json:"tps_move"`

	CPUSBaseline        benchkit.CPUUse `json:"cpu_s_baseline"`
	CPUSMove            benchkit.CPUUse `json:"cpu_s_move"`
	CPUUsPerTxnBaseline benchkit.CPUUse `json:"cpu_us_per_txn_baseline"`
	CPUUsPerTxnMove     benchkit.CPUUse `json:"cpu_us_per_txn_move"`

	// Retries are every transaction's retries in the run, RetriesBaseline
	// and RetriesMove those of the transactions due in each window.
	Retries         int64 `json:"retries"`
	RetriesBaseline int64 `json:"retries_baseline"`
	RetriesMove     int64 `json:"retries_move"`
	Transactions    int   `json:"transactions"`
	Heartbeats      int64 `json:"heartbeats"`

	Goals    []goal `json:"goals"`
	Baseline window `json:"baseline"`
	Move     window `json:"move"`
	// Samples are the move's, every 100 ms from t0 until it caught up.
	Samples []sampleJSON `json:"move_samples"`
	// Verified is the row-by-row comparison of each table after the run.
	Verified []string `json:"verified"`
	// LogProblems are the warning and error lines of the rowlift logs, by role.
	LogProblems map[string][]string `json:"log_problems"`
	// Fence is what the streamer logged of its chunk fences when the copy
	// ended (fence_locks, fence_lock_timeouts, fence_lock_wait, ...).
	Fence map[string]any `json:"fence"`
}

// flags is config with the baseline's duration readable.
type flags struct {
	config
	Baseline string `json:"baseline"`
	// SyncBinlog is what every server runs with, beside -flush.
	SyncBinlog int `json:"sync_binlog"`
}

// goal is one of the project's done-when goals for a live move.
type goal struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Max   float64 `json:"max"`
	Pass  bool    `json:"pass"`
}

// sampleJSON is a sample as the JSON stores it, in seconds from t0; a lag
// not read yet is null.
type sampleJSON struct {
	AtS           float64  `json:"t_s"`
	HeartbeatLagS *float64 `json:"heartbeat_lag_s"`
	RowliftLagS   *float64 `json:"rowlift_lag_s"`
	Copied        bool     `json:"copied"`
}

// newReport computes the report from the phases' times and samples and
// every transaction of the load.
func (b *bench) newReport(p phases, txns []txn, beats int64, verified []string, problems map[string][]string, fence map[string]any) *report {
	t0 := p.t0.UnixMicro()
	m := analyze(p.samples, t0, caughtUpLag.Microseconds())
	last := p.samples[m.caughtUp]
	r := &report{
		Header:       benchkit.NewHeader(b.Version),
		Flags:        flags{config: b.cfg, Baseline: b.cfg.Baseline.String(), SyncBinlog: 1},
		SeedS:        b.seedS,
		CopyS:        m.copyS,
		CaughtUpS:    m.caughtUpS,
		LagPeakS:     m.lagPeakS,
		Baseline:     summarize(txns, p.baselineFrom.UnixMicro(), t0, p.cpuT0.Sub(p.cpuBaselineFrom)),
		Move:         summarize(txns, t0, last.atUS, last.cpu.Sub(p.cpuT0)),
		Transactions: len(txns),
		Heartbeats:   beats,
		Verified:     verified,
		LogProblems:  problems,
		Fence:        fence,
	}
	for _, s := range p.samples[:m.copyDone+1] {
		r.RowliftLagPeakS = max(r.RowliftLagPeakS, float64(s.rowliftLagUS)/1e6)
	}
	for _, s := range p.samples {
		js := sampleJSON{AtS: float64(s.atUS-t0) / 1e6, Copied: s.copied}
		if s.heartbeatLagUS >= 0 {
			v := float64(s.heartbeatLagUS) / 1e6
			js.HeartbeatLagS = &v
		}
		if s.rowliftLagUS >= 0 {
			v := float64(s.rowliftLagUS) / 1e6
			js.RowliftLagS = &v
		}
		r.Samples = append(r.Samples, js)
	}
	for _, t := range txns {
		r.Retries += int64(t.retries)
	}
	bw, mw := r.Baseline, r.Move
	r.AppP50MsBaseline, r.AppP95MsBaseline, r.AppP99MsBaseline = bw.P50Ms, bw.P95Ms, bw.P99Ms
	r.AppP50MsMove, r.AppP95MsMove, r.AppP99MsMove = mw.P50Ms, mw.P95Ms, mw.P99Ms
	r.TPSBaseline, r.TPSMove = bw.TPS, mw.TPS
	r.CPUSBaseline, r.CPUSMove = bw.CPU, mw.CPU
	r.CPUUsPerTxnBaseline, r.CPUUsPerTxnMove = bw.CPUPerTxnUS, mw.CPUPerTxnUS
	r.RetriesBaseline, r.RetriesMove = bw.Retries, mw.Retries
	r.Goals = []goal{
		newGoal("caught_up_s / copy_s", r.CaughtUpS/r.CopyS, 1.3),
		newGoal("lag_peak_s", r.LagPeakS, 2),
		newGoal("app_p95_ms_move / app_p95_ms_baseline", r.AppP95MsMove/r.AppP95MsBaseline, 4),
	}
	return r
}

// newGoal is the goal called name that value meets when at most most.
func newGoal(name string, value, most float64) goal {
	return goal{Name: name, Value: value, Max: most, Pass: value <= most}
}

// print writes the report as the side-by-side table every benchmark prints.
func (r *report) print(w io.Writer) {
	f := r.Flags
	r.Header.Print(w)
	fmt.Fprintf(w, "sbtest1 of %d rows (seeded in %.1f s) + heartbeat; load: oltp_write_only at %.0f tps over %d connections; flush=%d sync_binlog=1 %s; max_replay_lag_ms %d\n",
		f.Rows, r.SeedS, f.TPS, f.Threads, f.Flush, f.Settings(), f.MaxReplayLagMs)
	if f.TargetNice != 0 {
		fmt.Fprintf(w, "the target server runs at nice %d (-target-nice: a target on a host of its own, modelled)\n", f.TargetNice)
	}
	row := func(what, baseline, move string) { fmt.Fprintf(w, "%-34s %-22s %s\n", what, baseline, move) }
	fmt.Fprintln(w)
	b, m := r.Baseline, r.Move
	row("", "baseline (load alone)", "move (t0 → caught up)")
	row("window, s", fmt.Sprintf("%.1f", b.WallS), fmt.Sprintf("%.1f", m.WallS))
	row("transactions/s, mean", fmt.Sprintf("%.0f", b.TPS), fmt.Sprintf("%.0f", m.TPS))
	row("latency p50 / p95 / p99, ms", fmt.Sprintf("%.1f / %.1f / %.1f", b.P50Ms, b.P95Ms, b.P99Ms), fmt.Sprintf("%.1f / %.1f / %.1f", m.P50Ms, m.P95Ms, m.P99Ms))
	row("retries (deadlock, lock wait)", fmt.Sprint(b.Retries), fmt.Sprint(m.Retries))
	fmt.Fprintln(w, "CPU µs per transaction:")
	for _, c := range []struct {
		name       string
		base, move float64
	}{
		{"source server", b.CPUPerTxnUS.Source, m.CPUPerTxnUS.Source},
		{"target server", b.CPUPerTxnUS.Target, m.CPUPerTxnUS.Target},
		{"streamer", b.CPUPerTxnUS.Streamer, m.CPUPerTxnUS.Streamer},
		{"applier", b.CPUPerTxnUS.Applier, m.CPUPerTxnUS.Applier},
		{"bench (load, heartbeat, samples)", b.CPUPerTxnUS.Bench, m.CPUPerTxnUS.Bench},
	} {
		row("  "+c.name, fmt.Sprintf("%.0f", c.base), fmt.Sprintf("%.0f", c.move))
	}
	fmt.Fprintf(w, "\nCPU s        %9s %9s %9s %9s %9s\n", "source", "target", "streamer", "applier", "bench")
	for _, c := range []struct {
		name string
		cpu  benchkit.CPUUse
	}{{"baseline", b.CPU}, {"move", m.CPU}} {
		fmt.Fprintf(w, "%-12s %9.2f %9.2f %9.2f %9.2f %9.2f\n", c.name, c.cpu.Source, c.cpu.Target, c.cpu.Streamer, c.cpu.Applier, c.cpu.Bench)
	}
	fmt.Fprintf(w, "\nmove: copy_s %.2f, caught_up_s %.2f, lag_peak_s %.2f (heartbeat; rowlift's own lag peaked at %.2f)\n",
		r.CopyS, r.CaughtUpS, r.LagPeakS, r.RowliftLagPeakS)
	fmt.Fprintln(w, "heartbeat lag, largest per second from t0, s:")
	fmt.Fprint(w, lagLine(r.Samples))
	fmt.Fprintln(w, "\ndone when:")
	for _, g := range r.Goals {
		verdict := "pass"
		if !g.Pass {
			verdict = "FAIL"
		}
		fmt.Fprintf(w, "  %-40s %7.2f  goal ≤ %-4g %s\n", g.Name, g.Value, g.Max, verdict)
	}
	fmt.Fprintln(w, "\nlatency: from when the fixed schedule had the transaction start until its COMMIT returned; per second of")
	fmt.Fprintln(w, "due time, then the median over the window's seconds. heartbeat lag: sample time minus the target's")
	fmt.Fprintln(w, "heartbeat row (the source writes its time there every 50 ms), every 100 ms")
	if f := r.Fence; f != nil {
		fmt.Fprintf(w, "fence: %v table locks, %v tries withdrawn or timed out; waited %.3f s, held %.3f s (longest %.1f ms)\n",
			f["fence_locks"], f["fence_lock_timeouts"], f["fence_lock_wait"], f["fence_lock_held"], 1000*asFloat(f["fence_lock_held_max"]))
	}
	for _, v := range r.Verified {
		fmt.Fprintln(w, "verified", v)
	}
	benchkit.PrintLogProblems(w, r.LogProblems)
	fmt.Fprintln(w, "results written to", f.Out)
}

// lagLine is the largest heartbeat lag of each second of the samples
// ("-" for a second without one), ten to a line.
func lagLine(samples []sampleJSON) string {
	var peaks []*float64
	for _, s := range samples {
		i := int(s.AtS)
		for len(peaks) <= i {
			peaks = append(peaks, nil)
		}
		if s.HeartbeatLagS != nil && (peaks[i] == nil || *s.HeartbeatLagS > *peaks[i]) {
			peaks[i] = s.HeartbeatLagS
		}
	}
	var sb strings.Builder
	for i, p := range peaks {
		if i%10 == 0 {
			fmt.Fprintf(&sb, "  %3d s:", i)
		}
		if p == nil {
			sb.WriteString("     -")
		} else {
			fmt.Fprintf(&sb, " %5.2f", *p)
		}
		if i%10 == 9 || i == len(peaks)-1 {
			sb.WriteString("\n")
		}
	}
	return sb.String()
}

// asFloat is a number of a decoded log entry, 0 when it is none.
func asFloat(v any) float64 {
	f, _ := v.(float64)
	return f
}
