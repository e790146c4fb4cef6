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
	Flags   config         `json:"flags"`
	Ranges  []string       `json:"split_ranges"`
	Methods []methodResult `json:"methods"`
	// Best and Median are the split's figures over the move's.
	Best   ratios `json:"ratios_best"`
	Median ratios `json:"ratios_median"`
	// LogProblems are the warning and error lines of the rowlift logs, by process.
	LogProblems map[string][]string `json:"log_problems,omitempty"`
}

// methodResult is one method's runs; Median is the run of median wall time
// (the lower one for an even number of runs).
type methodResult struct {
	Key    string   `json:"key"`
	Name   string   `json:"name"`
	Best   sample   `json:"best"`
	Median sample   `json:"median"`
	Runs   []sample `json:"runs"`
}

// ratios are the split's over the move's: only ratios compare across runs on a
// shared machine.
type ratios struct {
	Wall       float64 `json:"wall"`
	ReadPerRow float64 `json:"source_rows_read_per_row"`
	SourceCPU  float64 `json:"source_server_cpu"`
}

func (b *bench) report(results map[string][]sample) (*report, error) {
	rep := &report{Header: benchkit.NewHeader(b.Version), Flags: b.cfg}
	for _, r := range b.ranges {
		rep.Ranges = append(rep.Ranges, r.String())
	}
	for _, m := range methods {
		runs := results[m.key]
		sorted := slices.Clone(runs)
		slices.SortFunc(sorted, func(x, y sample) int { return cmp.Compare(x.WallS, y.WallS) })
		rep.Methods = append(rep.Methods, methodResult{
			Key: m.key, Name: m.name, Best: sorted[0], Median: sorted[(len(sorted)-1)/2], Runs: runs,
		})
	}
	rep.Best = rep.ratios(func(r methodResult) sample { return r.Best })
	rep.Median = rep.ratios(func(r methodResult) sample { return r.Median })
	var err error
	rep.LogProblems, err = b.procs.LogProblems()
	return rep, err
}

func (r *report) ratios(pick func(methodResult) sample) ratios {
	move, split := pick(r.Methods[0]), pick(r.Methods[1])
	return ratios{
		Wall:       split.WallS / move.WallS,
		ReadPerRow: split.ReadPerRow / move.ReadPerRow,
		SourceCPU:  split.SourceCPUS / move.SourceCPUS,
	}
}

func (r *report) print(w io.Writer) {
	f := r.Flags
	r.Header.Print(w)
	fmt.Fprintf(w, "rows=%d  split ranges %v by hash(id)  flush=%d  %s\n",
		f.Rows, r.Ranges, f.Flush, f.Settings())
	title := "best run"
	if f.Runs > 1 {
		title = fmt.Sprintf("best of %d runs", f.Runs)
	}
	r.printTable(w, title, func(m methodResult) sample { return m.Best }, r.Best)
	if f.Runs > 1 {
		r.printTable(w, fmt.Sprintf("median of %d runs", f.Runs), func(m methodResult) sample { return m.Median }, r.Median)
	}
	fmt.Fprintf(w, "wall: StartWorkflow until every target's copy is done; src read/row: delta of the source's %s / rows moved\n", r.Methods[0].Best.Counter)
	fmt.Fprintf(w, "rows per target (last run): move %v, split %v\n", r.Methods[0].last().TargetRows, r.Methods[1].last().TargetRows)
	benchkit.PrintLogProblems(w, r.LogProblems)
	fmt.Fprintln(w, "results written to", f.Out)
}

// last is the method's last run.
func (m methodResult) last() sample { return m.Runs[len(m.Runs)-1] }

func (r *report) printTable(w io.Writer, title string, pick func(methodResult) sample, rat ratios) {
	fmt.Fprintf(w, "\n%-18s %8s %10s %12s %13s %14s\n", title, "wall s", "rows/s", "src read/row", "source CPU s", "streamer CPU s")
	for _, m := range r.Methods {
		s := pick(m)
		fmt.Fprintf(w, "%-18s %8.2f %10.0f %12.2f %13.2f %14.2f\n", m.Name, s.WallS, s.RowsPerS, s.ReadPerRow, s.SourceCPUS, s.StreamerCPUS)
	}
	fmt.Fprintf(w, "1→4 / 1→1: wall %.2f   source rows read %.2f   source CPU %.2f\n", rat.Wall, rat.ReadPerRow, rat.SourceCPU)
}
