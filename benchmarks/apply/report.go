package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
	"github.com/rowlift/rowlift/internal/testhook"
	"github.com/rowlift/rowlift/internal/verify"
)

// report is what a run prints and stores as JSON.
type report struct {
	benchkit.Header
	Flags config `json:"flags"`
	// Backlog is the -k transactions as the source took them from one client.
	Backlog loadResult `json:"backlog"`
	Results []result   `json:"results"`
	// BestRowlift and BestNative are the fastest of each kind; Ratio is
	// BestNative's time over BestRowlift's (above 1: rowlift is faster).
	BestRowlift string  `json:"best_rowlift"`
	BestNative  string  `json:"best_native,omitempty"`
	Ratio       float64 `json:"best_rowlift_over_best_native,omitempty"`
	// SerialOverFloor and NativeSerialOverFloor are the client floor's time
	// over serial rowlift's and over the serial replica's (1: as fast as the
	// floor): how near rowlift comes to the cheapest client, and how far any
	// client is from the server's own replication.
	SerialOverFloor       float64 `json:"rowlift_serial_over_floor,omitempty"`
	NativeSerialOverFloor float64 `json:"native_serial_over_floor,omitempty"`
	// SlowedParallelOverSerial is the parallel replayer's rate over the
	// serial worker's on the slowed target: the fraction of the serial rate it
	// keeps there (above 1: faster).
	SlowedParallelOverSerial float64 `json:"slowed_parallel_over_serial,omitempty"`
	// LogProblems are the warning and error lines of the rowlift logs, by process.
	LogProblems map[string][]string `json:"log_problems"`
}

// result is one configuration's catch-up.
type result struct {
	Name string `json:"name"`
	Kind string `json:"kind"` // rowlift, slowed, native or floor
	// Transactions are those replayed: -k, or -slow-k on a slowed target.
	Transactions int64   `json:"transactions"`
	WallS        float64 `json:"wall_s"`
	PerS         float64 `json:"trx_per_s"`
	// SpeedUp is serial rowlift's rate over this one's, on a slowed target the
	// slowed serial rowlift's.
	SpeedUp float64 `json:"speed_up_over_rowlift_serial"`
	// Rollbacks are the replay groups rowlift rolled back to run again.
	Rollbacks  int64   `json:"rollbacks"`
	Identical  bool    `json:"identical"`
	SourceCPUS float64 `json:"source_server_cpu_s"`
	TargetCPUS float64 `json:"target_server_cpu_s"`
	// ClientCPUS is rowlift's applier and streamer, or the benchmark's own for
	// the client floor; 0 for a replica, which replicates inside the server.
	ClientCPUS float64 `json:"rowlift_cpu_s"`
	// Differences are verify's summaries of the tables that differ.
	Differences []string `json:"differences,omitempty"`
}

func (b *bench) newReport() *report {
	return &report{
		Header: benchkit.NewHeader(b.version),
		Flags:  b.cfg,
	}
}

// verify compares every table of a target with the source, row by row.
func (b *bench) verify(ctx context.Context, n *node, res *result) error {
	progress("%s: comparing with the source", n.name)
	res.Identical = true
	for _, table := range b.tableNames() {
		v, err := verify.Table(ctx, b.srcDB, n.db, db, db, table, verify.Options{})
		if err != nil {
			return fmt.Errorf("verify %s of %s: %w", table, n.name, err)
		}
		if !v.Identical() {
			res.Identical = false
			res.Differences = append(res.Differences, v.String())
		}
	}
	return nil
}

// logProblems returns the warning and error lines of the streamer and appliers.
func (b *bench) logProblems() (map[string][]string, error) {
	out := map[string][]string{}
	lines, err := b.streamer.LogProblems()
	if err != nil {
		return nil, err
	}
	if len(lines) > 0 {
		out["streamer"] = lines
	}
	for _, t := range b.targets {
		if rt, ok := t.(*rowliftTarget); ok {
			if err := rt.logProblems(out); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// summarize computes the speed-ups over serial rowlift (the first result, or
// the first slowed one on a slowed target) and picks the best of each kind.
func (r *report) summarize() {
	serial := r.Results[0].WallS
	var bestRowlift, bestNative, floor, nativeSerial, slowedSerial *result
	for i := range r.Results {
		res := &r.Results[i]
		res.SpeedUp = serial / res.WallS
		best := &bestRowlift
		switch res.Kind {
		case "slowed":
			if slowedSerial == nil {
				slowedSerial = res
			}
			res.SpeedUp = res.PerS / slowedSerial.PerS
			r.SlowedParallelOverSerial = res.SpeedUp
			continue
		case "floor":
			floor = res
			continue
		case "native":
			best = &bestNative
			if nativeSerial == nil {
				nativeSerial = res
			}
		}
		if *best == nil || res.WallS < (*best).WallS {
			*best = res
		}
	}
	if floor != nil {
		r.SerialOverFloor = floor.WallS / serial
		if nativeSerial != nil && strings.Contains(nativeSerial.Name, serialTag) {
			r.NativeSerialOverFloor = floor.WallS / nativeSerial.WallS
		}
	}
	r.BestRowlift = bestRowlift.Name
	if bestNative != nil {
		r.BestNative = bestNative.Name
		r.Ratio = bestNative.WallS / bestRowlift.WallS
	}
}

// mismatch fails when a target is not identical to the source, after the
// table has shown which.
func (r *report) mismatch() error {
	var bad []string
	for _, res := range r.Results {
		if !res.Identical {
			bad = append(bad, res.Name)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("TARGETS DIFFER FROM THE SOURCE: %s", strings.Join(bad, "; "))
	}
	return nil
}

// printTable prints the results that pick keeps, one a line, under title.
func (r *report) printTable(w io.Writer, width int, title string, pick func(result) bool) {
	fmt.Fprintf(w, "%-*s %8s %8s %9s %10s %9s %9s %9s %9s\n", width, title, "seconds", "trx/s", "speed-up", "identical",
		"target", "source", "client", "rolled")
	fmt.Fprintf(w, "%-*s %8s %8s %9s %10s %9s %9s %9s %9s\n", width, "", "", "", "", "", "CPU s", "CPU s", "CPU s", "back")
	for _, res := range r.Results {
		if !pick(res) {
			continue
		}
		same := "yes"
		if !res.Identical {
			same = "NO"
		}
		fmt.Fprintf(w, "%-*s %8.2f %8.0f %8.2fx %10s %9.2f %9.2f %9.2f %9d\n", width, res.Name, res.WallS, res.PerS, res.SpeedUp, same,
			res.TargetCPUS, res.SourceCPUS, res.ClientCPUS, res.Rollbacks)
	}
}

func (r *report) print(w io.Writer) {
	f, bl := r.Flags, r.Backlog
	r.Header.Print(w)
	fmt.Fprintf(w, "backlog: %d oltp_write_only-like transactions (4 row changes each) on %d tables of %d rows, written by one source connection in %.2f s (%.0f trx/s)\n",
		bl.Transactions, f.Tables, f.Rows, bl.WallS, bl.PerS)
	fmt.Fprintf(w, "every server: flush=%d sync_binlog=1 log_bin=ON %s\n\n", f.Flush, f.Settings())
	width := len("catch-up of the backlog")
	for _, res := range r.Results {
		width = max(width, len(res.Name))
	}
	r.printTable(w, width, "catch-up of the backlog", func(res result) bool { return res.Kind != "slowed" })
	if r.SlowedParallelOverSerial > 0 {
		fmt.Fprintf(w, "\nslowed target: the first %d transactions of the backlog, every replay group held %s after its statements ran,"+
			" with its locks (test hook %s); identical: after the rest of the backlog, replayed untimed and not slowed\n", f.SlowK, f.Slow, testhook.SlowTarget)
		r.printTable(w, width, "catch-up on a slowed target", func(res result) bool { return res.Kind == "slowed" })
		fmt.Fprintf(w, "on the slowed target the parallel replayer keeps %.2fx the serial worker's rate\n", r.SlowedParallelOverSerial)
	}
	if r.BestNative != "" {
		fmt.Fprintf(w, "\nbest rowlift (%s) vs best native (%s): %.2fx (native seconds / rowlift seconds; above 1 rowlift is faster)\n",
			r.BestRowlift, r.BestNative, r.Ratio)
	}
	if r.SerialOverFloor > 0 {
		fmt.Fprintf(w, "serial rowlift runs at %.2fx the client floor's speed", r.SerialOverFloor)
		if r.NativeSerialOverFloor > 0 {
			fmt.Fprintf(w, ", the serial replica at %.2fx", r.NativeSerialOverFloor)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "rowlift: from starting the applier until its committed position covers the source's last GTID (read every 10 ms);"+
		" it reads the backlog from the source through the streamer as it goes")
	rpl := replications[f.Flavor]
	fmt.Fprintf(w, "native: from %s until %s returns; the IO thread had fetched the whole backlog before\n", rpl.startApply, rpl.wait)
	fmt.Fprintln(w, "client floor: the benchmark sends each source transaction's statements, a position write and COMMIT as one query,"+
		" on one connection, from memory: no client that applies from outside the server does less per transaction")
	for _, res := range r.Results {
		for _, d := range res.Differences {
			fmt.Fprintf(w, "%s: %s\n", res.Name, d)
		}
	}
	benchkit.PrintLogProblems(w, r.LogProblems)
	fmt.Fprintln(w, "results written to", f.Out)
}
