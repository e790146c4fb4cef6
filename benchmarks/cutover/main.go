// Command cutover measures what a switch and a reverse cost the application of
// a move, beside a plain table comparison measured in the same run. On one
// pair of throwaway servers, with every rowlift role as its own process and
// the workflow driven through the coordinator's Control API, as an operator
// would, it
//
//  1. loads the seed's stress_test_pk (-rows rows) on the source, starts a
//     streamer and an applier next to each server and a coordinator that knows
//     both, creates the workflow with what a switch needs (its reverse target
//     and reverse streamer) and times it from its start until it runs: the
//     copy of the table, which the verify is put beside;
//  2. starts a steady write load at -rate transactions/s (updates, inserts and
//     deletes of single rows) over -writers connections that write wherever
//     the route points, as an application does: the source, and after each
//     switch the target; a write that finds its table frozen ("doesn't exist")
//     or locked is retried until it commits, and timed from its first try;
//  3. under that load, compares the table on both servers with a plain
//     CHECKSUM TABLE, one server after the other and both at once (the
//     baseline), and with VerifyWorkflow, when the coordinator has it, timing
//     each verify chunk on the target from the forward applier's
//     rowlift.applier.verify_chunk spans, which it exports to an OTLP
//     receiver in the benchmark;
//  4. runs -switches switches, each followed by a reverse, -interval apart,
//     with a routing hook that re-routes the writers to the side that takes
//     the writes, and records each call's write pause as rowlift reports it,
//     the pause the writers saw (from a write's first refused try to its
//     commit), when the hook re-routed them and how long the call took;
//  5. stops the load, waits until the target has applied all of it, and
//     compares both sides row by row (internal/verify).
//
// It prints one table and writes the same as JSON; it fails (exit 1) when the
// sides differ at the end.
//
//	go run ./benchmarks/cutover -switches 10 -rate 500
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
)

// config is every flag; it is printed and stored with the results.
type config struct {
	Rows     int64         `json:"rows"`
	Rate     float64       `json:"rate"`
	Writers  int           `json:"writers"`
	Switches int           `json:"switches"`
	Interval time.Duration `json:"-"`
	benchkit.ServerConfig
	Out string `json:"out"`
}

func main() {
	var cfg config
	flag.Int64Var(&cfg.Rows, "rows", 200_000, "rows in the moved table")
	flag.Float64Var(&cfg.Rate, "rate", 500, "write transactions/s of the load")
	flag.IntVar(&cfg.Writers, "writers", 4, "connections the load is spread over")
	flag.IntVar(&cfg.Switches, "switches", 10, "switches, each followed by a reverse")
	flag.DurationVar(&cfg.Interval, "interval", time.Second, "time between cutovers, for the writes on the new side to flow back")
	cfg.RegisterFlags(flag.CommandLine)
	flag.StringVar(&cfg.Out, "out", "", "JSON result path (default benchmarks/results/cutover.json, cutover-mysql.json with -flavor mysql)")
	flag.Parse()
	if cfg.Out == "" {
		cfg.Out = cfg.ResultPath("cutover")
	}
	benchkit.Main("cutover", func(ctx context.Context) error { return run(ctx, cfg) })
}

func run(ctx context.Context, cfg config) error {
	if cfg.Rows < 1 || cfg.Rate <= 0 || cfg.Writers < 1 || cfg.Switches < 1 || cfg.Interval < 0 {
		return fmt.Errorf("-rows, -rate, -writers and -switches must be positive and -interval not negative")
	}
	b, err := setup(ctx, cfg)
	if err != nil {
		return err
	}
	defer b.close()
	rep, err := b.measureAll(ctx)
	if err != nil {
		return fmt.Errorf("%w\n%s", err, b.procs.LogTails())
	}
	rep.print(os.Stdout)
	if err := benchkit.WriteJSON(cfg.Out, rep); err != nil {
		return err
	}
	if !rep.Identical {
		return fmt.Errorf("THE SIDES DIFFER after the cutovers: %s", rep.Differences)
	}
	return nil
}

// progress prints what the benchmark is doing, on stderr so stdout holds only the results.
var progress = benchkit.Progressf("cutover")
