package main

import (
	"context"
	"fmt"
	"time"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/nice"
	"github.com/rowlift/rowlift/internal/verify"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

const (
	// db holds both tables on the source; the workflow keeps its name on the
	// target.
	db = "bench"
	// heartbeatTable is the one-row table the heartbeat writer updates.
	heartbeatTable = "heartbeat"
	heartbeatDDL   = "CREATE TABLE " + db + "." + heartbeatTable + " (id INT PRIMARY KEY, ts_us BIGINT NOT NULL) ENGINE=InnoDB"
	// workflow moves both tables.
	workflow = "live"
	// seedConns load the seed at once: the seed is not what is measured.
	seedConns = 2
	// applyTimeout bounds the wait for the target to apply what the load
	// wrote after it stopped.
	applyTimeout = 5 * time.Minute
)

// tables are what the workflow moves and the run compares at the end.
var tables = []string{benchkit.SbtestTable, heartbeatTable}

// bench is one run: the two servers, client pools on them, the rowlift
// processes between them and the store of the target's _rowlift state.
type bench struct {
	cfg config
	benchkit.Servers
	store             *state.Store
	procs             benchkit.Procs
	streamer, applier *benchkit.Proc
	streamerAddr      string
	tmp               string // rowlift binary and process logs
	clkTck            float64
	// seedS is how long the seed took.
	seedS float64
}

// setup builds rowlift, starts both servers, seeds the source, and starts the
// streamer and the applier; no workflow exists yet.
func setup(ctx context.Context, cfg config) (b *bench, err error) {
	b = &bench{cfg: cfg, clkTck: benchkit.ClockTicks()}
	var bin string
	if b.tmp, bin, err = benchkit.TempBuild(ctx, "live", progress); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	opts := cfg.Options()
	// The sandbox leaves sync_binlog at the flavor's default (MariaDB's is 0):
	// both servers are as durable as a production primary.
	opts.Args = append(opts.Args, "--sync-binlog=1")
	// One round trip per statement, as sysbench's statements take.
	if err := b.Start(ctx, opts, "?interpolateParams=true", progress); err != nil {
		return b, err
	}
	b.SrcDB.SetMaxIdleConns(cfg.Threads + 4)
	if b.store, err = state.Open(ctx, b.TgtDB); err != nil {
		return b, err
	}
	if err := b.seed(ctx); err != nil {
		return b, err
	}
	addrs, err := benchkit.FreeAddrs(1)
	if err != nil {
		return b, err
	}
	b.streamerAddr = addrs[0]
	if b.streamer, b.applier, err = benchkit.StartRoles(ctx, bin, b.tmp, b.streamerAddr, b.Source.DSN(""), b.Target.DSN(""), nil); err != nil {
		return b, err
	}
	b.procs.Add("streamer", b.streamer)
	b.procs.Add("applier", b.applier)
	if n := cfg.TargetNice; n != 0 {
		if err := nice.Set(b.Target.Pid(), n); err != nil {
			return b, err
		}
		progress("the target server runs at nice %d", n)
	}
	return b, nil
}

// seed loads sbtest1 as sysbench's prepare fills it, unlogged, and creates
// the heartbeat table with its row.
func (b *bench) seed(ctx context.Context) error {
	start := time.Now()
	if err := benchkit.Sbtest(b.cfg.Rows).SeedParallel(ctx, b.SrcDB, db, b.cfg.Rows, seedConns); err != nil {
		return fmt.Errorf("seed source: %w", err)
	}
	if _, err := b.SrcDB.ExecContext(ctx, heartbeatDDL); err != nil {
		return fmt.Errorf("seed source: %w", err)
	}
	if _, err := b.SrcDB.ExecContext(ctx, "INSERT INTO "+db+"."+heartbeatTable+" (id, ts_us) VALUES (1, ?)", time.Now().UnixMicro()); err != nil {
		return fmt.Errorf("seed source: heartbeat row: %w", err)
	}
	b.seedS = time.Since(start).Seconds()
	progress("seeded %d rows of %s.%s into the source in %.1f s over %d connections", b.cfg.Rows, db, benchkit.SbtestTable, b.seedS, seedConns)
	return nil
}

// spec is the workflow moving both tables with the default options.
func (b *bench) spec() *rowliftv1.WorkflowSpec {
	spec := &rowliftv1.WorkflowSpec{
		Name:           workflow,
		SourceDatabase: db,
		Sources:        []*rowliftv1.SourceShard{{Name: "main", StreamerAddress: b.streamerAddr}},
		Targets:        []*rowliftv1.TargetShard{{Name: "main"}},
		Options:        &rowliftv1.WorkflowOptions{MaxReplayLagMs: b.cfg.MaxReplayLagMs},
	}
	for _, t := range tables {
		spec.Tables = append(spec.Tables, &rowliftv1.TableSpec{Name: t})
	}
	return spec
}

// startMove creates the workflow and starts its copy.
func (b *bench) startMove(ctx context.Context) error {
	if err := b.store.CreateWorkflow(ctx, b.spec(), "main"); err != nil {
		return err
	}
	return b.store.SetState(ctx, workflow, state.Copying, "")
}

// waitApplied waits until the target has applied everything the source has
// logged.
func (b *bench) waitApplied(ctx context.Context) error {
	pos, err := dbconn.Position(ctx, b.SrcDB)
	if err != nil {
		return fmt.Errorf("source position: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, applyTimeout)
	defer cancel()
	return benchkit.WaitApplied(ctx, b.store, workflow, pos, 50*time.Millisecond, b.streamer, b.applier)
}

// compare compares every moved table on both servers row by row and fails
// unless they are identical: a wrong move has no numbers worth reporting.
func (b *bench) compare(ctx context.Context) ([]string, error) {
	var out []string
	for _, t := range tables {
		res, err := verify.Table(ctx, b.SrcDB, b.TgtDB, db, db, t, verify.Options{})
		if err != nil {
			return nil, err
		}
		if !res.Identical() {
			return nil, fmt.Errorf("THE TARGET DIFFERS FROM THE SOURCE: %s", res)
		}
		out = append(out, res.String())
	}
	return out, nil
}

// cpuNow is the CPU seconds every process has used so far.
func (b *bench) cpuNow() (benchkit.CPUUse, error) {
	return benchkit.PairCPU(b.streamer, b.applier, b.Source, b.Target, b.clkTck)
}

// close stops the rowlift processes and the servers and removes the temp dir.
func (b *bench) close() {
	benchkit.Teardown(nil, &b.procs, &b.Servers, b.tmp, progress)
}
