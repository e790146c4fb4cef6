// Command apply measures how fast a target catches up on a backlog of
// transactions that one client wrote on the source, with rowlift's applier in
// four settings beside the servers' own replication (MariaDB's, or MySQL's with
// -flavor mysql), every one replaying the same transactions into a server of
// its own with the same durable settings (innodb_flush_log_at_trx_commit=-flush,
// sync_binlog=1, binlog on). It
//
//  1. seeds -tables sysbench-like tables of -rows rows on the source;
//  2. brings every target to the seeded state and stops it there: rowlift
//     targets by a workflow's copy (then the applier is stopped), replicas
//     by replication (then the SQL thread is stopped);
//  3. runs -k transactions on the source from one connection, each like
//     sysbench oltp_write_only: UPDATE of the indexed k by PK, UPDATE of c by
//     PK, DELETE and INSERT of one key; the replicas' IO threads fetch them all;
//  4. times each target's catch-up, one at a time after the servers have
//     flushed: rowlift from starting the applier until its committed position
//     covers the source's last GTID (read every 10 ms), for 1 worker and no
//     batching (the serial baseline), -workers workers, with commit batching,
//     and with out-of-order commits; a replica from starting its SQL thread
//     until MASTER_GTID_WAIT (MySQL: WAIT_FOR_EXECUTED_GTID_SET) returns, with
//     no parallel threads and with each of -native threads: on MariaDB in
//     optimistic and in conservative mode, on MySQL as replica_parallel_workers
//     with replica_preserve_commit_order=ON; and the client floor, where the
//     benchmark itself sends each backlog
//     transaction's statements, a position write and COMMIT as one query from
//     one connection: the least any client applying from outside the server
//     does per transaction;
//  5. compares every table of every target with the source row by row.
//
// The slowed-target case (-slow, a delay range) replays the first -slow-k
// transactions of the same backlog into two more rowlift targets whose every
// replay group is held that long after its statements ran, its locks taken, as a
// loaded server is slow over every statement: once with 1 worker, once with
// -workers. It prints each one's rate and the replay groups it rolled back (the
// applier's rowlift_replay_conflicts_total), and the fraction of the serial
// rate the parallel replayer keeps there: a stuck-group rule that mistakes a
// slow target for a deadlock rolls back group after group.
//
// With -profile DIR, the streamer and the applier of each rowlift catch-up
// are profiled from its start for -profile-seconds (<role>-<configuration>.pprof),
// to show where rowlift's time goes.
//
// It prints seconds, transactions/s, the speed-up over serial rowlift and
// whether the target is identical, per configuration, and the best rowlift
// beside the best replica; and writes the same as JSON.
//
//	go run ./benchmarks/apply -k 20000
//	go run ./benchmarks/apply -k 20000 -flavor mysql
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
)

// config is every flag; it is printed and stored with the results.
type config struct {
	K          int64   `json:"k"`
	Tables     int     `json:"tables"`
	Rows       int64   `json:"rows_per_table"`
	Workers    int     `json:"workers"`
	BatchItems int     `json:"batch_items"`
	BatchMs    int     `json:"batch_ms"`
	Native     string  `json:"native_threads"`
	Seed       uint64  `json:"seed"`
	Slow       string  `json:"slow_target"`
	SlowK      int64   `json:"slow_k"`
	Profile    string  `json:"profile,omitempty"`
	ProfileS   float64 `json:"profile_seconds,omitempty"`
	benchkit.ServerConfig
	Out string `json:"out"`
}

func main() {
	var cfg config
	flag.Int64Var(&cfg.K, "k", 20_000, "transactions in the backlog, written on the source by one connection")
	flag.IntVar(&cfg.Tables, "tables", 4, "sysbench-like tables the transactions pick from")
	flag.Int64Var(&cfg.Rows, "rows", 25_000, "rows per table")
	flag.IntVar(&cfg.Workers, "workers", 4, "rowlift apply_workers of the parallel configurations")
	flag.IntVar(&cfg.BatchItems, "batch-items", 256, "rowlift commit_batch_items of the batching configurations")
	flag.IntVar(&cfg.BatchMs, "batch-ms", 5, "rowlift commit_batch_ms of the batching configurations")
	flag.StringVar(&cfg.Native, "native", "0,4,16", "parallel appliers of the native replicas: slave_parallel_threads on MariaDB, each above 0 in optimistic and in conservative mode; replica_parallel_workers on MySQL, commit order preserved (empty: none)")
	flag.StringVar(&cfg.Slow, "slow", "20-160ms", "delay range held after every replay group's statements on the slowed targets (empty: no slowed-target case)")
	flag.Int64Var(&cfg.SlowK, "slow-k", 800, "transactions of the backlog (its first ones) the slowed targets replay")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "seed of the generated rows and transactions")
	flag.StringVar(&cfg.Profile, "profile", "", "directory for Go CPU profiles of the streamer and the applier from the start of each rowlift catch-up (<role>-<configuration>.pprof)")
	flag.Float64Var(&cfg.ProfileS, "profile-seconds", 5, "length of each -profile profile; the next configuration waits for it")
	cfg.RegisterFlags(flag.CommandLine)
	flag.StringVar(&cfg.Out, "out", "", "JSON result path (default benchmarks/results/apply.json, apply-mysql.json with -flavor mysql)")
	flag.Parse()
	if cfg.Out == "" {
		cfg.Out = cfg.ResultPath("apply")
	}
	benchkit.Main("apply", func(ctx context.Context) error { return run(ctx, cfg) })
}

func run(ctx context.Context, cfg config) error {
	threads, err := nativeThreads(cfg.Native)
	if err != nil {
		return err
	}
	if cfg.K < 1 || cfg.Tables < 1 || cfg.Rows < 1 || cfg.Workers < 1 || cfg.BatchItems < 0 || cfg.BatchMs < 0 {
		return fmt.Errorf("-k, -tables, -rows and -workers must be positive, -batch-items and -batch-ms not negative")
	}
	if cfg.Slow != "" && (cfg.SlowK < 1 || cfg.SlowK > cfg.K) {
		return fmt.Errorf("-slow-k must be between 1 and -k (%d)", cfg.K)
	}
	b, err := setup(ctx, cfg, threads)
	if err != nil {
		return err
	}
	defer b.close()
	rep, err := b.measureAll(ctx)
	if err != nil {
		return err
	}
	rep.print(os.Stdout)
	if err := benchkit.WriteJSON(cfg.Out, rep); err != nil {
		return err
	}
	return rep.mismatch()
}

// nativeThreads parses -native into thread counts.
func nativeThreads(list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("-native: %q is not a thread count (want e.g. 0,4,16)", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// progress prints what the benchmark is doing, on stderr so stdout holds only the results.
var progress = benchkit.Progressf("apply")
