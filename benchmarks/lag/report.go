package main

import (
	"fmt"
	"io"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
)

// report is what a run prints and stores as JSON.
type report struct {
	benchkit.Header
	Flags flags `json:"flags"`
	// Rate is the load's transactions/s; RateFrom says where it came from: "R/2"
	// or "-rate".
	Rate     float64    `json:"rate_per_s"`
	RateFrom string     `json:"rate_from"`
	Capacity capacity   `json:"capacity_single_connection"`
	Steady   window     `json:"steady_load"`
	Copy     copyResult `json:"copy"`
	// LogProblems are the warning and error lines of the rowlift logs, by role.
	LogProblems map[string][]string `json:"log_problems"`
}

// flags is config with the duration readable.
type flags struct {
	config
	Duration string `json:"duration"`
}

func (b *bench) newReport() *report {
	return &report{
		Header: benchkit.NewHeader(b.Version),
		Flags:  flags{config: b.cfg, Duration: b.cfg.Duration.String()},
	}
}

func (r *report) print(w io.Writer) {
	f := r.Flags
	c := r.Copy
	r.Header.Print(w)
	fmt.Fprintf(w, "load: single-row INSERT autocommit transactions at %.0f/s (%s) over %d source connections; flush=%d %s\n",
		r.Rate, r.RateFrom, f.Writers, f.Flush, f.Settings())
	row := func(what, rowlift, baseline string) { fmt.Fprintf(w, "%-40s %-30s %s\n", what, rowlift, baseline) }
	fmt.Fprintln(w)
	row("", "rowlift", "baseline")
	row("single-row transactions/s", fmt.Sprintf("%.0f applied (load)", r.Steady.AppliedRate),
		fmt.Sprintf("%.0f = R, one connection on the target", r.Capacity.PerS))
	row(fmt.Sprintf("steady load, %s:", f.Duration), "", "")
	printLoad(row, r.Steady)
	row(fmt.Sprintf("copy of %d rows, s", c.Rows), fmt.Sprintf("%.2f under the load", c.LoadedS), fmt.Sprintf("%.2f idle", c.IdleS))
	row("  slowdown loaded/idle", fmt.Sprintf("%.2f", c.Slowdown), "")
	row("  rows/s", fmt.Sprintf("%.0f", c.LoadedRowsPerS), fmt.Sprintf("%.0f", c.IdleRowsPerS))
	row("load during the loaded copy:", "", "")
	printLoad(row, c.Load)
	fmt.Fprintf(w, "\nCPU s        %9s %9s %9s %9s %9s\n", "streamer", "applier", "source", "target", "bench")
	for _, p := range []struct {
		name string
		cpu  benchkit.CPUUse
	}{{"steady load", r.Steady.CPU}, {"idle copy", c.IdleCPU}, {"loaded copy", c.Load.CPU}} {
		fmt.Fprintf(w, "%-12s %9.2f %9.2f %9.2f %9.2f %9.2f\n", p.name, p.cpu.Streamer, p.cpu.Applier, p.cpu.Source, p.cpu.Target, p.cpu.Bench)
	}
	fmt.Fprintln(w, "lag: probe time minus the source commit time (INSERT returned) of the oldest row the target does not show yet, every 10 ms")
	benchkit.PrintLogProblems(w, r.LogProblems)
	fmt.Fprintln(w, "results written to", f.Out)
}

func printLoad(row func(what, rowlift, baseline string), l window) {
	row("  lag p50 / p99 / max, ms", fmt.Sprintf("%.1f / %.1f / %.1f", l.LagP50Ms, l.LagP99Ms, l.LagMaxMs), fmt.Sprintf("(%d samples)", l.LagSamples))
	row("  written / applied, transactions/s", fmt.Sprintf("%.0f / %.0f", l.WriteRate, l.AppliedRate), fmt.Sprintf("%.0f target", l.TargetRate))
}
