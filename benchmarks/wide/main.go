// Command wide measures rowlift's copy of a table of wide rows (blobs of
// -row-kb on average, -mb in all) and what it costs in memory: one source and
// five target servers, one streamer next to the source, an applier per target
// and a coordinator over all of them, every role its own process, each
// workflow created and started through the Control API with the default
// chunk settings. In the same run it times
//
//   - the target's own LOAD DATA INFILE of the same rows (dumped from the
//     source with SELECT ... INTO OUTFILE beforehand, untimed): the baseline;
//   - a 1→1 move of the table;
//   - a 1→4 split of it (--shards 4 by hash of id);
//
// and, for each rowlift method, the peak resident memory (VmHWM) of the
// streamer, of each applier and of the coordinator during that method alone,
// which the README's memory ceiling must hold. It checks that each copy holds
// every row (count and total bytes), prints the methods side by side with the
// ratios to the baseline, and writes the same as JSON.
//
//	go run ./benchmarks/wide -mb 2048             # full size
//	go run ./benchmarks/wide -mb 256 -flavor mysql
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
	MB    int64 `json:"mb"`
	RowKB int64 `json:"row_kb"`
	benchkit.ServerConfig
	Out string `json:"out"`
}

func main() {
	var cfg config
	flag.Int64Var(&cfg.MB, "mb", 2048, "MiB of row data in the table (full size 2048)")
	flag.Int64Var(&cfg.RowKB, "row-kb", 200, "average KiB per row; rows range from half to one and a half times it")
	cfg.RegisterFlags(flag.CommandLine)
	flag.StringVar(&cfg.Out, "out", "", "JSON result path (default benchmarks/results/wide-<mb>.json, wide-<mb>-mysql.json with -flavor mysql)")
	flag.Parse()
	if cfg.Out == "" {
		cfg.Out = cfg.ResultPath(fmt.Sprintf("wide-%d", cfg.MB))
	}
	benchkit.Main("wide", func(ctx context.Context) error { return run(ctx, cfg) })
}

func run(ctx context.Context, cfg config) error {
	if cfg.MB < 1 || cfg.RowKB < 1 || cfg.RowKB*1024 > 64<<20 {
		return fmt.Errorf("-mb must be at least 1 and -row-kb between 1 and 65536")
	}
	b, err := setup(ctx, cfg)
	if err != nil {
		return err
	}
	defer b.close()
	rep, err := b.runAll(ctx)
	if err != nil {
		return fmt.Errorf("%w\n%s", err, b.procs.LogTails())
	}
	rep.print(os.Stdout)
	return benchkit.WriteJSON(cfg.Out, rep)
}

// progress prints what the benchmark is doing, on stderr so stdout holds only the results.
var progress = benchkit.Progressf("wide")
