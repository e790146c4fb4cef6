package main

import (
	"context"
	"fmt"
	"time"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
)

// sourceDB holds the table on the source.
const sourceDB = "bench"

// targetDBs are the databases the methods write into on the target, one each.
var targetDBs = []string{"bench_load", "bench_dump", "bench_rowlift", "bench_mydumper"}

// shapes are the tables -table names: the seed's stress_test_pk and
// sysbench's sbtest1, each of rows rows.
var shapes = map[string]func(rows int64) benchkit.Shape{
	"stress": func(int64) benchkit.Shape { return benchkit.Stress },
	"sbtest": benchkit.Sbtest,
}

// seedSource creates and loads the source table.
func (b *bench) seedSource(ctx context.Context) error {
	start := time.Now()
	if err := b.shape.Seed(ctx, b.SrcDB, sourceDB, b.cfg.Rows); err != nil {
		return fmt.Errorf("seed source: %w", err)
	}
	progress("loaded %d rows of %s (%.1f MB of values) into the source in %.1f s",
		b.cfg.Rows, b.shape.Name, float64(b.rowBytes)/1e6, time.Since(start).Seconds())
	return nil
}

// checkCount fails unless the table in db on the target holds exactly want rows.
func (b *bench) checkCount(ctx context.Context, db string, want int64) error {
	return benchkit.CheckCount(ctx, b.TgtDB, db+"."+b.shape.Name, want)
}

// resetTarget drops every method's copy on the target, so each method starts from
// an empty server holding only its own database, and creates db.
func (b *bench) resetTarget(ctx context.Context, db string) error {
	for _, name := range targetDBs {
		if _, err := b.TgtDB.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			return fmt.Errorf("reset target: %w", err)
		}
	}
	if _, err := b.TgtDB.ExecContext(ctx, "CREATE DATABASE "+db); err != nil {
		return fmt.Errorf("reset target: %w", err)
	}
	return nil
}
