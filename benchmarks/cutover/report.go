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
	Flags flags      `json:"flags"`
	Load  loadResult `json:"load"`
	// Checksum is the baseline and Verify the workflow's verify, both under
	// the load, before the cutovers.
	Checksum checksumResult `json:"checksum_table"`
	Verify   verifyResult   `json:"verify"`
	// Copy is the workflow's copy of the same table, without the load.
	Copy copyResult `json:"copy"`
	// VerifyChunks is how long each verify chunk held the target, and
	// VerifyDigests how long the target took to sum each chunk up beside the
	// apply (digest chunks only), from the forward applier's spans.
	VerifyChunks  chunkHolds `json:"verify_chunk_ms"`
	VerifyDigests chunkHolds `json:"verify_digest_ms"`
	// Ratios put the verify beside the copy and CHECKSUM TABLE.
	Ratios   ratios          `json:"ratios"`
	Cutovers []cutoverResult `json:"cutovers"`
	// WritePauseMs, WritersMs, RerouteMs, AnswerMs and CallMs are the
	// distributions of the cutovers' fields of the same names.
	WritePauseMs dist `json:"write_pause_ms"`
	WritersMs    dist `json:"writers_ms"`
	RerouteMs    dist `json:"reroute_ms"`
	AnswerMs     dist `json:"answer_after_reroute_ms"`
	CallMs       dist `json:"call_ms"`
	// Identical says whether both sides held the same rows at the end;
	// Differences is the comparison's summary when they did not.
	Identical   bool   `json:"identical"`
	Differences string `json:"differences,omitempty"`
	// LogProblems are the warning and error lines of the rowlift logs, by process.
	LogProblems map[string][]string `json:"log_problems"`
}

// ratios are the verify's rows/s and time beside the copy's and CHECKSUM
// TABLE's rows/s.
type ratios struct {
	VerifyPerCopyRate     float64 `json:"verify_per_copy_rows_per_s"`
	VerifyPerCopyTime     float64 `json:"verify_per_copy_time"`
	VerifyPerChecksumSeq  float64 `json:"verify_per_checksum_sequential_rows_per_s"`
	VerifyPerChecksumBoth float64 `json:"verify_per_checksum_parallel_rows_per_s"`
}

func (r *report) ratios() {
	v, c, cp := r.Verify, r.Checksum, r.Copy
	r.Ratios = ratios{
		VerifyPerCopyRate:     v.RowsPerS / cp.RowsPerS,
		VerifyPerCopyTime:     v.WallS / cp.WallS,
		VerifyPerChecksumSeq:  v.RowsPerS / c.SequentialRowsPerS,
		VerifyPerChecksumBoth: v.RowsPerS / c.ParallelRowsPerS,
	}
}

// flags is config with the interval readable.
type flags struct {
	config
	Interval string `json:"interval"`
}

// dist is a distribution's nearest-rank percentiles and maximum.
type dist struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

func distOf(values []float64) dist {
	if len(values) == 0 {
		return dist{}
	}
	s := slices.Sorted(slices.Values(values))
	return dist{P50: benchkit.Rank(s, 0.50), P99: benchkit.Rank(s, 0.99), Max: s[len(s)-1]}
}

func (b *bench) newReport() *report {
	return &report{
		Header: benchkit.NewHeader(b.Version),
		Copy:   b.copyResult(),
		Flags:  flags{config: b.cfg, Interval: b.cfg.Interval.String()},
	}
}

// summarize computes the distributions over the cutovers.
func (r *report) summarize() {
	var pause, writers, reroute, answer, call []float64
	for _, c := range r.Cutovers {
		pause = append(pause, float64(c.WritePauseMs))
		writers = append(writers, c.WritersMs)
		reroute = append(reroute, c.RerouteMs)
		answer = append(answer, c.AnswerMs)
		call = append(call, c.CallMs)
	}
	r.WritePauseMs, r.WritersMs, r.RerouteMs, r.AnswerMs, r.CallMs = distOf(pause), distOf(writers), distOf(reroute), distOf(answer), distOf(call)
}

func (r *report) print(w io.Writer) {
	f, l := r.Flags, r.Load
	r.Header.Print(w)
	fmt.Fprintf(w, "moved table: %s.%s, %d rows; every server: flush=%d %s\n",
		db, benchkit.StressTable, f.Rows, f.Flush, f.Settings())
	fmt.Fprintf(w, "load: single-row UPDATE/INSERT/DELETE autocommit transactions at %.0f/s over %d connections, routed to the side that takes writes;\n"+
		"      %d writes at %.0f/s, %d of them retried (%d retries) because they met the table frozen or locked\n",
		f.Rate, f.Writers, l.Writes, l.WriteRate, l.Blocked, l.Retries)

	row := func(what string, cells ...string) {
		fmt.Fprintf(w, "%-52s", what)
		for _, c := range cells {
			fmt.Fprintf(w, " %10s", c)
		}
		fmt.Fprintln(w)
	}
	ms := func(d dist) []string {
		return []string{fmt.Sprintf("%.1f", d.P50), fmt.Sprintf("%.1f", d.P99), fmt.Sprintf("%.1f", d.Max)}
	}
	fmt.Fprintln(w)
	row(fmt.Sprintf("%d cutovers (%d switches, %d reverses), %s apart, ms", len(r.Cutovers), f.Switches, f.Switches, f.Interval), "p50", "p99", "max")
	row("write pause, as rowlift reports it", ms(r.WritePauseMs)...)
	row("write pause, as the writers saw it", ms(r.WritersMs)...)
	row("writers re-routed by the hook, from the call's start", ms(r.RerouteMs)...)
	row("call answered, after the re-routing", ms(r.AnswerMs)...)
	row("switch/reverse call (Control API)", ms(r.CallMs)...)

	fmt.Fprintln(w)
	c := r.Checksum
	row(fmt.Sprintf("comparison of the %d rows, under the load", c.Rows), "seconds", "rows/s", "verify ÷")
	v, cp, q := r.Verify, r.Copy, r.Ratios
	ratio := func(x float64) string { return fmt.Sprintf("%.2f", x) }
	row(fmt.Sprintf("verify (VerifyWorkflow), differences: %d", v.Missing+v.Extra+v.Different),
		fmt.Sprintf("%.2f", v.WallS), fmt.Sprintf("%.0f", v.RowsPerS), "")
	row("CHECKSUM TABLE, one server after the other", fmt.Sprintf("%.2f", c.SequentialS), fmt.Sprintf("%.0f", c.SequentialRowsPerS), ratio(q.VerifyPerChecksumSeq))
	row("CHECKSUM TABLE, both servers at once", fmt.Sprintf("%.2f", c.ParallelS), fmt.Sprintf("%.0f", c.ParallelRowsPerS), ratio(q.VerifyPerChecksumBoth))
	row("copy (workflow start until running), without the load", fmt.Sprintf("%.2f", cp.WallS), fmt.Sprintf("%.0f", cp.RowsPerS), ratio(q.VerifyPerCopyRate))
	row("verify time ÷ copy time", "", "", ratio(q.VerifyPerCopyTime))

	fmt.Fprintln(w)
	h := r.VerifyChunks
	row(fmt.Sprintf("verify chunks on the target (%d chunks), ms", h.Chunks), "p50", "p99", "max")
	row("hold per chunk (applier's verify_chunk span)", ms(h.dist)...)
	if d := r.VerifyDigests; d.Chunks > 0 {
		row(fmt.Sprintf("target's digest per chunk, beside the apply (%.2f s in all)", d.TotalMs/1e3), ms(d.dist)...)
	}

	fmt.Fprintf(w, "\n%-7s %3s %14s %14s %10s %10s %10s %14s\n", "cutover", "#", "pause, rowlift", "pause, writers", "re-routed", "call", "answer", "blocked writes")
	count := map[string]int{}
	for _, c := range r.Cutovers {
		count[c.Direction]++
		fmt.Fprintf(w, "%-7s %3d %11d ms %11.1f ms %7.1f ms %7.1f ms %7.1f ms %14d\n", c.Direction, count[c.Direction], c.WritePauseMs, c.WritersMs,
			c.RerouteMs, c.CallMs, c.AnswerMs, c.BlockedWrites)
	}
	fmt.Fprintln(w, "\nwrite pause as rowlift reports it: SwitchResponse.write_pause_ms, from the freeze until the other side could take writes")
	fmt.Fprintln(w, "as the writers saw it: the longest from a write's first refused try (table frozen or locked) to its commit")
	fmt.Fprintln(w, "re-routed: when the routing hook (--hook-cmd) re-routed the writers, from the call's start; answer: how much later the call answered")
	fmt.Fprintln(w, "verify and CHECKSUM TABLE: from the call until the result, rows of the table per second; verify ÷: verify rows/s over that row's rows/s")
	fmt.Fprintln(w, "hold per chunk: the applier's span of a verify chunk while the apply waits for it (a digest chunk's target snapshot, a row chunk's comparison)")
	fmt.Fprintf(w, "identical: %s\n", map[bool]string{true: "yes", false: "NO"}[r.Identical])
	if r.Differences != "" {
		fmt.Fprintln(w, r.Differences)
	}
	benchkit.PrintLogProblems(w, r.LogProblems)
	fmt.Fprintln(w, "results written to", f.Out)
}
