package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
	"github.com/rowlift/rowlift/internal/mysqljson"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/verify"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

const (
	// db holds the table on the source and, under the same name, on the target.
	db    = "jsonbench"
	table = "docs"
	// createTable is the table on the source and on the baseline's target.
	createTable = "CREATE TABLE " + db + "." + table + " (id BIGINT PRIMARY KEY, j JSON NOT NULL)"
	copyTimeout = 60 * time.Minute
)

// The methods, in the order each round runs them.
const (
	methodLoad  = "LOAD DATA (target)"
	methodText  = "rowlift text (json_as_text)"
	methodTyped = "rowlift typed (default)"
)

// bench is one run: the servers, the rowlift processes and a Control API
// client of the coordinator.
type bench struct {
	cfg config
	benchkit.Servers
	tmp       string
	clkTck    float64
	rows      int64
	items     int   // line items per document (docExpr)
	bytes     int64 // SUM(LENGTH(CAST(j AS CHAR))) on the source
	typedDocs int64 // documents with typed scalars on the source
	// zeroDocs are the typed documents with a DECIMAL whose text ends in 0.
	zeroDocs int64
	dump     string
	// debugAddrs are the roles' --debug-listen addresses by role, with -profile.
	debugAddrs map[string]string
	*benchkit.Cluster
	procs benchkit.Procs
}

func setup(ctx context.Context, cfg config) (b *bench, err error) {
	b = &bench{cfg: cfg, rows: cfg.Rows, clkTck: benchkit.ClockTicks()}
	var bin string
	if b.tmp, bin, err = benchkit.TempBuild(ctx, "json", progress); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	if err := b.Start(ctx, cfg.Options(), "", progress); err != nil {
		return b, err
	}
	start := time.Now()
	if err := b.seed(ctx); err != nil {
		return b, fmt.Errorf("seed source: %w", err)
	}
	progress("loaded %d rows (%d typed), %d line items a document, %.0f B of text on average, into the source in %.1f s",
		b.rows, b.typedDocs, b.items, float64(b.bytes)/float64(b.rows), time.Since(start).Seconds())
	// The baseline's file: the documents' text as SELECT prints it, which is
	// what LOAD DATA parses back (untimed).
	b.dump = filepath.Join(b.tmp, "docs.tsv")
	if _, err := b.SrcDB.ExecContext(ctx, "SELECT id, j INTO OUTFILE '"+b.dump+"' CHARACTER SET utf8mb4 FROM "+db+"."+table+" ORDER BY id"); err != nil {
		return b, fmt.Errorf("dump the source table: %w", err)
	}
	extra, err := b.debugArgs()
	if err != nil {
		return b, err
	}
	if b.Cluster, err = benchkit.StartClusterArgs(ctx, bin, b.tmp, b.Source.DSN(""), []*sandbox.Server{b.Target}, &b.procs, extra); err != nil {
		return b, fmt.Errorf("%w\n%s", err, b.procs.LogTails())
	}
	return b, nil
}

// sample is one method's run.
type sample struct {
	Method   string  `json:"method"`
	Run      int     `json:"run"`
	WallS    float64 `json:"wall_s"`
	RowsPerS float64 `json:"rows_per_s"`
	// CPU seconds each process used during the method (the roles' are 0 for
	// the baseline).
	SourceCPUS   float64 `json:"source_server_cpu_s"`
	TargetCPUS   float64 `json:"target_server_cpu_s"`
	StreamerCPUS float64 `json:"streamer_cpu_s"`
	ApplierCPUS  float64 `json:"applier_cpu_s"`
}

// selectSample is one round's timing of the source's whole-table SELECT.
type selectSample struct {
	Run         int     `json:"run"`
	PlainS      float64 `json:"plain_s"`
	TypeMapS    float64 `json:"type_map_s"`
	PlainCPUS   float64 `json:"plain_source_cpu_s"`
	TypeMapCPUS float64 `json:"type_map_source_cpu_s"`
	// TypeMapBytes is the bytes of type maps the SELECT returned.
	TypeMapBytes int64 `json:"type_map_bytes"`
}

func (b *bench) runAll(ctx context.Context) (*report, error) {
	rep := &report{Header: benchkit.NewHeader(b.Version), Flags: b.cfg, Rows: b.rows, Items: b.items,
		AvgDocBytes: float64(b.bytes) / float64(b.rows), TypedDocs: b.typedDocs, ZeroDocs: b.zeroDocs, TextTypeDiffs: -1}
	for run := 1; run <= b.cfg.Runs; run++ {
		for _, m := range []string{methodLoad, methodText, methodTyped} {
			progress("round %d: %s", run, m)
			var s sample
			var err error
			if m == methodLoad {
				s, err = b.loadData(ctx)
			} else {
				s, err = b.copy(ctx, m == methodText, run == 1, rep)
			}
			if err != nil {
				return nil, fmt.Errorf("round %d: %s: %w", run, m, err)
			}
			s.Method, s.Run = m, run
			progress("  %.2f s (CPU s: source %.1f, target %.1f, streamer %.1f, applier %.1f)",
				s.WallS, s.SourceCPUS, s.TargetCPUS, s.StreamerCPUS, s.ApplierCPUS)
			rep.Samples = append(rep.Samples, s)
		}
		progress("round %d: source SELECT with and without the type map", run)
		sel, err := b.selects(ctx)
		if err != nil {
			return nil, fmt.Errorf("round %d: source SELECT: %w", run, err)
		}
		sel.Run = run
		progress("  %.2f s plain, %.2f s with the type map", sel.PlainS, sel.TypeMapS)
		rep.Selects = append(rep.Selects, sel)
	}
	rep.summarize()
	var err error
	rep.LogProblems, err = b.procs.LogProblems()
	return rep, err
}

// meter is the CPU of the servers and the roles at a method's start.
type meter struct {
	b     *bench
	t0    time.Time
	cpu0  [4]float64
	roles bool
}

func (b *bench) startMeter(roles bool) (*meter, error) {
	m := &meter{b: b, roles: roles}
	var err error
	if m.cpu0, err = b.cpu(roles); err != nil {
		return nil, err
	}
	m.t0 = time.Now()
	return m, nil
}

// stop is the sample of the method from startMeter until now.
func (m *meter) stop() (sample, error) {
	wall := time.Since(m.t0).Seconds()
	cpu, err := m.b.cpu(m.roles)
	if err != nil {
		return sample{}, err
	}
	return sample{WallS: wall, RowsPerS: float64(m.b.rows) / wall, SourceCPUS: cpu[0] - m.cpu0[0],
		TargetCPUS: cpu[1] - m.cpu0[1], StreamerCPUS: cpu[2] - m.cpu0[2], ApplierCPUS: cpu[3] - m.cpu0[3]}, nil
}

// cpu is the CPU seconds used so far by the source and target servers and,
// with roles, by the streamer and the applier.
func (b *bench) cpu(roles bool) (out [4]float64, err error) {
	if out[0], err = benchkit.ServerCPU(b.Source, b.clkTck); err != nil {
		return out, err
	}
	if out[1], err = benchkit.ServerCPU(b.Target, b.clkTck); err != nil {
		return out, err
	}
	if roles {
		if out[2], err = b.Streamer.CPU(b.clkTck); err != nil {
			return out, err
		}
		out[3], err = b.applier().CPU(b.clkTck)
	}
	return out, err
}

// applier is the target's applier.
func (b *bench) applier() *benchkit.Proc { return b.Appliers[0] }

// loadData times the target's LOAD DATA INFILE of the dump into an empty
// table of the source's shape.
func (b *bench) loadData(ctx context.Context) (s sample, err error) {
	for _, q := range []string{"DROP DATABASE IF EXISTS " + db, "CREATE DATABASE " + db, createTable} {
		if _, err := b.TgtDB.ExecContext(ctx, q); err != nil {
			return s, err
		}
	}
	defer func() {
		if _, derr := b.TgtDB.ExecContext(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+db); derr != nil {
			err = errors.Join(err, derr)
		}
	}()
	if err := benchkit.Quiesce(ctx, 0, b.SrcDB, b.TgtDB); err != nil {
		return s, err
	}
	m, err := b.startMeter(false)
	if err != nil {
		return s, err
	}
	if _, err := b.TgtDB.ExecContext(ctx, "LOAD DATA INFILE '"+b.dump+"' INTO TABLE "+db+"."+table+" CHARACTER SET utf8mb4"); err != nil {
		return s, err
	}
	if s, err = m.stop(); err != nil {
		return s, err
	}
	return s, b.checkCount(ctx)
}

// copy runs one workflow through the coordinator from StartWorkflow until
// the target's copy is done, then verifies the target: by text for the text
// path (and, in the first round, counts the documents that differ by type),
// by type for the typed one. With -profile the first round's copy is
// profiled.
func (b *bench) copy(ctx context.Context, asText, first bool, rep *report) (s sample, err error) {
	spec := &rowliftv1.WorkflowSpec{
		Name:           map[bool]string{false: "typed", true: "text"}[asText],
		SourceDatabase: db,
		Sources:        []*rowliftv1.SourceShard{{Name: "main", StreamerAddress: b.StreamerAddr}},
		Targets:        []*rowliftv1.TargetShard{{Name: benchkit.TargetName(0)}},
		Tables:         []*rowliftv1.TableSpec{{Name: table}},
		Options:        &rowliftv1.WorkflowOptions{JsonAsText: asText},
	}
	if _, err := b.TgtDB.ExecContext(ctx, "DROP DATABASE IF EXISTS "+db); err != nil {
		return s, err
	}
	if err := benchkit.Quiesce(ctx, 0, b.SrcDB, b.TgtDB); err != nil {
		return s, err
	}
	if _, err := b.Control.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: spec}); err != nil {
		return s, fmt.Errorf("create workflow: %s", status.Convert(err).Message())
	}
	defer func() {
		if _, derr := b.Control.DeleteWorkflow(context.WithoutCancel(ctx), &rowliftv1.WorkflowRef{Name: spec.Name}); derr != nil {
			err = errors.Join(err, fmt.Errorf("delete workflow: %s", status.Convert(derr).Message()))
		}
		if _, derr := b.TgtDB.ExecContext(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+db); derr != nil {
			err = errors.Join(err, derr)
		}
	}()
	store, err := state.Open(ctx, b.TgtDB)
	if err != nil {
		return s, err
	}
	m, err := b.startMeter(true)
	if err != nil {
		return s, err
	}
	if _, err := b.Control.StartWorkflow(ctx, &rowliftv1.WorkflowRef{Name: spec.Name}); err != nil {
		return s, fmt.Errorf("start workflow: %s", status.Convert(err).Message())
	}
	profiled := func() error { return nil }
	if first { // the first round
		profiled = b.profile(ctx, spec.Name)
	}
	if err := b.waitCopied(ctx, store, spec.Name); err != nil {
		return s, errors.Join(err, profiled())
	}
	if s, err = m.stop(); err != nil {
		return s, err
	}
	if err := profiled(); err != nil {
		return s, err
	}
	if err := b.checkCount(ctx); err != nil {
		return s, err
	}
	start := time.Now()
	res, err := verify.Table(ctx, b.SrcDB, b.TgtDB, db, db, table, verify.Options{JSONAsText: asText})
	if err != nil {
		return s, err
	}
	// The text path writes the source's text into a MySQL JSON column,
	// which parses a DECIMAL's text as a DOUBLE: 0.10 comes back as 0.1, so
	// the documents with such an amount differ even by text, and only they.
	switch {
	case asText && res.Missing == 0 && res.Extra == 0 && res.Different == b.zeroDocs:
		rep.TextPathTextDiffs = res.Different
	case !res.Identical():
		return s, fmt.Errorf("verify: %s%s", res, b.example(ctx, res))
	}
	progress("  verified by %s in %.1f s (%d documents differ)", map[bool]string{false: "type", true: "text"}[asText],
		time.Since(start).Seconds(), res.Different)
	if asText && first {
		res, err := verify.Table(ctx, b.SrcDB, b.TgtDB, db, db, table, verify.Options{MaxReported: 1})
		if err != nil {
			return s, err
		}
		rep.TextTypeDiffs = res.Different
		progress("  %d documents differ by type after the text path (%d hold typed scalars)", res.Different, b.typedDocs)
	}
	return s, nil
}

// waitCopied is benchkit.WaitCopied, which fails on a workflow in state
// error, that also fails when a role logs a new warning or error: a stream
// that fails is retried with backoff and never puts the workflow in error,
// and a copy that cannot succeed would otherwise be waited for until
// copyTimeout.
func (b *bench) waitCopied(ctx context.Context, store *state.Store, workflow string) error {
	before, err := b.procs.LogProblems()
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeoutCause(ctx, copyTimeout, fmt.Errorf("copy not done within %s", copyTimeout))
	defer cancel()
	wctx, cancelCause := context.WithCancelCause(wctx)
	defer cancelCause(nil)
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-tick.C:
			}
			now, err := b.procs.LogProblems()
			if err != nil {
				cancelCause(err)
				return
			}
			for proc, lines := range now {
				if len(lines) > len(before[proc]) {
					cancelCause(fmt.Errorf("rowlift %s logged during the copy: %s", proc, lines[len(before[proc])]))
					return
				}
			}
		}
	}()
	if err := benchkit.WaitCopied(wctx, store, workflow, b.Streamer, b.applier()); err != nil {
		if cause := context.Cause(wctx); cause != nil && ctx.Err() == nil {
			return cause
		}
		return err
	}
	return nil
}

// example is the source's and the target's text of the first document res
// found different, for an error.
func (b *bench) example(ctx context.Context, res *verify.Result) string {
	var id int64
	if len(res.Examples) == 0 {
		return ""
	}
	if _, err := fmt.Sscanf(res.Examples[0], "different: (id=%d)", &id); err != nil {
		return ""
	}
	var src, tgt string
	q := "SELECT CAST(j AS CHAR) FROM " + db + "." + table + " WHERE id = ?"
	if b.SrcDB.QueryRowContext(ctx, q, id).Scan(&src) != nil || b.TgtDB.QueryRowContext(ctx, q, id).Scan(&tgt) != nil {
		return ""
	}
	return fmt.Sprintf("\nid %d on the source: %s\nid %d on the target: %s", id, src, id, tgt)
}

// checkCount fails unless the target holds as many rows as the source.
func (b *bench) checkCount(ctx context.Context) error {
	var n int64
	if err := b.TgtDB.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+db+"."+table).Scan(&n); err != nil {
		return fmt.Errorf("check: %w", err)
	}
	if n != b.rows {
		return fmt.Errorf("check: the target holds %d rows, the source %d", n, b.rows)
	}
	return nil
}

// selects times the source's SELECT of the whole table, drained here,
// without and with the type map.
func (b *bench) selects(ctx context.Context) (sel selectSample, err error) {
	if err := benchkit.Quiesce(ctx, 0, b.SrcDB, b.TgtDB); err != nil {
		return sel, err
	}
	from := " FROM " + db + "." + table
	var mapBytes int64
	sel.PlainS, sel.PlainCPUS, _, err = b.drain(ctx, "SELECT id, j"+from)
	if err != nil {
		return sel, err
	}
	sel.TypeMapS, sel.TypeMapCPUS, mapBytes, err = b.drain(ctx, "SELECT id, j, "+mysqljson.TypeMapExpr("`j`")+from)
	sel.TypeMapBytes = mapBytes
	return sel, err
}

// drain runs q and reads every row, returning the wall and source server CPU
// seconds it took and the bytes of its third column (if any).
func (b *bench) drain(ctx context.Context, q string) (wall, cpu float64, third int64, err error) {
	cpu0, err := benchkit.ServerCPU(b.Source, b.clkTck)
	if err != nil {
		return 0, 0, 0, err
	}
	t0 := time.Now()
	rows, err := b.SrcDB.QueryContext(ctx, q)
	if err != nil {
		return 0, 0, 0, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, 0, 0, err
	}
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	var n int64
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return 0, 0, 0, err
		}
		if len(vals) > 2 {
			third += int64(len(vals[2]))
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return 0, 0, 0, err
	}
	wall = time.Since(t0).Seconds()
	cpu1, err := benchkit.ServerCPU(b.Source, b.clkTck)
	if err != nil {
		return 0, 0, 0, err
	}
	if n != b.rows {
		return 0, 0, 0, fmt.Errorf("%q read %d rows of %d", q, n, b.rows)
	}
	return wall, cpu1 - cpu0, third, nil
}

func (b *bench) close() {
	benchkit.Teardown(b.Cluster, &b.procs, &b.Servers, b.tmp, progress)
}
