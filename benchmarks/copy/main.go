// Command copy measures rowlift's table copy beside the baselines that bound it, all
// on the same pair of throwaway servers in one run: (a) a Go client scanning the
// source table in PK order, (b) LOAD DATA LOCAL INFILE of the same rows into the
// target, (c) mariadb-dump | mariadb (mysqldump | mysql with -flavor mysql),
// (d) rowlift streamer + applier as separate processes over gRPC, and (e)
// mydumper (its default threads) into a temp dir then myloader into an empty
// database, timed from mydumper's start to myloader's end (`make bench-setup`
// installs them; a run of (e) without them fails). The table is the seed's
// stress_test_pk, or with -table sbtest sysbench's sbtest1 as oltp_common's
// prepare fills it. It prints wall time, rows/s, MB/s and CPU seconds per
// method, the best, median and worst wall time of each over -runs, the ratios
// d/max(a,b), d/c and d/e, and writes the same as JSON, and each method's CPU
// seconds per million rows, process by process. With -profile it also takes Go CPU profiles of (d)'s streamer and
// applier and samples what the target server is running, to say where a
// copy's time goes.
//
//	go run ./benchmarks/copy -rows 1000000
//	go run ./benchmarks/copy -rows 1000000 -flavor mysql
//	go run ./benchmarks/copy -rows 1000000 -table sbtest -runs 3
//	go run ./benchmarks/copy -rows 1000000 -methods d -profile /tmp/prof
//	go tool pprof -top /tmp/prof/applier-1.pprof
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
)

// config is every flag; it is printed and stored with the results.
type config struct {
	Rows        int64  `json:"rows"`
	Table       string `json:"table"`
	ChunkRows   int64  `json:"chunk_rows"`
	PacketBytes int64  `json:"packet_bytes"`
	Workers     int    `json:"workers"`
	benchkit.ServerConfig
	Runs    int    `json:"runs"`
	Methods string `json:"methods"`
	Out     string `json:"out"`
	Keep    bool   `json:"keep"`
	// Profile is where (d) writes CPU profiles of the streamer and the
	// applier, ProfileSeconds long from the start of each run's copy.
	Profile        string  `json:"profile,omitempty"`
	ProfileSeconds float64 `json:"profile_seconds,omitempty"`
}

func main() {
	var cfg config
	flag.Int64Var(&cfg.Rows, "rows", 1_000_000, "rows in the table (full size 16777216)")
	flag.StringVar(&cfg.Table, "table", "stress", `table to copy: "stress" (the seed's stress_test_pk) or "sbtest" (sysbench's sbtest1)`)
	flag.Int64Var(&cfg.ChunkRows, "chunk-rows", 0, "rowlift rows per chunk SELECT (0: rowlift's default)")
	flag.Int64Var(&cfg.PacketBytes, "packet-bytes", 0, "rowlift gRPC message size in bytes (0: rowlift's default)")
	flag.IntVar(&cfg.Workers, "workers", 0, "rowlift applier connections (0: rowlift's default)")
	cfg.RegisterFlags(flag.CommandLine)
	flag.IntVar(&cfg.Runs, "runs", 1, "runs of each method; the best, median and worst are reported")
	flag.StringVar(&cfg.Methods, "methods", "a,b,c,d,e", "methods to run, always in the order a, b, c, d, e: "+
		"(a) source scan, (b) LOAD DATA target, (c) the flavor's dump | client, (d) rowlift, "+
		"(e) mydumper | myloader (`make bench-setup` installs them)")
	flag.StringVar(&cfg.Out, "out", "", "JSON result path (default benchmarks/results/copy-<rows>.json, copy-sbtest-<rows>.json with -table sbtest, -mysql before .json with -flavor mysql)")
	flag.BoolVar(&cfg.Keep, "keep", false, "keep the servers running at the end and print their DSNs, for profiling")
	flag.StringVar(&cfg.Profile, "profile", "", "directory for Go CPU profiles of (d)'s streamer and applier (streamer-<run>.pprof, applier-<run>.pprof); none when empty")
	flag.Float64Var(&cfg.ProfileSeconds, "profile-seconds", 2, "length of each -profile, from the start of the copy")
	flag.Parse()
	if cfg.Out == "" {
		name := fmt.Sprintf("copy-%d", cfg.Rows)
		if cfg.Table != "stress" {
			name = fmt.Sprintf("copy-%s-%d", cfg.Table, cfg.Rows)
		}
		cfg.Out = cfg.ResultPath(name)
	}
	benchkit.Main("copy", func(ctx context.Context) error { return run(ctx, cfg) })
}

func run(ctx context.Context, cfg config) error {
	selected, err := selectMethods(cfg.Methods)
	if err != nil {
		return err
	}
	if cfg.Rows < 1 || cfg.Runs < 1 {
		return fmt.Errorf("-rows and -runs must be at least 1")
	}
	if shapes[cfg.Table] == nil {
		return fmt.Errorf("-table: unknown table %q (want stress or sbtest)", cfg.Table)
	}
	b, err := setup(ctx, cfg, selected)
	if err != nil {
		return err
	}
	defer b.close()
	results, err := b.runAll(ctx, selected)
	if err != nil {
		return err
	}
	rep := b.report(results)
	rep.print(os.Stdout)
	return benchkit.WriteJSON(cfg.Out, rep)
}

// selectMethods parses -methods into the known methods it names, in the order a, b, c, d, e.
func selectMethods(list string) (map[string]bool, error) {
	selected := map[string]bool{}
	for _, key := range strings.Split(list, ",") {
		key = strings.TrimSpace(key)
		if !strings.Contains("abcde", key) || len(key) != 1 {
			return nil, fmt.Errorf("-methods: unknown method %q (want a comma-separated subset of a,b,c,d,e)", key)
		}
		selected[key] = true
	}
	return selected, nil
}

// progress prints what the benchmark is doing, on stderr so stdout holds only the results.
var progress = benchkit.Progressf("copy")
