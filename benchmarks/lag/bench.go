package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/sandbox"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

const (
	// db holds both tables on the source; workflows keep its name on the target.
	db = "bench"
	// eventsDDL is the table the load writes, in the database named by its %s.
	eventsDDL = `CREATE TABLE %s.events (
		id BIGINT AUTO_INCREMENT PRIMARY KEY,
		created_us BIGINT NOT NULL,
		payload VARCHAR(100)
	) ENGINE=InnoDB`
	// lagWorkflow replays bench.events for the whole run.
	lagWorkflow = "lag"
	waitTimeout = 5 * time.Minute
)

// bench is one run: the two servers, client pools on them, the rowlift processes
// between them, and the commit times of every row the load wrote.
type bench struct {
	cfg config
	benchkit.Servers
	store             *state.Store
	streamer, applier *benchkit.Proc
	streamerAddr      string
	tmp               string // rowlift binary and process logs
	clkTck            float64
	commits           commits
}

// setup builds rowlift, starts both servers, creates and seeds the source tables,
// starts the streamer and applier, and starts the workflow of bench.events.
func setup(ctx context.Context, cfg config) (b *bench, err error) {
	b = &bench{cfg: cfg, clkTck: benchkit.ClockTicks()}
	var bin string
	if b.tmp, bin, err = benchkit.TempBuild(ctx, "lag", progress); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	if err := b.startServers(ctx); err != nil {
		return b, err
	}
	if err := b.seed(ctx); err != nil {
		return b, err
	}
	port, err := sandbox.FreePort()
	if err != nil {
		return b, err
	}
	b.streamerAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if b.streamer, b.applier, err = benchkit.StartRoles(ctx, bin, b.tmp, b.streamerAddr, b.Source.DSN(""), b.Target.DSN(""), nil); err != nil {
		return b, err
	}
	if err := b.startLagWorkflow(ctx); err != nil {
		return b, fmt.Errorf("%w\n%s\n%s", err, b.streamer.LogTail(), b.applier.LogTail())
	}
	return b, nil
}

func (b *bench) startServers(ctx context.Context) error {
	// One round trip per statement, as the applier's own statements take.
	if err := b.Start(ctx, b.cfg.Options(), "?interpolateParams=true", progress); err != nil {
		return err
	}
	b.SrcDB.SetMaxIdleConns(b.cfg.Writers + 2)
	var err error
	b.store, err = state.Open(ctx, b.TgtDB)
	return err
}

// seed loads the table to copy, unlogged, and creates the empty events table.
func (b *bench) seed(ctx context.Context) error {
	start := time.Now()
	if err := benchkit.SeedStress(ctx, b.SrcDB, db, b.cfg.Rows); err != nil {
		return fmt.Errorf("seed source: %w", err)
	}
	if _, err := b.SrcDB.ExecContext(ctx, fmt.Sprintf(eventsDDL, db)); err != nil {
		return fmt.Errorf("create %s.events: %w", db, err)
	}
	progress("loaded %d rows into the source in %.1f s", b.cfg.Rows, time.Since(start).Seconds())
	return nil
}

// startLagWorkflow starts the workflow of bench.events and waits until its (empty)
// copy is done and it replays the binlog.
func (b *bench) startLagWorkflow(ctx context.Context) error {
	if err := b.store.CreateWorkflow(ctx, b.spec(lagWorkflow, "events"), "main"); err != nil {
		return err
	}
	if err := b.store.SetState(ctx, lagWorkflow, state.Copying, ""); err != nil {
		return err
	}
	return b.poll(ctx, "workflow "+lagWorkflow+" to run", func() (bool, error) {
		w, err := b.lagState(ctx)
		return err == nil && w.State == state.Running, err
	})
}

func (b *bench) spec(name, table string) *rowliftv1.WorkflowSpec {
	return &rowliftv1.WorkflowSpec{
		Name:           name,
		SourceDatabase: db,
		Sources:        []*rowliftv1.SourceShard{{Name: "main", StreamerAddress: b.streamerAddr}},
		Targets:        []*rowliftv1.TargetShard{{Name: "main"}},
		Tables:         []*rowliftv1.TableSpec{{Name: table}},
		Options:        &rowliftv1.WorkflowOptions{},
	}
}

// lagState returns the workflow of bench.events, failing when it is in state error.
func (b *bench) lagState(ctx context.Context) (*state.Workflow, error) {
	w, err := b.store.Workflow(ctx, lagWorkflow)
	if err == nil && w.State == state.Error {
		err = fmt.Errorf("workflow %s failed: %s", lagWorkflow, w.Message)
	}
	return w, err
}

// waitCaughtUp waits until the target has applied everything the source has
// logged, then checks that bench.events holds the same number of rows on both.
func (b *bench) waitCaughtUp(ctx context.Context) error {
	pos, err := dbconn.Position(ctx, b.SrcDB)
	if err != nil {
		return fmt.Errorf("source position: %w", err)
	}
	err = b.poll(ctx, "the target to apply up to "+pos, func() (bool, error) {
		if _, err := b.lagState(ctx); err != nil {
			return false, err
		}
		streams, err := b.store.Streams(ctx, lagWorkflow)
		if err != nil || len(streams) == 0 {
			return false, err
		}
		return gtid.Covers(streams[0].Position, pos)
	})
	if err != nil {
		return err
	}
	var rows int64
	if err := b.SrcDB.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+db+".events").Scan(&rows); err != nil {
		return fmt.Errorf("count source events: %w", err)
	}
	return benchkit.CheckCount(ctx, b.TgtDB, db+".events", rows)
}

// poll checks cond every 50ms until it holds, fails, or waitTimeout passes.
func (b *bench) poll(ctx context.Context, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(waitTimeout)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", waitTimeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// logProblems returns the warning and error lines of the streamer and applier
// logs, by role.
func (b *bench) logProblems() (map[string][]string, error) {
	out := map[string][]string{}
	for _, p := range []*benchkit.Proc{b.streamer, b.applier} {
		lines, err := p.LogProblems()
		if err != nil {
			return nil, err
		}
		if len(lines) > 0 {
			out[p.Role] = lines
		}
	}
	return out, nil
}

// close stops the rowlift processes and the servers and removes the temp dir.
func (b *bench) close() {
	for _, p := range []*benchkit.Proc{b.streamer, b.applier} {
		if p != nil {
			if err := p.Stop(); err != nil {
				progress("%v", err)
			}
		}
	}
	b.ClosePools()
	b.Remove(progress)
	os.RemoveAll(b.tmp)
}

func (b *bench) cpuNow() (benchkit.CPUUse, error) {
	return benchkit.PairCPU(b.streamer, b.applier, b.Source, b.Target, b.clkTck)
}
