// Command json measures what keeping MySQL JSON's types costs rowlift's copy
// of a JSON-heavy table: a source table of -rows documents of about
// -doc-bytes shaped like application data (nested objects and arrays,
// strings, integers, doubles, booleans), -typed-pct percent of them also
// holding scalars an application makes with server functions (DECIMAL money
// amounts, DATE and DATETIME values, an UNSIGNED id), copied from one MySQL
// server to another. Each of -runs rounds times, round-robin, with the target
// database dropped between methods:
//
//   - (a) the target's own LOAD DATA INFILE of the same rows' text (dumped
//     from the source with SELECT ... INTO OUTFILE beforehand, untimed): the
//     baseline;
//   - (b) rowlift with json_as_text: the documents' text alone, no type map;
//   - (c) rowlift by default: each chunk's SELECT adds the type map
//     (mysqljson.TypeMapExpr) and the applier writes typed documents through
//     JSON_SET;
//
// and, once per round, the source's SELECT of the whole table with and without
// the type map, drained by this process, so the table shows how much of the
// cost is the source's. Each rowlift copy is checked with verify.Table (by type
// for (c), by text for (b), where it also counts the documents whose types the
// text path lost). It prints best, median and worst wall seconds, rows/s, the
// ratio to (a), (c)÷(b), and the CPU seconds of each server and role, and
// writes the same as JSON. MySQL only: MariaDB's JSON is text and has no types
// to keep.
//
//	go run ./benchmarks/json                      # 200,000 rows of ~1 KiB
//	go run ./benchmarks/json -rows 1000000        # full size
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
	"github.com/rowlift/rowlift/internal/sandbox"
)

// config is every flag; it is printed and stored with the results.
type config struct {
	Rows     int64 `json:"rows"`
	DocBytes int   `json:"doc_bytes"`
	TypedPct int   `json:"typed_pct"`
	Runs     int   `json:"runs"`
	benchkit.ServerConfig
	Out            string  `json:"out"`
	Profile        string  `json:"profile,omitempty"`
	ProfileSeconds float64 `json:"profile_seconds,omitempty"`
}

func main() {
	var cfg config
	flag.Int64Var(&cfg.Rows, "rows", 200_000, "rows (documents) in the table (full size 1000000)")
	flag.IntVar(&cfg.DocBytes, "doc-bytes", 1024, "about how many bytes of JSON text each document has")
	flag.IntVar(&cfg.TypedPct, "typed-pct", 50, "percent of the documents that hold DECIMAL, DATE, DATETIME and UNSIGNED scalars")
	flag.IntVar(&cfg.Runs, "runs", 3, "rounds of every method, run round-robin")
	cfg.RegisterFlags(flag.CommandLine)
	// MySQL is the flavor whose JSON has types; -flavor mariadb is refused below.
	cfg.Flavor = sandbox.MySQL
	flag.StringVar(&cfg.Out, "out", "", "JSON result path (default benchmarks/results/json-<rows>-mysql.json)")
	flag.StringVar(&cfg.Profile, "profile", "", "directory for Go CPU profiles of the streamer and the applier during the first round's rowlift copies (<role>-<text|typed>.pprof)")
	flag.Float64Var(&cfg.ProfileSeconds, "profile-seconds", 10, "length of each -profile profile; the copy waits for it")
	flag.Parse()
	if cfg.Out == "" {
		cfg.Out = cfg.ResultPath(fmt.Sprintf("json-%d", cfg.Rows))
	}
	benchkit.Main("json", func(ctx context.Context) error { return run(ctx, cfg) })
}

func run(ctx context.Context, cfg config) error {
	if cfg.Flavor != sandbox.MySQL {
		return errors.New("-flavor mariadb: MariaDB's JSON is text with no types to keep; this benchmark runs on MySQL only (the default)")
	}
	if cfg.Rows < 1 || cfg.Runs < 1 || cfg.DocBytes < 256 || cfg.DocBytes > 1<<20 || cfg.TypedPct < 0 || cfg.TypedPct > 100 {
		return errors.New("-rows and -runs must be at least 1, -doc-bytes between 256 and 1048576, -typed-pct between 0 and 100")
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
var progress = benchkit.Progressf("json")
