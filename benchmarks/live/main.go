// Command live measures a rowlift move of a table under an application's write
// load, against a baseline of the same load in the same run: what the
// application sees while its table moves, how long the move takes, and how far
// the target falls behind. On one pair of durable throwaway servers
// (innodb_flush_log_at_trx_commit=-flush and sync_binlog=1 on both), with
// rowlift's streamer and applier as separate processes over gRPC, it
//
//  1. seeds bench.sbtest1 on the source as sysbench's prepare does (-rows
//     rows) and a one-row bench.heartbeat, which the benchmark updates every
//     50 ms for the whole run (pt-heartbeat's way), and starts a load shaped
//     like sysbench's oltp_write_only (UPDATE of k, UPDATE of c, DELETE and
//     INSERT of one id, one transaction) at -tps transactions/s in all, over
//     the connections of -threads, on a fixed schedule, each transaction's
//     latency counted from when it was due;
//  2. measures the load alone for -baseline, after a 2 s warm-up;
//  3. starts a workflow moving both tables at t0 and samples every 100 ms the
//     heartbeat lag on the target (now minus the heartbeat row's time there),
//     rowlift's own lag and whether the copy is done, until the copy is done
//     (copy_s) and then the heartbeat lag is at most 1 s (caught_up_s);
//  4. lets the load run 5 s more, stops it, waits until the target has
//     applied everything and compares both tables row by row, failing the
//     run when they differ;
//  5. prints the load's tps and latency percentiles (medians of the
//     per-second p50/p95/p99) in the baseline and during the move (t0 to
//     caught up) side by side, the CPU each process used per transaction
//     committed, and the project's done-when goals for a live move
//     (caught_up_s/copy_s ≤ 1.3, lag_peak_s ≤ 2, p95 during the move at most
//     4× the baseline's).
//
// It prints one table and writes the same as JSON (benchmarks/results/live.json
// by default).
//
//	go run ./benchmarks/live
//	go run ./benchmarks/live -flavor mysql -rows 100000 -baseline 5s -tps 300
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
	Threads  int           `json:"threads"`
	TPS      float64       `json:"tps"`
	Baseline time.Duration `json:"-"`
	// MaxReplayLagMs is the move's max_replay_lag_ms (0: rowlift's default).
	MaxReplayLagMs int64 `json:"max_replay_lag_ms"`
	// TargetNice runs the target server at this nice value (0: not
	// changed), to model a target on a host of its own; rowlift's roles run
	// at their own --nice.
	TargetNice int `json:"target_nice"`
	benchkit.ServerConfig
	Out string `json:"out"`
}

func main() {
	var cfg config
	flag.Int64Var(&cfg.Rows, "rows", 1_000_000, "rows of bench.sbtest1")
	flag.IntVar(&cfg.Threads, "threads", 16, "source connections the load is spread over")
	flag.Float64Var(&cfg.TPS, "tps", 600, "load transactions/s in all, on a fixed schedule")
	flag.DurationVar(&cfg.Baseline, "baseline", 20*time.Second, "how long the load runs alone, measured, before the move")
	flag.IntVar(&cfg.TargetNice, "target-nice", 0, "nice value (1-19) of every thread of the target server, to model a target on a host of its own: on one\n"+
		"machine it then takes only the CPU the source side leaves (0: as started, the issue's measure); rowlift's roles run at their --nice")
	flag.Int64Var(&cfg.MaxReplayLagMs, "max-replay-lag-ms", 0, "the move's max_replay_lag_ms: the copy waits while replay lags more (0: rowlift's default, -1: never)")
	cfg.RegisterFlags(flag.CommandLine)
	flag.StringVar(&cfg.Out, "out", "", "JSON result path (default benchmarks/results/live.json, live-mysql.json with -flavor mysql)")
	flag.Parse()
	if cfg.Out == "" {
		cfg.Out = cfg.ResultPath("live")
	}
	benchkit.Main("live", func(ctx context.Context) error { return run(ctx, cfg) })
}

func run(ctx context.Context, cfg config) error {
	if cfg.Rows < 1 || cfg.Threads < 1 || cfg.TPS <= 0 || cfg.Baseline < time.Second {
		return fmt.Errorf("-rows, -threads and -tps must be positive and -baseline at least 1s")
	}
	b, err := setup(ctx, cfg)
	if err != nil {
		return err
	}
	defer b.close()
	rep, err := b.measure(ctx)
	if err != nil {
		return fmt.Errorf("%w\n%s\n%s", err, b.streamer.LogTail(), b.applier.LogTail())
	}
	rep.print(os.Stdout)
	return benchkit.WriteJSON(cfg.Out, rep)
}

// progress prints what the benchmark is doing, on stderr so stdout holds only the results.
var progress = benchkit.Progressf("live")
