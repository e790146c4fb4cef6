package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
	"github.com/rowlift/rowlift/internal/keyrange"
	"github.com/rowlift/rowlift/internal/sandbox"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

const (
	// db holds the table on the source and, under the same name, on every target.
	db = "bench"
	// shards is how many targets the split writes to.
	shards = 4
	// copyTimeout bounds the wait for one copy.
	copyTimeout = 30 * time.Minute
)

// bench is one run: the servers, the rowlift processes and a Control API
// client of the coordinator.
type bench struct {
	cfg config
	benchkit.Servers
	tmp    string // rowlift binary and process logs
	clkTck float64
	// Cluster's appliers are the move target's, then the shards'.
	*benchkit.Cluster
	// procs are every rowlift process, named for the report.
	procs  benchkit.Procs
	ranges []keyrange.Range
}

// target is one server a method writes to, as the coordinator names it.
type target struct {
	name    string
	srv     *sandbox.Server
	db      *sql.DB
	applier *benchkit.Proc
	// keyRange is the shard's range; the zero Range (the whole keyspace) for the move.
	keyRange keyrange.Range
	split    bool
}

// setup builds rowlift, starts the servers, seeds the source and starts the
// rowlift processes.
func setup(ctx context.Context, cfg config) (b *bench, err error) {
	b = &bench{cfg: cfg, clkTck: benchkit.ClockTicks()}
	if b.ranges, err = keyrange.Even(shards); err != nil {
		return nil, err
	}
	var bin string
	if b.tmp, bin, err = benchkit.TempBuild(ctx, "reshard", progress); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	opts := cfg.Options()
	if err := b.Start(ctx, opts, "", progress); err != nil {
		return b, err
	}
	if err := b.StartExtra(ctx, shards, opts, "", progress); err != nil {
		return b, err
	}
	start := time.Now()
	if err := benchkit.SeedStress(ctx, b.SrcDB, db, cfg.Rows); err != nil {
		return b, fmt.Errorf("seed source: %w", err)
	}
	progress("loaded %d rows into the source in %.1f s", cfg.Rows, time.Since(start).Seconds())
	if b.Cluster, err = benchkit.StartCluster(ctx, bin, b.tmp, b.Source.DSN(""), append([]*sandbox.Server{b.Target}, b.Extra...), &b.procs); err != nil {
		return b, fmt.Errorf("%w\n%s", err, b.procs.LogTails())
	}
	return b, nil
}

// targets are the move's one target (split false) and the split's shards.
func (b *bench) targets(split bool) []target {
	if !split {
		return []target{{name: benchkit.TargetName(0), srv: b.Target, db: b.TgtDB, applier: b.Appliers[0]}}
	}
	out := make([]target, shards)
	for i := range out {
		out[i] = target{name: benchkit.TargetName(1 + i), srv: b.Extra[i], db: b.ExtraDBs[i], applier: b.Appliers[1+i],
			keyRange: b.ranges[i], split: true}
	}
	return out
}

// spec is the move's workflow or the split's: the split's targets get the
// even ranges and the table is placed by hash of id.
func (b *bench) spec(name string, split bool) *rowliftv1.WorkflowSpec {
	spec := &rowliftv1.WorkflowSpec{
		Name:           name,
		SourceDatabase: db,
		Sources:        []*rowliftv1.SourceShard{{Name: "main", StreamerAddress: b.StreamerAddr}},
		Tables:         []*rowliftv1.TableSpec{{Name: benchkit.StressTable}},
		Options:        &rowliftv1.WorkflowOptions{},
	}
	for _, t := range b.targets(split) {
		ts := &rowliftv1.TargetShard{Name: t.name}
		if split {
			ts.KeyRange = t.keyRange.String()
		}
		spec.Targets = append(spec.Targets, ts)
	}
	if split {
		spec.Tables[0].ShardingColumn, spec.Tables[0].ShardingFunction = "id", "hash"
	}
	return spec
}

// method is one way of moving the table.
type method struct {
	key, name string
	split     bool
}

var methods = []method{
	{"move", "1→1 move", false},
	{"split", "1→4 split", true},
}

// runAll runs the move and the split in rounds (move, split, then again) and
// returns each method's samples.
func (b *bench) runAll(ctx context.Context) (map[string][]sample, error) {
	results := map[string][]sample{}
	for round := 1; round <= b.cfg.Runs; round++ {
		for _, m := range methods {
			progress("run %d/%d: %s", round, b.cfg.Runs, m.name)
			s, err := b.measure(ctx, fmt.Sprintf("%s%d", m.key, round), b.targets(m.split))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", m.name, err)
			}
			progress("  %.2f s, %.2f source rows read per row moved", s.WallS, s.ReadPerRow)
			results[m.key] = append(results[m.key], s)
		}
	}
	return results, nil
}

// sample is one run of one method.
type sample struct {
	WallS    float64 `json:"wall_s"`
	RowsPerS float64 `json:"rows_per_s"`
	// SourceRowsRead is the delta of the source's Counter, and ReadPerRow
	// that divided by the rows moved.
	SourceRowsRead int64   `json:"source_rows_read"`
	Counter        string  `json:"counter"`
	ReadPerRow     float64 `json:"source_rows_read_per_row"`
	SourceCPUS     float64 `json:"source_server_cpu_s"`
	StreamerCPUS   float64 `json:"streamer_cpu_s"`
	// TargetRows are the rows each target holds at the end, in target order.
	TargetRows []int64 `json:"target_rows"`
}

// measure empties the targets, creates the workflow through the coordinator,
// times it from StartWorkflow until every target's copy is done, checks the
// targets and deletes the workflow.
func (b *bench) measure(ctx context.Context, name string, targets []target) (s sample, err error) {
	var dbs []*sql.DB
	for _, t := range targets {
		if _, err := t.db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+db); err != nil {
			return s, fmt.Errorf("empty target %s: %w", t.name, err)
		}
		dbs = append(dbs, t.db)
	}
	if err := benchkit.Quiesce(ctx, 0, append(dbs, b.SrcDB)...); err != nil {
		return s, err
	}
	spec := b.spec(name, targets[0].split)
	if _, err := b.Control.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: spec}); err != nil {
		return s, fmt.Errorf("create workflow %s: %s", name, status.Convert(err).Message())
	}
	defer func() {
		if _, derr := b.Control.DeleteWorkflow(context.WithoutCancel(ctx), &rowliftv1.WorkflowRef{Name: name}); derr != nil {
			err = errors.Join(err, fmt.Errorf("delete workflow %s: %s", name, status.Convert(derr).Message()))
		}
	}()
	read0, counter, err := rowsRead(ctx, b.SrcDB)
	if err != nil {
		return s, err
	}
	src0, err := benchkit.ServerCPU(b.Source, b.clkTck)
	if err != nil {
		return s, err
	}
	st0, err := b.Streamer.CPU(b.clkTck)
	if err != nil {
		return s, err
	}
	t0 := time.Now()
	if _, err := b.Control.StartWorkflow(ctx, &rowliftv1.WorkflowRef{Name: name}); err != nil {
		return s, fmt.Errorf("start workflow %s: %s", name, status.Convert(err).Message())
	}
	wctx, cancel := context.WithTimeout(ctx, copyTimeout)
	defer cancel()
	for _, t := range targets {
		store, err := state.Open(ctx, t.db)
		if err != nil {
			return s, fmt.Errorf("state of %s: %w", t.name, err)
		}
		if err := benchkit.WaitCopied(wctx, store, name, b.Streamer, t.applier); err != nil {
			return s, fmt.Errorf("target %s: %w", t.name, err)
		}
	}
	wall := time.Since(t0).Seconds()
	read1, _, err := rowsRead(ctx, b.SrcDB)
	if err != nil {
		return s, err
	}
	src1, err := benchkit.ServerCPU(b.Source, b.clkTck)
	if err != nil {
		return s, err
	}
	st1, err := b.Streamer.CPU(b.clkTck)
	if err != nil {
		return s, err
	}
	s = sample{
		WallS:          wall,
		RowsPerS:       float64(b.cfg.Rows) / wall,
		SourceRowsRead: read1 - read0,
		ReadPerRow:     float64(read1-read0) / float64(b.cfg.Rows),
		SourceCPUS:     src1 - src0,
		StreamerCPUS:   st1 - st0,
		Counter:        counter,
	}
	s.TargetRows, err = check(ctx, targets, b.cfg.Rows)
	return s, err
}

// rowsRead is the server's count of rows read, and the status variable it
// comes from: Innodb_rows_read where the server has it (MySQL), else Rows_read
// (MariaDB removed Innodb_rows_read in 10.5; Rows_read counts the rows every
// engine returned, which on a source that holds only InnoDB tables is the
// same thing).
func rowsRead(ctx context.Context, pool *sql.DB) (n int64, counter string, err error) {
	rows, err := pool.QueryContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN ('Innodb_rows_read', 'Rows_read')")
	if err != nil {
		return 0, "", fmt.Errorf("source rows read: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			return 0, "", fmt.Errorf("source rows read: %w", err)
		}
		if counter == "" || name == "Innodb_rows_read" {
			n, counter = v, name
		}
	}
	if err := rows.Err(); err != nil {
		return 0, "", fmt.Errorf("source rows read: %w", err)
	}
	if counter == "" {
		return 0, "", fmt.Errorf("source rows read: the server has neither Innodb_rows_read nor Rows_read")
	}
	return n, counter, nil
}

// close stops the rowlift processes and the servers and removes the temp dir.
func (b *bench) close() {
	benchkit.Teardown(b.Cluster, &b.procs, &b.Servers, b.tmp, progress)
}
