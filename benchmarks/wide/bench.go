package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
	db    = "wide"
	table = "blobs"
	// createTable is the table on the source and on the baseline's target.
	createTable = "CREATE TABLE " + db + "." + table + " (id BIGINT PRIMARY KEY, b LONGBLOB NOT NULL)"
	shards      = 4
	// seedBatchBytes is about what one seeding INSERT writes.
	seedBatchBytes = 32 << 20
	copyTimeout    = 60 * time.Minute
)

// bench is one run: the servers, the rowlift processes and a Control API
// client of the coordinator.
type bench struct {
	cfg config
	benchkit.Servers
	tmp   string
	rows  int64
	bytes int64 // SUM(LENGTH(b)) on the source
	// Cluster's appliers are the move target's, then the shards'.
	*benchkit.Cluster
	procs benchkit.Procs
}

func setup(ctx context.Context, cfg config) (b *bench, err error) {
	b = &bench{cfg: cfg, rows: cfg.MB * 1024 / cfg.RowKB}
	var bin string
	if b.tmp, bin, err = benchkit.TempBuild(ctx, "wide", progress); err != nil {
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
	// Each method starts on clean buffer pools (benchkit.Quiesce): at the
	// default 200 pages a second, flushing GiBs of blob pages would take
	// minutes on every server.
	for _, d := range append([]*sql.DB{b.SrcDB, b.TgtDB}, b.ExtraDBs...) {
		if _, err := d.ExecContext(ctx, "SET GLOBAL innodb_io_capacity_max = 40000, GLOBAL innodb_io_capacity = 20000"); err != nil {
			return b, fmt.Errorf("flush rate: %w", err)
		}
	}
	start := time.Now()
	if err := b.seed(ctx); err != nil {
		return b, fmt.Errorf("seed source: %w", err)
	}
	progress("loaded %d rows, %.0f MiB, into the source in %.1f s", b.rows, float64(b.bytes)/(1<<20), time.Since(start).Seconds())
	if b.Cluster, err = benchkit.StartCluster(ctx, bin, b.tmp, b.Source.DSN(""), append([]*sandbox.Server{b.Target}, b.Extra...), &b.procs); err != nil {
		return b, fmt.Errorf("%w\n%s", err, b.procs.LogTails())
	}
	return b, nil
}

// seed fills the source table in batches of about seedBatchBytes: row i
// holds i's MD5 repeated to between half and one and a half times -row-kb.
func (b *bench) seed(ctx context.Context) error {
	if _, err := b.SrcDB.ExecContext(ctx, "CREATE DATABASE "+db); err != nil {
		return err
	}
	if _, err := b.SrcDB.ExecContext(ctx, createTable); err != nil {
		return err
	}
	per := max(1, seedBatchBytes/(b.cfg.RowKB*1024))
	for first := int64(1); first <= b.rows; first += per {
		last := min(first+per-1, b.rows)
		q := fmt.Sprintf("INSERT INTO %s.%s WITH RECURSIVE s(i) AS (SELECT %d UNION ALL SELECT i + 1 FROM s WHERE i < %d) "+
			"SELECT i, LEFT(REPEAT(MD5(i), %d), %d * (50 + i %% 101) DIV 100) FROM s",
			db, table, first, last, b.cfg.RowKB*1024*3/2/32+1, b.cfg.RowKB*1024)
		if _, err := b.SrcDB.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return b.SrcDB.QueryRowContext(ctx, "SELECT SUM(LENGTH(b)) FROM "+db+"."+table).Scan(&b.bytes)
}

// sample is one method's run.
type sample struct {
	Name  string  `json:"name"`
	WallS float64 `json:"wall_s"`
	MBPS  float64 `json:"mib_per_s"`
	// Peak RSS in MiB of each role during the method (0 for the baseline).
	StreamerMB    float64   `json:"streamer_peak_rss_mib"`
	AppliersMB    []float64 `json:"applier_peak_rss_mib"`
	CoordinatorMB float64   `json:"coordinator_peak_rss_mib"`
}

// maxApplierMB is the highest applier peak of the method.
func (s sample) maxApplierMB() float64 {
	m := 0.0
	for _, v := range s.AppliersMB {
		m = max(m, v)
	}
	return m
}

func (b *bench) runAll(ctx context.Context) (*report, error) {
	rep := &report{Header: benchkit.NewHeader(b.Version), Flags: b.cfg, Rows: b.rows, MiB: float64(b.bytes) / (1 << 20)}
	progress("baseline: LOAD DATA INFILE into the target")
	base, err := b.loadData(ctx)
	if err != nil {
		return nil, fmt.Errorf("LOAD DATA: %w", err)
	}
	progress("  %.2f s", base.WallS)
	rep.Methods = append(rep.Methods, base)
	for _, m := range []struct {
		name  string
		split bool
	}{{"1→1 move", false}, {"1→4 split", true}} {
		progress("rowlift: %s", m.name)
		s, err := b.copy(ctx, m.name, m.split)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.name, err)
		}
		progress("  %.2f s, peak RSS streamer %.0f MiB, appliers %.0f MiB at most, coordinator %.0f MiB",
			s.WallS, s.StreamerMB, s.maxApplierMB(), s.CoordinatorMB)
		rep.Methods = append(rep.Methods, s)
	}
	rep.LogProblems, err = b.procs.LogProblems()
	return rep, err
}

// loadData dumps the source table to a file (untimed) and times the target's
// LOAD DATA INFILE of it into an empty table.
func (b *bench) loadData(ctx context.Context) (sample, error) {
	dump := filepath.Join(b.tmp, "blobs.tsv")
	if _, err := b.SrcDB.ExecContext(ctx, "SELECT id, b INTO OUTFILE '"+dump+"' FROM "+db+"."+table+" ORDER BY id"); err != nil {
		return sample{}, fmt.Errorf("dump the source table: %w", err)
	}
	defer os.Remove(dump)
	for _, q := range []string{"DROP DATABASE IF EXISTS " + db, "CREATE DATABASE " + db, createTable} {
		if _, err := b.TgtDB.ExecContext(ctx, q); err != nil {
			return sample{}, err
		}
	}
	if err := benchkit.Quiesce(ctx, 0, b.SrcDB, b.TgtDB); err != nil {
		return sample{}, err
	}
	t0 := time.Now()
	if _, err := b.TgtDB.ExecContext(ctx, "LOAD DATA INFILE '"+dump+"' INTO TABLE "+db+"."+table); err != nil {
		return sample{}, err
	}
	s := sample{Name: "LOAD DATA (target)", WallS: time.Since(t0).Seconds()}
	s.MBPS = float64(b.bytes) / (1 << 20) / s.WallS
	if err := b.check(ctx, []*sql.DB{b.TgtDB}); err != nil {
		return s, err
	}
	_, err := b.TgtDB.ExecContext(ctx, "DROP DATABASE "+db)
	return s, err
}

// copy runs one workflow through the coordinator from StartWorkflow until
// every target's copy is done, with the roles' peak RSS reset at its start.
func (b *bench) copy(ctx context.Context, name string, split bool) (s sample, err error) {
	targets := []int{0}
	if split {
		targets = []int{1, 2, 3, 4}
	}
	ranges, err := keyrange.Even(shards)
	if err != nil {
		return s, err
	}
	spec := &rowliftv1.WorkflowSpec{
		Name:           map[bool]string{false: "move", true: "split"}[split],
		SourceDatabase: db,
		Sources:        []*rowliftv1.SourceShard{{Name: "main", StreamerAddress: b.StreamerAddr}},
		Tables:         []*rowliftv1.TableSpec{{Name: table}},
		Options:        &rowliftv1.WorkflowOptions{},
	}
	var dbs []*sql.DB
	for i, t := range targets {
		ts := &rowliftv1.TargetShard{Name: benchkit.TargetName(t)}
		if split {
			ts.KeyRange = ranges[i].String()
		}
		spec.Targets = append(spec.Targets, ts)
		dbs = append(dbs, b.db(t))
	}
	if split {
		spec.Tables[0].ShardingColumn, spec.Tables[0].ShardingFunction = "id", "hash"
	}
	if err := benchkit.Quiesce(ctx, 0, append(dbs, b.SrcDB)...); err != nil {
		return s, err
	}
	if _, err := b.Control.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: spec}); err != nil {
		return s, fmt.Errorf("create workflow: %s", status.Convert(err).Message())
	}
	defer func() {
		if _, derr := b.Control.DeleteWorkflow(context.WithoutCancel(ctx), &rowliftv1.WorkflowRef{Name: spec.Name}); derr != nil {
			err = errors.Join(err, fmt.Errorf("delete workflow: %s", status.Convert(derr).Message()))
		}
		for _, d := range dbs {
			if _, derr := d.ExecContext(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+db); derr != nil {
				err = errors.Join(err, derr)
			}
		}
	}()
	for _, p := range b.procs.All() {
		if err := p.ResetPeakRSS(); err != nil {
			return s, err
		}
	}
	t0 := time.Now()
	if _, err := b.Control.StartWorkflow(ctx, &rowliftv1.WorkflowRef{Name: spec.Name}); err != nil {
		return s, fmt.Errorf("start workflow: %s", status.Convert(err).Message())
	}
	wctx, cancel := context.WithTimeout(ctx, copyTimeout)
	defer cancel()
	for i, t := range targets {
		store, err := state.Open(ctx, dbs[i])
		if err != nil {
			return s, err
		}
		if err := benchkit.WaitCopied(wctx, store, spec.Name, b.Streamer, b.Appliers[t]); err != nil {
			return s, fmt.Errorf("target %s: %w", benchkit.TargetName(t), err)
		}
	}
	s = sample{Name: "rowlift " + name, WallS: time.Since(t0).Seconds()}
	s.MBPS = float64(b.bytes) / (1 << 20) / s.WallS
	mb := func(p *benchkit.Proc) (float64, error) {
		n, err := p.PeakRSS()
		return float64(n) / (1 << 20), err
	}
	if s.StreamerMB, err = mb(b.Streamer); err != nil {
		return s, err
	}
	for _, t := range targets {
		v, err := mb(b.Appliers[t])
		if err != nil {
			return s, err
		}
		s.AppliersMB = append(s.AppliersMB, v)
	}
	if s.CoordinatorMB, err = mb(b.Coordinator); err != nil {
		return s, err
	}
	return s, b.check(ctx, dbs)
}

// db is the pool of the i-th target server.
func (b *bench) db(i int) *sql.DB {
	if i == 0 {
		return b.TgtDB
	}
	return b.ExtraDBs[i-1]
}

// check compares the rows and bytes the targets hold in all with the source's.
func (b *bench) check(ctx context.Context, dbs []*sql.DB) error {
	var rows, bytes int64
	for _, d := range dbs {
		var n, sz sql.NullInt64
		if err := d.QueryRowContext(ctx, "SELECT COUNT(*), SUM(LENGTH(b)) FROM "+db+"."+table).Scan(&n, &sz); err != nil {
			return fmt.Errorf("check: %w", err)
		}
		rows, bytes = rows+n.Int64, bytes+sz.Int64
	}
	if rows != b.rows || bytes != b.bytes {
		return fmt.Errorf("check: the targets hold %d rows of %d bytes, the source %d of %d", rows, bytes, b.rows, b.bytes)
	}
	return nil
}

func (b *bench) close() {
	benchkit.Teardown(b.Cluster, &b.procs, &b.Servers, b.tmp, progress)
}

// report is what a run prints and stores as JSON.
type report struct {
	benchkit.Header
	Flags   config   `json:"flags"`
	Rows    int64    `json:"rows"`
	MiB     float64  `json:"mib"`
	Methods []sample `json:"methods"`
	// LogProblems are the warning and error lines of the rowlift logs, by process.
	LogProblems map[string][]string `json:"log_problems,omitempty"`
}

func (r *report) print(w io.Writer) {
	r.Header.Print(w)
	fmt.Fprintf(w, "rows=%d of %d KiB on average, %.0f MiB  default chunk settings  flush=%d  %s\n",
		r.Rows, r.Flags.RowKB, r.MiB, r.Flags.Flush, r.Flags.Settings())
	fmt.Fprintf(w, "\n%-22s %8s %8s %8s %18s %18s %18s\n", "method", "wall s", "MiB/s", "/ base", "streamer peak MiB", "applier peak MiB", "coordinator MiB")
	base := r.Methods[0].WallS
	for _, s := range r.Methods {
		if s.StreamerMB == 0 {
			fmt.Fprintf(w, "%-22s %8.2f %8.1f %8.2f %18s %18s %18s\n", s.Name, s.WallS, s.MBPS, s.WallS/base, "-", "-", "-")
			continue
		}
		fmt.Fprintf(w, "%-22s %8.2f %8.1f %8.2f %18.0f %18.0f %18.0f\n", s.Name, s.WallS, s.MBPS, s.WallS/base,
			s.StreamerMB, s.maxApplierMB(), s.CoordinatorMB)
	}
	fmt.Fprintln(w, "wall: LOAD DATA INFILE of a dump of the same rows; rowlift from StartWorkflow until every target's copy is done")
	fmt.Fprintln(w, "peak: VmHWM of each process during that method alone (the split's applier column is the largest of four)")
	benchkit.PrintLogProblems(w, r.LogProblems)
	fmt.Fprintln(w, "results written to", r.Flags.Out)
}
