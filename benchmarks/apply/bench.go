package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
	"github.com/rowlift/rowlift/internal/sandbox"
)

const (
	// setupTimeout bounds each wait that is not timed: a copy, a replica
	// replicating the seed, an IO thread fetching the backlog.
	setupTimeout = 5 * time.Minute
	// maxDirty is the dirty pages every server may keep when a timing starts:
	// purge of the last run's undo still dirties a few.
	maxDirty = 32
)

// bench is one run: the source, one server per configuration, and the streamer
// that serves every rowlift target.
type bench struct {
	cfg          config
	opts         sandbox.Options
	source       *sandbox.Server
	srcDB        *sql.DB
	bin          string // the built rowlift binary
	tmp          string // rowlift binary and process logs
	streamer     *benchkit.Proc
	streamerAddr string
	// streamerDebug is the streamer's --debug-listen address, with -profile.
	streamerDebug string
	targets       []replayer
	clkTck        float64
	version       string // SELECT VERSION() of the servers
	seedPos       string // the source's GTID position after the seed
	// slowEnd is the source's GTID position after the first -slow-k backlog
	// transactions, which the slowed targets replay.
	slowEnd string
	// backlog is each backlog transaction's statements, joined by ';'.
	backlog []string
}

// node is a configuration's target server.
type node struct {
	name string // as printed
	kind string // "rowlift", "slowed" (rowlift on a slowed target), "native" or "floor"
	key  string // short name for logs
	srv  *sandbox.Server
	db   *sql.DB
}

// replayer is one configuration: a target server of its own and the way it
// replays the backlog.
type replayer interface {
	node() *node
	// prepare brings the target to the source's seeded state and leaves it
	// stopped there.
	prepare(ctx context.Context) error
	// waitFetched waits until the target holds what its timed replay must not
	// fetch from the source.
	waitFetched(ctx context.Context, end string) error
	// replay applies the backlog up to the source position end and returns once
	// the target has committed it: what is timed.
	replay(ctx context.Context, end string) error
	// afterReplay returns the CPU seconds that replay used outside the servers
	// and the replay groups it rolled back to run again, and stops what replay
	// started; it is not timed.
	afterReplay() (float64, int64, error)
	close() error
}

// setup builds rowlift, starts the source and seeds it, starts the streamer and
// a server for every configuration.
func setup(ctx context.Context, cfg config, threads []int) (b *bench, err error) {
	b = &bench{cfg: cfg, clkTck: benchkit.ClockTicks(), opts: cfg.Options()}
	// Every commit durable on every server, binlog included: rowlift targets log
	// their writes like replicas with log_slave_updates (the sandbox's default).
	b.opts.Args = append(b.opts.Args, "--sync-binlog=1")
	if b.tmp, err = os.MkdirTemp("", "rowlift-bench-apply-"); err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	if b.bin, err = benchkit.Build(ctx, b.tmp); err != nil {
		return b, err
	}
	progress("built %s", b.bin)
	if b.source, err = sandbox.Start(ctx, b.opts); err != nil {
		return b, fmt.Errorf("start source server: %w", err)
	}
	// One round trip per statement, as a typical client and the applier send them.
	if b.srcDB, err = sql.Open("mysql", b.source.DSN("")+"?interpolateParams=true"); err != nil {
		return b, fmt.Errorf("open source: %w", err)
	}
	if err := b.srcDB.QueryRowContext(ctx, "SELECT VERSION()").Scan(&b.version); err != nil {
		return b, fmt.Errorf("source version: %w", err)
	}
	progress("source up at %s (%s)", b.source.Addr(), b.version)
	if err := b.seed(ctx); err != nil {
		return b, err
	}
	port, err := sandbox.FreePort()
	if err != nil {
		return b, err
	}
	b.streamerAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	var debug []string
	if b.cfg.Profile != "" {
		if err := os.MkdirAll(b.cfg.Profile, 0o755); err != nil {
			return b, fmt.Errorf("profile dir: %w", err)
		}
		addrs, err := benchkit.FreeAddrs(1)
		if err != nil {
			return b, err
		}
		b.streamerDebug = addrs[0]
		debug = []string{"--debug-listen", b.streamerDebug}
	}
	if b.streamer, err = benchkit.StartStreamer(ctx, b.bin, b.tmp, b.streamerAddr, b.source.DSN(""), debug...); err != nil {
		return b, err
	}
	for _, o := range append(b.rowliftConfigs(), b.slowedConfigs()...) {
		t := &rowliftTarget{b: b, opts: o.opts, slowed: o.slowed}
		b.targets = append(b.targets, t)
		kind := "rowlift"
		if o.slowed {
			kind = "slowed"
		}
		if t.n, err = b.startNode(ctx, o.name, kind, o.key); err != nil {
			return b, err
		}
	}
	for _, rc := range replicaConfigs(cfg.Flavor, threads) {
		r := &replica{b: b, rpl: replications[cfg.Flavor], cfg: rc}
		b.targets = append(b.targets, r)
		if r.n, err = b.startNode(ctx, rc.name, "native", rc.key); err != nil {
			return b, err
		}
	}
	floor := &clientFloor{b: b, rpl: &replica{b: b, rpl: replications[cfg.Flavor], cfg: replicaConfig{threads: 0}}}
	b.targets = append(b.targets, floor)
	if floor.n, err = b.startNode(ctx, "client floor: 1 query per transaction, no rowlift", "floor", "floor"); err != nil {
		return b, err
	}
	floor.rpl.n = floor.n
	progress("started %d target servers", len(b.targets))
	return b, nil
}

// startNode starts a target server with the source's settings.
func (b *bench) startNode(ctx context.Context, name, kind, key string) (*node, error) {
	srv, err := sandbox.Start(ctx, b.opts)
	if err != nil {
		return nil, fmt.Errorf("start server for %s: %w", name, err)
	}
	n := &node{name: name, kind: kind, key: key, srv: srv}
	if n.db, err = sql.Open("mysql", srv.DSN("")+"?interpolateParams=true"); err != nil {
		return nil, errors.Join(fmt.Errorf("open server of %s: %w", name, err), srv.Remove())
	}
	return n, nil
}

func (n *node) close() error {
	if n == nil {
		return nil
	}
	n.db.Close()
	if err := n.srv.Remove(); err != nil {
		return fmt.Errorf("remove server of %s: %w", n.name, err)
	}
	return nil
}

// dbs are client pools on every server, the source first.
func (b *bench) dbs() []*sql.DB {
	out := []*sql.DB{b.srcDB}
	for _, t := range b.targets {
		if n := t.node(); n != nil {
			out = append(out, n.db)
		}
	}
	return out
}

// close stops every process and server and removes the temp dir.
func (b *bench) close() {
	for _, t := range b.targets {
		if err := t.close(); err != nil {
			progress("%v", err)
		}
	}
	if b.streamer != nil {
		if err := b.streamer.Stop(); err != nil {
			progress("%v", err)
		}
	}
	if b.srcDB != nil {
		b.srcDB.Close()
	}
	if b.source != nil {
		if err := b.source.Remove(); err != nil {
			progress("remove source server: %v", err)
		}
	}
	os.RemoveAll(b.tmp)
}

// measureAll prepares every target, writes the backlog, times every catch-up
// one after the other, and compares every target with the source.
func (b *bench) measureAll(ctx context.Context) (*report, error) {
	rep := b.newReport()
	for _, t := range b.targets {
		progress("%s: bringing the target to the seeded state", t.node().name)
		if err := t.prepare(ctx); err != nil {
			return nil, fmt.Errorf("prepare %s: %w", t.node().name, err)
		}
	}
	var err error
	if rep.Backlog, err = b.writeBacklog(ctx); err != nil {
		return nil, err
	}
	end := rep.Backlog.EndGTID
	for _, t := range b.targets {
		if err := t.waitFetched(ctx, end); err != nil {
			return nil, fmt.Errorf("%s: %w", t.node().name, err)
		}
	}
	for _, t := range b.targets {
		end, k := end, b.cfg.K
		if rt, ok := t.(*rowliftTarget); ok && rt.slowed {
			end, k = b.slowEnd, b.cfg.SlowK
		}
		res, err := b.timeReplay(ctx, t, end, k)
		if err != nil {
			return nil, err
		}
		rep.Results = append(rep.Results, res)
	}
	for _, t := range b.targets {
		if rt, ok := t.(*rowliftTarget); ok && rt.slowed {
			if err := rt.finish(ctx, end); err != nil {
				return nil, err
			}
		}
	}
	for i, t := range b.targets {
		if err := b.verify(ctx, t.node(), &rep.Results[i]); err != nil {
			return nil, err
		}
	}
	rep.summarize()
	rep.LogProblems, err = b.logProblems()
	return rep, err
}

// replayTimeout bounds one timed catch-up: generous for 200 transactions/s.
func (b *bench) replayTimeout() time.Duration {
	return setupTimeout + time.Duration(b.cfg.K)*5*time.Millisecond
}

// timeReplay waits until every server has flushed, then times one catch-up of
// k transactions up to end and the CPU the servers and the client processes
// used in it.
func (b *bench) timeReplay(ctx context.Context, t replayer, end string, k int64) (result, error) {
	n := t.node()
	res := result{Name: n.name, Kind: n.kind, Transactions: k}
	progress("%s: catching up", n.name)
	if err := benchkit.Quiesce(ctx, maxDirty, b.dbs()...); err != nil {
		return res, err
	}
	src0, err1 := benchkit.ServerCPU(b.source, b.clkTck)
	tgt0, err2 := benchkit.ServerCPU(n.srv, b.clkTck)
	if err := errors.Join(err1, err2); err != nil {
		return res, err
	}
	rctx, cancel := context.WithTimeout(ctx, b.replayTimeout())
	start := time.Now()
	err := t.replay(rctx, end)
	wall := time.Since(start)
	cancel()
	src1, err1 := benchkit.ServerCPU(b.source, b.clkTck)
	tgt1, err2 := benchkit.ServerCPU(n.srv, b.clkTck)
	client, rollbacks, err3 := t.afterReplay()
	if err := errors.Join(err, err1, err2, err3); err != nil {
		return res, fmt.Errorf("%s: %w", n.name, err)
	}
	res.WallS = wall.Seconds()
	res.PerS = float64(k) / res.WallS
	res.SourceCPUS, res.TargetCPUS, res.ClientCPUS, res.Rollbacks = src1-src0, tgt1-tgt0, client, rollbacks
	progress("  %.2f s, %.0f transactions/s, %d groups rolled back", res.WallS, res.PerS, res.Rollbacks)
	return res, nil
}
