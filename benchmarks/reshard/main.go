// Command reshard measures a 1→4 split of a table beside the 1→1 move of the
// same table, both in the same run on the same source server: one source and
// five target servers (one for the move, four for the split), one streamer
// next to the source, an applier per target and a coordinator over all of
// them, every role its own process, each workflow created and started through
// the coordinator's Control API as an operator would. The table is the seed's
// stress_test_pk (-rows rows); the split is `--shards 4` by hash of id (ranges
// -40, 40-80, 80-c0, c0-). For each it measures
//
//   - the wall time from StartWorkflow to every target's copy being done;
//   - the source rows read per row moved: the delta of the source's
//     Innodb_rows_read (MySQL; Rows_read on MariaDB, which has no InnoDB one)
//     over that time divided by the table's rows (docs/design.md: Vitess reads
//     every source row once per target shard, rowlift aims at about once
//     whatever the number of shards);
//   - the CPU of the source server and of the streamer;
//
// and checks the result: the move's target holds every row, the shards' rows
// add up to the source's, and each shard holds only ids whose keyspace ID is
// in its range. It prints the split beside the move and their ratios (best and
// median of -runs), and writes the same as JSON.
//
//	go run ./benchmarks/reshard -rows 1000000 -runs 3
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
)

// config is every flag; it is printed and stored with the results.
type config struct {
	Rows int64 `json:"rows"`
	benchkit.ServerConfig
	Runs int    `json:"runs"`
	Out  string `json:"out"`
}

func main() {
	var cfg config
	flag.Int64Var(&cfg.Rows, "rows", 1_000_000, "rows in the table")
	cfg.RegisterFlags(flag.CommandLine)
	flag.IntVar(&cfg.Runs, "runs", 1, "runs of the move and of the split; the best and the median are reported")
	flag.StringVar(&cfg.Out, "out", "", "JSON result path (default benchmarks/results/reshard.json, reshard-mysql.json with -flavor mysql)")
	flag.Parse()
	if cfg.Out == "" {
		cfg.Out = cfg.ResultPath("reshard")
	}
	benchkit.Main("reshard", func(ctx context.Context) error { return run(ctx, cfg) })
}

func run(ctx context.Context, cfg config) error {
	if cfg.Rows < 1 || cfg.Runs < 1 {
		return fmt.Errorf("-rows and -runs must be at least 1")
	}
	b, err := setup(ctx, cfg)
	if err != nil {
		return err
	}
	defer b.close()
	results, err := b.runAll(ctx)
	if err != nil {
		return fmt.Errorf("%w\n%s", err, b.procs.LogTails())
	}
	rep, err := b.report(results)
	if err != nil {
		return err
	}
	rep.print(os.Stdout)
	return benchkit.WriteJSON(cfg.Out, rep)
}

// progress prints what the benchmark is doing, on stderr so stdout holds only the results.
var progress = benchkit.Progressf("reshard")
