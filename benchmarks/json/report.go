package main

import (
	"fmt"
	"io"
	"slices"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
)

// report is what a run prints and stores as JSON.
type report struct {
	benchkit.Header
	Flags       config  `json:"flags"`
	Rows        int64   `json:"rows"`
	Items       int     `json:"line_items_per_doc"`
	AvgDocBytes float64 `json:"avg_doc_bytes"`
	TypedDocs   int64   `json:"typed_docs"`
	// ZeroDocs are the typed documents with a DECIMAL amount whose text ends
	// in 0 (0.10), which the text path's target parses as a DOUBLE (0.1).
	ZeroDocs int64 `json:"typed_docs_with_trailing_zero_decimal"`
	// TextPathTextDiffs is how many documents verify by text found
	// different after the text path (ZeroDocs, or the run fails).
	TextPathTextDiffs int64 `json:"text_path_text_diffs"`
	// TextTypeDiffs is how many documents verify by type found different
	// after the text path's first copy (-1: not counted).
	TextTypeDiffs int64          `json:"text_path_type_diffs"`
	Samples       []sample       `json:"samples"`
	Selects       []selectSample `json:"source_selects"`
	Methods       []methodStats  `json:"methods"`
	// TypedOverText is the typed path's median wall time over the text path's.
	TypedOverText float64 `json:"typed_over_text"`
	// LogProblems are the warning and error lines of the rowlift logs, by process.
	LogProblems map[string][]string `json:"log_problems,omitempty"`
}

// methodStats sums up one method's runs.
type methodStats struct {
	Name    string  `json:"name"`
	BestS   float64 `json:"best_s"`
	MedianS float64 `json:"median_s"`
	WorstS  float64 `json:"worst_s"`
	// RowsPerS is at the median; VsBase is the median over the baseline's.
	RowsPerS float64 `json:"rows_per_s"`
	VsBase   float64 `json:"vs_base"`
	// Median CPU seconds of each process.
	SourceCPUS   float64 `json:"source_server_cpu_s"`
	TargetCPUS   float64 `json:"target_server_cpu_s"`
	StreamerCPUS float64 `json:"streamer_cpu_s"`
	ApplierCPUS  float64 `json:"applier_cpu_s"`
}

// median is the nearest-rank median of the values f picks.
func median[T any](xs []T, f func(T) float64) float64 {
	vs := make([]float64, 0, len(xs))
	for _, x := range xs {
		vs = append(vs, f(x))
	}
	slices.Sort(vs)
	return benchkit.Rank(vs, 0.5)
}

func (r *report) summarize() {
	for _, name := range []string{methodLoad, methodText, methodTyped} {
		var ss []sample
		var walls []float64
		for _, s := range r.Samples {
			if s.Method == name {
				ss = append(ss, s)
				walls = append(walls, s.WallS)
			}
		}
		slices.Sort(walls)
		m := methodStats{Name: name, BestS: walls[0], MedianS: benchkit.Rank(walls, 0.5), WorstS: walls[len(walls)-1],
			SourceCPUS:   median(ss, func(s sample) float64 { return s.SourceCPUS }),
			TargetCPUS:   median(ss, func(s sample) float64 { return s.TargetCPUS }),
			StreamerCPUS: median(ss, func(s sample) float64 { return s.StreamerCPUS }),
			ApplierCPUS:  median(ss, func(s sample) float64 { return s.ApplierCPUS })}
		m.RowsPerS = float64(r.Rows) / m.MedianS
		r.Methods = append(r.Methods, m)
	}
	for i := range r.Methods {
		r.Methods[i].VsBase = r.Methods[i].MedianS / r.Methods[0].MedianS
	}
	r.TypedOverText = r.Methods[2].MedianS / r.Methods[1].MedianS
}

func (r *report) print(w io.Writer) {
	r.Header.Print(w)
	fmt.Fprintf(w, "rows=%d  %.0f B of JSON text a document on average (%d line items)  typed=%d (%d%%)  runs=%d  flush=%d  %s\n",
		r.Rows, r.AvgDocBytes, r.Items, r.TypedDocs, r.Flags.TypedPct, r.Flags.Runs, r.Flags.Flush, r.Flags.Settings())
	fmt.Fprintf(w, "\n%-28s %8s %8s %8s %10s %7s   %7s %7s %8s %8s\n", "method", "best s", "median s", "worst s", "rows/s", "/ base",
		"src CPU", "tgt CPU", "streamer", "applier")
	for _, m := range r.Methods {
		roles := fmt.Sprintf("%8.1f %8.1f", m.StreamerCPUS, m.ApplierCPUS)
		if m.Name == methodLoad {
			roles = fmt.Sprintf("%8s %8s", "-", "-")
		}
		fmt.Fprintf(w, "%-28s %8.2f %8.2f %8.2f %10.0f %7.2f   %7.1f %7.1f %s\n", m.Name, m.BestS, m.MedianS, m.WorstS,
			m.RowsPerS, m.VsBase, m.SourceCPUS, m.TargetCPUS, roles)
	}
	fmt.Fprintf(w, "typed ÷ text (median wall): %.2f\n", r.TypedOverText)
	if r.TextTypeDiffs >= 0 {
		fmt.Fprintf(w, "text path: %d of %d documents differ by type from the source (verify by type), %d by text (verify by text:\n"+
			"  a DECIMAL amount printed 0.10 is parsed back as the DOUBLE 0.1); the typed path: none\n", r.TextTypeDiffs, r.Rows, r.TextPathTextDiffs)
	}
	plain := median(r.Selects, func(s selectSample) float64 { return s.PlainS })
	typed := median(r.Selects, func(s selectSample) float64 { return s.TypeMapS })
	fmt.Fprintf(w, "\n%-28s %8s %8s %8s %10s %9s\n", "source SELECT, drained", "best s", "median s", "worst s", "rows/s", "src CPU")
	for _, q := range []struct {
		name string
		f    func(selectSample) float64
		cpu  func(selectSample) float64
	}{
		{"id, j", func(s selectSample) float64 { return s.PlainS }, func(s selectSample) float64 { return s.PlainCPUS }},
		{"id, j, type map", func(s selectSample) float64 { return s.TypeMapS }, func(s selectSample) float64 { return s.TypeMapCPUS }},
	} {
		vs := make([]float64, 0, len(r.Selects))
		for _, s := range r.Selects {
			vs = append(vs, q.f(s))
		}
		slices.Sort(vs)
		med := benchkit.Rank(vs, 0.5)
		fmt.Fprintf(w, "%-28s %8.2f %8.2f %8.2f %10.0f %9.1f\n", q.name, vs[0], med, vs[len(vs)-1], float64(r.Rows)/med, median(r.Selects, q.cpu))
	}
	fmt.Fprintf(w, "type map ÷ plain (median): %.2f; type maps returned: %.1f MiB\n", typed/plain, float64(r.Selects[0].TypeMapBytes)/(1<<20))
	fmt.Fprintln(w, "wall: LOAD DATA INFILE of a dump of the same rows' text; rowlift from StartWorkflow until the target's copy is done")
	fmt.Fprintln(w, "CPU: seconds of the source and target servers and of each role during the method (median of the runs)")
	benchkit.PrintLogProblems(w, r.LogProblems)
	fmt.Fprintln(w, "results written to", r.Flags.Out)
}
