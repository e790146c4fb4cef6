// Command lag measures rowlift's replication lag under a steady write load, beside
// the baseline that sets the load: how many single-row transactions one
// connection can commit on the target. On one pair of throwaway servers, with
// rowlift's streamer and applier as separate processes over gRPC, it
//
//  1. measures R, the single-row INSERT autocommit transactions per second one Go
//     connection commits on the target;
//  2. writes the same transactions into bench.events on the source at -rate
//     (default R/2) for -duration while a workflow replays them, probes the
//     target every 10 ms, and reports the p50, p99 and max lag and the write and
//     apply rates;
//  3. copies the seed's stress_test_pk (-rows rows) with a second workflow, first
//     with no load and then under the same load, and reports both times, the
//     slowdown and the lag during the loaded copy.
//
// It prints one table and writes the same as JSON.
//
//	go run ./benchmarks/lag -duration 60s
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
	Duration time.Duration `json:"-"`
	Rows     int64         `json:"rows"`
	Rate     float64       `json:"rate"`
	Writers  int           `json:"writers"`
	benchkit.ServerConfig
	Out string `json:"out"`
}

func main() {
	var cfg config
	flag.DurationVar(&cfg.Duration, "duration", 60*time.Second, "how long the steady load is measured")
	flag.Int64Var(&cfg.Rows, "rows", 1_000_000, "rows in the table copied idle and under load")
	flag.Float64Var(&cfg.Rate, "rate", 0, "write transactions/s on the source (0: half of what one connection commits on the target)")
	flag.IntVar(&cfg.Writers, "writers", 4, "source connections the load is spread over")
	cfg.RegisterFlags(flag.CommandLine)
	flag.StringVar(&cfg.Out, "out", "", "JSON result path (default benchmarks/results/lag.json, lag-mysql.json with -flavor mysql)")
	flag.Parse()
	if cfg.Out == "" {
		cfg.Out = cfg.ResultPath("lag")
	}
	benchkit.Main("lag", func(ctx context.Context) error { return run(ctx, cfg) })
}

func run(ctx context.Context, cfg config) error {
	if cfg.Duration <= 0 || cfg.Rows < 1 || cfg.Rate < 0 || cfg.Writers < 1 {
		return fmt.Errorf("-duration, -rows and -writers must be positive and -rate not negative")
	}
	b, err := setup(ctx, cfg)
	if err != nil {
		return err
	}
	defer b.close()
	rep, err := b.measureAll(ctx)
	if err != nil {
		return fmt.Errorf("%w\n%s\n%s", err, b.streamer.LogTail(), b.applier.LogTail())
	}
	rep.print(os.Stdout)
	return benchkit.WriteJSON(cfg.Out, rep)
}

// measureAll runs the baseline, then the steady load, then the two copies.
func (b *bench) measureAll(ctx context.Context) (*report, error) {
	rep := b.newReport()
	var err error
	if rep.Capacity, err = b.measureCapacity(ctx); err != nil {
		return nil, err
	}
	rep.Rate, rep.RateFrom = b.cfg.Rate, "-rate"
	if rep.Rate == 0 {
		rep.Rate, rep.RateFrom = rep.Capacity.PerS/2, "R/2"
	}
	progress("load: %.0f transactions/s (%s) over %d writers", rep.Rate, rep.RateFrom, b.cfg.Writers)
	if rep.Steady, err = b.steady(ctx, rep.Rate); err != nil {
		return nil, err
	}
	if rep.Copy, err = b.copies(ctx, rep.Rate); err != nil {
		return nil, err
	}
	rep.LogProblems, err = b.logProblems()
	return rep, err
}

// progress prints what the benchmark is doing, on stderr so stdout holds only the results.
var progress = benchkit.Progressf("lag")
