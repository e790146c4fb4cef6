package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
)

// report is what a run prints and stores as JSON.
type report struct {
	benchkit.Header
	Flags    config         `json:"flags"`
	Table    string         `json:"table"` // the table's name (-table names its shape)
	RowBytes int64          `json:"row_bytes"`
	Methods  []methodResult `json:"methods"`
	Best     ratios         `json:"ratios_best"`
	Median   ratios         `json:"ratios_median"`
}

// methodResult is one method's runs; Best, Median and Worst are the runs of
// least, median (the lower one for an even number of runs) and most wall time.
type methodResult struct {
	Key    string   `json:"key"`
	Name   string   `json:"name"`
	Best   sample   `json:"best"`
	Median sample   `json:"median"`
	Worst  sample   `json:"worst"`
	Runs   []sample `json:"runs"`
}

// ratios compare wall times; a ratio is absent when a method it needs did not run.
type ratios struct {
	DOverMaxAB *float64 `json:"d_over_max_ab,omitempty"`
	DOverC     *float64 `json:"d_over_c,omitempty"`
	DOverE     *float64 `json:"d_over_e,omitempty"`
}

func (b *bench) report(results map[string][]sample) *report {
	rep := &report{
		Header:   benchkit.NewHeader(b.Version),
		Flags:    b.cfg,
		Table:    b.shape.Name,
		RowBytes: b.rowBytes,
	}
	for _, mt := range b.methods() {
		runs := results[mt.key]
		if len(runs) == 0 {
			continue
		}
		sorted := slices.Clone(runs)
		slices.SortFunc(sorted, func(x, y sample) int { return cmp.Compare(x.WallS, y.WallS) })
		rep.Methods = append(rep.Methods, methodResult{
			Key: mt.key, Name: mt.name, Best: sorted[0], Median: sorted[(len(sorted)-1)/2], Worst: sorted[len(sorted)-1], Runs: runs,
		})
	}
	rep.Best = rep.ratios(func(r methodResult) sample { return r.Best })
	rep.Median = rep.ratios(func(r methodResult) sample { return r.Median })
	return rep
}

func (r *report) ratios(pick func(methodResult) sample) ratios {
	wall := map[string]float64{}
	for _, m := range r.Methods {
		wall[m.Key] = pick(m).WallS
	}
	var out ratios
	d, ok := wall["d"]
	if !ok {
		return out
	}
	a, okA := wall["a"]
	bw, okB := wall["b"]
	if okA && okB {
		v := d / max(a, bw)
		out.DOverMaxAB = &v
	}
	if c, ok := wall["c"]; ok {
		v := d / c
		out.DOverC = &v
	}
	if e, ok := wall["e"]; ok {
		v := d / e
		out.DOverE = &v
	}
	return out
}

func (r *report) print(w io.Writer) {
	f := r.Flags
	r.Header.Print(w)
	fmt.Fprintf(w, "table=%s rows=%d  row bytes≈%.1f MB  chunk_rows=%s packet=%s workers=%s flush=%d  %s\n",
		r.Table, f.Rows, float64(r.RowBytes)/1e6, orDefault(f.ChunkRows), orDefault(f.PacketBytes), orDefault(int64(f.Workers)),
		f.Flush, f.Settings())
	title := "best run"
	if f.Runs > 1 {
		title = fmt.Sprintf("best of %d runs", f.Runs)
	}
	r.printTable(w, title, func(m methodResult) sample { return m.Best }, r.Best)
	if f.Runs > 1 {
		r.printTable(w, fmt.Sprintf("median of %d runs", f.Runs), func(m methodResult) sample { return m.Median }, r.Median)
	}
	r.printSpread(w)
	r.printCPU(w)
	tools := dumpTools[f.Flavor]
	fmt.Fprintf(w, "client CPU: (a),(b) this Go process; (c) %s + %s; (d) rowlift streamer + applier; (e) mydumper + myloader\n", tools.dump, tools.client)
	fmt.Fprintln(w, "results written to", f.Out)
}

func (r *report) printTable(w io.Writer, title string, pick func(methodResult) sample, rat ratios) {
	fmt.Fprintf(w, "\n%-28s %8s %10s %8s %13s %13s %13s\n", title, "wall s", "rows/s", "MB/s", "client CPU s", "source CPU s", "target CPU s")
	for _, m := range r.Methods {
		s := pick(m)
		fmt.Fprintf(w, "%-28s %8.2f %10.0f %8.1f %13.2f %13.2f %13.2f\n",
			m.Name, s.WallS, s.RowsPerS, s.MBPerS, s.ClientCPUS, s.SourceCPUS, s.TargetCPUS)
	}
	fmt.Fprintf(w, "d/max(a,b) = %s    d/c = %s    d/e = %s\n", fmtRatio(rat.DOverMaxAB), fmtRatio(rat.DOverC), fmtRatio(rat.DOverE))
}

// printSpread prints each method's best, median and worst wall time over the runs.
func (r *report) printSpread(w io.Writer) {
	fmt.Fprintf(w, "\n%-28s %8s %8s %8s\n", fmt.Sprintf("wall s over %d runs", r.Flags.Runs), "best", "median", "worst")
	for _, m := range r.Methods {
		fmt.Fprintf(w, "%-28s %8.2f %8.2f %8.2f\n", m.Name, m.Best.WallS, m.Median.WallS, m.Worst.WallS)
	}
}

// printCPU prints each method's CPU seconds per million rows in its median
// run, process by process, so what rowlift costs beyond the target's own
// ingest (b) shows where it goes.
func (r *report) printCPU(w io.Writer) {
	perM := 1e6 / float64(r.Flags.Rows)
	fmt.Fprintf(w, "\n%-28s %8s %9s %8s %8s %8s %8s\n", "CPU s per million rows", "client", "streamer", "applier", "source", "target", "total")
	dash := func(v float64) string {
		if v == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", v*perM)
	}
	for _, m := range r.Methods {
		s := m.Median
		fmt.Fprintf(w, "%-28s %8.2f %9s %8s %8.2f %8.2f %8.2f\n", m.Name, s.ClientCPUS*perM, dash(s.StreamerCPUS), dash(s.ApplierCPUS),
			s.SourceCPUS*perM, s.TargetCPUS*perM, (s.ClientCPUS+s.SourceCPUS+s.TargetCPUS)*perM)
	}
}

func fmtRatio(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", *v)
}

func orDefault(v int64) string {
	if v == 0 {
		return "default"
	}
	return fmt.Sprint(v)
}
