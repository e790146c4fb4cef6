package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
	"github.com/rowlift/rowlift/internal/controlclient"
	"github.com/rowlift/rowlift/internal/grpcopt"
	"github.com/rowlift/rowlift/internal/sandbox"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

const (
	// db holds the moved table on both servers.
	db = "bench"
	// workflow moves bench.stress_test_pk; its reverse is workflow + "_reverse".
	workflow = "cutover"
	// Target names the coordinator knows the servers by: the workflow's target
	// is "main", and "origin" is the source server, where the reverse workflow
	// writes.
	targetName, originName = "main", "origin"
	// waitTimeout bounds the waits for the copy and for the final catch-up.
	waitTimeout = 5 * time.Minute
)

// bench is one run: the two servers, client pools on them, the rowlift
// processes, and a Control API client of the coordinator.
type bench struct {
	cfg config
	benchkit.Servers
	// tgtStore reads the forward workflow's positions on the target.
	tgtStore *state.Store
	// procs are named in the report: "forward streamer", ...
	procs   benchkit.Procs
	conn    *grpc.ClientConn
	control rowliftv1.ControlClient
	spec    *rowliftv1.WorkflowSpec
	tmp     string // rowlift binary and process logs
	// spans receives the forward applier's spans: its verify chunks' durations.
	spans *benchkit.SpanReceiver
	// copied is how long the workflow took from its start until its copy
	// was done and it ran.
	copied time.Duration
}

// setup builds rowlift, starts both servers, seeds the source, starts the five
// rowlift processes, and creates and starts the workflow through the
// coordinator.
func setup(ctx context.Context, cfg config) (b *bench, err error) {
	b = &bench{cfg: cfg}
	var bin string
	if b.tmp, bin, err = benchkit.TempBuild(ctx, "cutover", progress); err != nil {
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
	start := time.Now()
	if err := benchkit.SeedStress(ctx, b.SrcDB, db, cfg.Rows); err != nil {
		return b, fmt.Errorf("seed source: %w", err)
	}
	progress("loaded %d rows into the source in %.1f s", cfg.Rows, time.Since(start).Seconds())
	if err := b.startProcs(ctx, bin); err != nil {
		return b, err
	}
	if err := b.startWorkflow(ctx); err != nil {
		return b, fmt.Errorf("%w\n%s", err, b.procs.LogTails())
	}
	return b, nil
}

func (b *bench) startServers(ctx context.Context) error {
	// One round trip per statement, as an application's driver would take.
	if err := b.Start(ctx, b.cfg.Options(), "?interpolateParams=true", progress); err != nil {
		return err
	}
	for _, pool := range []*sql.DB{b.SrcDB, b.TgtDB} {
		pool.SetMaxIdleConns(b.cfg.Writers + 2)
	}
	var err error
	if b.tgtStore, err = state.Open(ctx, b.TgtDB); err != nil {
		return fmt.Errorf("target state: %w", err)
	}
	return nil
}

// startProcs starts a streamer and an applier next to each server (each pair
// logging in a directory of its own) and a coordinator that knows both, and
// connects to the coordinator.
func (b *bench) startProcs(ctx context.Context, bin string) error {
	addrs, err := benchkit.FreeAddrs(3)
	if err != nil {
		return err
	}
	fwdAddr, revAddr, coordAddr := addrs[0], addrs[1], addrs[2]
	if b.spans, err = benchkit.StartSpanReceiver(); err != nil {
		return err
	}
	for _, pair := range []struct {
		name     string // and the directory of its logs
		addr     string
		from, to *sandbox.Server
	}{
		{"forward", fwdAddr, b.Source, b.Target},
		{"reverse", revAddr, b.Target, b.Source},
	} {
		dir := filepath.Join(b.tmp, pair.name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fmt.Errorf("log dir: %w", err)
		}
		st, err := benchkit.StartStreamer(ctx, bin, dir, pair.addr, pair.from.DSN(""))
		if err != nil {
			return fmt.Errorf("%s streamer: %w", pair.name, err)
		}
		b.procs.Add(pair.name+" streamer", st)
		// The forward applier verifies; its spans time each verify chunk.
		var env []string
		if pair.name == "forward" {
			env = b.spans.Env()
		}
		ap, err := benchkit.StartProcEnv(bin, dir, "applier", env, "--target-dsn", pair.to.DSN(""), "--poll-interval", benchkit.PollInterval.String())
		if err != nil {
			return fmt.Errorf("%s applier: %w", pair.name, err)
		}
		b.procs.Add(pair.name+" applier", ap)
	}
	co, err := benchkit.StartCoordinator(ctx, bin, b.tmp, coordAddr, map[string]string{targetName: b.Target.DSN(""), originName: b.Source.DSN("")})
	if err != nil {
		return err
	}
	b.procs.Add("coordinator", co)
	if b.conn, err = grpc.NewClient(coordAddr, grpcopt.DialOptions(nil)...); err != nil {
		return fmt.Errorf("coordinator client: %w", err)
	}
	b.control = rowliftv1.NewControlClient(b.conn)
	b.spec = &rowliftv1.WorkflowSpec{
		Name:           workflow,
		SourceDatabase: db,
		Sources:        []*rowliftv1.SourceShard{{Name: "main", StreamerAddress: fwdAddr, ReverseTarget: originName}},
		Targets:        []*rowliftv1.TargetShard{{Name: targetName, ReverseStreamerAddress: revAddr}},
		Tables:         []*rowliftv1.TableSpec{{Name: benchkit.StressTable}},
		Options:        &rowliftv1.WorkflowOptions{},
	}
	return nil
}

// startWorkflow creates and starts the workflow through the coordinator and
// waits until its copy is done and it replays the binlog, timing that from
// the StartWorkflow call (to within WaitRunning's poll).
func (b *bench) startWorkflow(ctx context.Context) error {
	if _, err := b.control.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: b.spec}); err != nil {
		return fmt.Errorf("create workflow %s: %s", workflow, status.Convert(err).Message())
	}
	ref := &rowliftv1.WorkflowRef{Name: workflow}
	start := time.Now()
	if _, err := b.control.StartWorkflow(ctx, ref); err != nil {
		return fmt.Errorf("start workflow %s: %s", workflow, status.Convert(err).Message())
	}
	ctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	if _, err := controlclient.WaitRunning(ctx, b.control, workflow, 100*time.Millisecond, nil); err != nil {
		return err
	}
	b.copied = time.Since(start)
	progress("workflow %s copied %d rows and runs, %.1f s after its start", workflow, b.cfg.Rows, b.copied.Seconds())
	return nil
}

// close stops the rowlift processes and the servers and removes the temp dir.
func (b *bench) close() {
	if b.conn != nil {
		b.conn.Close()
	}
	if err := b.procs.Stop(); err != nil {
		progress("%v", err)
	}
	if b.spans != nil {
		b.spans.Stop()
	}
	b.ClosePools()
	b.Remove(progress)
	os.RemoveAll(b.tmp)
}
