package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/applier"
	"github.com/rowlift/rowlift/coordinator"
	"github.com/rowlift/rowlift/coordinator/console"
	"github.com/rowlift/rowlift/internal/controlclient"
	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/frozen"
	"github.com/rowlift/rowlift/internal/grpcopt"
	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/keyrange"
	"github.com/rowlift/rowlift/internal/logging"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/statustext"
	"github.com/rowlift/rowlift/internal/verify"
	"github.com/rowlift/rowlift/internal/vindex"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/streamer"
)

// demoTables are the sample tables: a large one, one with a unique secondary
// key, and one column of every common type. Each is filled from a SELECT over
// s(seq), the numbers 1 to its rows (0: the demo's --rows), which a recursive
// CTE makes on either flavor.
var demoTables = []struct {
	name, ddl, fill string
	rows            int
}{
	{"events", "CREATE TABLE demo.events (id BIGINT PRIMARY KEY, user_id INT NOT NULL, kind VARCHAR(16) NOT NULL, " +
		"amount DECIMAL(12,2), payload VARCHAR(200), created_at DATETIME(6) NOT NULL, KEY (user_id))",
		"SELECT seq, seq % 20000, ELT(1 + seq % 4, 'view', 'cart', 'order', 'refund'), (seq % 100000) / 100, " +
			"IF(seq % 7 = 0, NULL, LEFT(SHA2(seq, 256), 40)), FROM_UNIXTIME(1700000000 + seq, '%Y-%m-%d %H:%i:%s.%f') FROM s", 0},
	{"customers", "CREATE TABLE demo.customers (id INT PRIMARY KEY, email VARCHAR(100) NOT NULL, name VARCHAR(100) CHARACTER SET utf8mb4, " +
		"country CHAR(2), balance DECIMAL(12,2) NOT NULL, UNIQUE KEY (email))",
		"SELECT seq, CONCAT('user', seq, '@example.com'), CONCAT('Zoë ', seq), " +
			"ELT(1 + seq % 5, 'DE', 'FR', 'JP', 'BR', 'US'), seq % 1000 FROM s", 20000},
	{"all_types", "CREATE TABLE demo.all_types (id INT PRIMARY KEY, ti TINYINT, su SMALLINT UNSIGNED, mi MEDIUMINT, bi BIGINT UNSIGNED, " +
		"d DECIMAL(30,10), f FLOAT, dbl DOUBLE, bt BIT(12), dt DATE, tm TIME(6), dtm DATETIME(6), ts TIMESTAMP(6) NULL, y YEAR, " +
		"c CHAR(10), vc VARCHAR(50) CHARACTER SET utf8mb4, bn BINARY(4), vb VARBINARY(20), bl BLOB, tx TEXT, e ENUM('a','b','c'), " +
		"s SET('x','y','z'), j JSON)",
		"SELECT seq, CAST(seq % 128 AS SIGNED) - 64, seq, -CAST(seq AS SIGNED), 18446744073709551615 - seq, seq / 7, seq / 3, seq / 11, seq % 4096, " +
			"DATE('2020-01-01') + INTERVAL seq DAY, SEC_TO_TIME(seq * 37.5), FROM_UNIXTIME(1600000000 + seq * 61), FROM_UNIXTIME(1600000000 + seq), " +
			"1901 + seq % 255, LEFT(SHA2(seq, 256), 10), CONCAT('naïve ☃ ', seq), UNHEX(LPAD(HEX(seq), 8, '0')), UNHEX(LEFT(SHA2(seq, 256), 40)), " +
			"REPEAT(UNHEX('00FF'), seq % 20), REPEAT('t', seq % 300), ELT(1 + seq % 3, 'a', 'b', 'c'), ELT(1 + seq % 3, 'x', 'x,y', 'y,z'), " +
			"JSON_OBJECT('n', seq, 's', 'v') FROM s", 2000},
}

func demoCommand() *command {
	var rows, shards int
	var keep, cutover, withConsole bool
	var flavor, consoleListen string
	var logOpts logging.Options
	return &command{
		name:    "demo",
		summary: "move a table set between two throwaway MariaDB or MySQL servers (or split it over N) under live writes, and compare",
		usage:   "[--rows N] [--flavor mariadb|mysql] [--cutover | --reshard N] [--console [--console-listen ADDR]]",
		flags: func(fs *flag.FlagSet) {
			fs.IntVar(&rows, "rows", 1_000_000, "rows in the large sample table, e.g. --rows 100000")
			fs.StringVar(&flavor, "flavor", "mariadb", "`FLAVOR` of the servers to start: mariadb, or mysql (the MySQL that `make setup` provides), e.g. --flavor mysql")
			fs.BoolVar(&keep, "keep", false, "keep the servers running after the summary until Ctrl-C, to look around, e.g. --keep")
			fs.BoolVar(&cutover, "cutover", false, "go on to the end of the move: verify, switch (the writer follows to the target), reverse,\n"+
				"switch again and complete, with the write pause of each, then compare again, e.g. --cutover")
			fs.IntVar(&shards, "reshard", 0, "split the tables from the source over N target servers instead (N a power of two, at least 2; the\n"+
				"ranges of --shards N, every table by hash of its id), then compare each shard with the source rows of its range, e.g. --reshard 4")
			fs.BoolVar(&withConsole, "console", false, "serve the coordinator's web console (see --console-listen) to watch the move, and keep\n"+
				"running after it, with the reverse roles up, so that its verify, switch and reverse can be run there, until Ctrl-C, e.g. --console")
			fs.StringVar(&consoleListen, "console-listen", "127.0.0.1:7080", "`ADDR` of the web console with --console, e.g. --console-listen 127.0.0.1:8080")
			logFlags(fs, &logOpts)
		},
		exec: func(ctx context.Context, _ *flag.FlagSet, stdout io.Writer) error {
			if rows < 1 {
				return usagef("--rows must be at least 1")
			}
			if flavor != string(sandbox.MariaDB) && flavor != string(sandbox.MySQL) {
				return usagef("--flavor %s: want mariadb or mysql", flavor)
			}
			if err := logOpts.Check(); err != nil {
				return usageError{err}
			}
			d := &demo{out: stdout, rows: rows, cutover: cutover, flavor: sandbox.Flavor(flavor), logOpts: logOpts}
			if withConsole {
				d.console = consoleListen
			}
			if shards != 0 {
				if cutover {
					return usagef("--reshard %d and --cutover: the demo's cutover is of a move; give one or the other", shards)
				}
				ranges, err := keyrange.Even(shards)
				if err != nil || shards < 2 {
					return usagef("--reshard %d: want a power of two from 2 to 256, e.g. --reshard 4", shards)
				}
				d.ranges = ranges
			}
			defer d.close()
			err := d.run(ctx)
			if ctx.Err() != nil {
				fmt.Fprintln(stdout, "\ninterrupted: stopping and removing the servers")
				return nil
			}
			if err == nil && (keep || d.console != "") {
				fmt.Fprintf(stdout, "\nsource: %s\n", d.src.DSN("demo"))
				for _, t := range d.targets {
					fmt.Fprintf(stdout, "target %s: %s\n", t.name, t.srv.DSN("demo"))
				}
				fmt.Fprintln(stdout, "Press Ctrl-C to stop and remove them.")
				<-ctx.Done()
			}
			return err
		},
	}
}

// demo is one run of `rowlift demo`: everything it starts, to stop at the end.
type demo struct {
	out  io.Writer
	rows int
	// logOpts are --log-level and --log-format, for the roles' log files.
	logOpts logging.Options
	// flavor is the kind of server the demo starts, all of one kind.
	flavor sandbox.Flavor
	// cutover runs the roles the other way round too, and the cutover steps.
	cutover bool
	// console is the web console's address ("": none); the reverse roles
	// run with it, for the console's switch.
	console string
	// ranges are the target shards' key ranges with --reshard; none for a move.
	ranges []keyrange.Range
	dir    string
	src    *sandbox.Server
	srcDB  *sql.DB
	// targets are the move's one target, or the shards of a reshard.
	targets []demoTarget
	// route is where the writer writes: the side that takes the writes.
	route atomic.Pointer[sql.DB]
	// nextID is the next new key of demo.events, kept from one writer to the next.
	nextID int64
	// streamerAddr and reverseStreamerAddr are where the streamers next to the
	// source and (with cutover) next to the target listen.
	streamerAddr, reverseStreamerAddr string
	consoleURL                        string
	cancel                            context.CancelFunc
	wg                                sync.WaitGroup
	servers                           []*grpc.Server
	closers                           []func()
}

// demoTarget is a target server of the demo, with the coordinator's name for
// it and, in a reshard, the key range it owns.
type demoTarget struct {
	name     string
	keyRange keyrange.Range
	srv      *sandbox.Server
	db       *sql.DB
}

// targetsWord is what the demo's output calls its target servers.
func (d *demo) targetsWord() string {
	if d.ranges != nil {
		return "target shards"
	}
	return "target"
}

func (d *demo) say(format string, args ...any) { fmt.Fprintf(d.out, format+"\n", args...) }

func (d *demo) run(ctx context.Context) error {
	var err error
	if d.dir, err = os.MkdirTemp("", "rowlift-demo-"); err != nil {
		return err
	}
	if err := d.startServers(ctx); err != nil {
		return err
	}
	d.route.Store(d.srcDB)
	d.nextID = int64(d.rows) + 1
	start := time.Now()
	d.say("filling the source: demo.events (%s rows; --rows sets how many), demo.customers, demo.all_types", statustext.Count(int64(d.rows)))
	if err := fillDemo(ctx, d.srcDB, d.rows, d.fillProgress()); err != nil {
		return fmt.Errorf("fill the source: %w", err)
	}
	d.say("  done in %s", formatDuration(time.Since(start)))

	control, err := d.startRoles(ctx)
	if err != nil {
		return err
	}
	var writes atomic.Int64
	d.startWriter(ctx, &writes)

	spec := d.spec()
	d.say("creating workflow %s while a writer keeps changing the source\n", spec.GetName())
	created, err := control.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: spec})
	if err != nil {
		return fmt.Errorf("create workflow: %s", status.Convert(err).Message())
	}
	for _, w := range created.GetWarnings() {
		d.say("warning: %s", w)
	}
	copyStart := time.Now()
	if _, err := control.StartWorkflow(ctx, &rowliftv1.WorkflowRef{Name: spec.GetName()}); err != nil {
		return fmt.Errorf("start workflow: %s", status.Convert(err).Message())
	}
	last, err := d.watch(ctx, control, spec.GetName())
	if err != nil {
		return err
	}
	copyTime := time.Since(copyStart)

	d.stopWriter()
	pos, err := dbconn.Position(ctx, d.srcDB)
	if err != nil {
		return err
	}
	d.say("\nwriter stopped after %s transactions; waiting for the %s to apply up to %s", statustext.Count(writes.Load()), d.targetsWord(), pos)
	final, err := d.waitApplied(ctx, control, spec.GetName(), pos)
	if err != nil {
		return err
	}
	var identical bool
	var shardLines []string
	if d.ranges != nil {
		d.say("comparing each target shard with the source rows of its range")
		shardLines, identical, err = d.compareShards(ctx)
	} else {
		identical, err = d.compare(ctx, d.srcDB, d.targets[0].db, false)
	}
	if err != nil {
		return err
	}
	copied := last.GetStatus().GetRowsCopied()
	d.say("\nsummary")
	if d.ranges != nil {
		d.say("  split:           %d tables by hash of id over %d target shards", len(demoTables), len(d.targets))
	}
	d.say("  rows copied:     %s in %d tables", statustext.Count(copied), len(demoTables))
	d.say("  copy time:       %s (%s)", formatDuration(copyTime), formatRate(float64(copied)/copyTime.Seconds()))
	d.say("  live writes:     %s source transactions during the copy, replayed on the %s", statustext.Count(writes.Load()), d.targetsWord())
	d.say("  lag at the end:  %s", formatDuration(time.Duration(final.GetStatus().GetLagMs())*time.Millisecond))
	if d.ranges == nil {
		d.say("  identical:       %s", map[bool]string{true: "yes", false: "NO"}[identical])
	}
	d.say("  logs:            %s", d.dir)
	for _, line := range shardLines {
		d.say("  %s", line)
	}
	if !identical {
		if d.ranges != nil {
			return errors.New("a target shard differs from the source rows of its range")
		}
		return errors.New("the target differs from the source")
	}
	if d.cutover {
		if err := d.runCutover(ctx, control, spec.GetName()); err != nil {
			return err
		}
	}
	if d.console != "" {
		d.say("\nthe workflow runs on: in the console at %s, run its verify, then switch (and reverse)", d.consoleURL)
	}
	return nil
}

// reverse says whether the roles of the reverse workflow run: for the
// cutover, which the demo runs or the console's user does.
func (d *demo) reverse() bool { return d.ranges == nil && (d.cutover || d.console != "") }

// fillBatch is the rows of demo.events one INSERT writes: the first batch
// measures this machine's fill rate within a few seconds, and the estimate
// from it is what a user waits on before the demo moves anything.
const fillBatch = 50_000

// fillDemo creates the sample tables in database demo on db and fills them,
// demo.events with rows rows, in batches of fillBatch after each of which
// progress (if not nil) learns the rows written of all and the time taken.
func fillDemo(ctx context.Context, db *sql.DB, rows int, progress func(done, all int, took time.Duration)) error {
	for _, t := range demoTables {
		n := t.rows
		if n == 0 {
			n = rows
		}
		for _, q := range []string{"CREATE DATABASE IF NOT EXISTS demo", t.ddl} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		start := time.Now()
		for first := 1; first <= n; first += fillBatch {
			last := min(first+fillBatch-1, n)
			fill := fmt.Sprintf("INSERT INTO demo.%s WITH RECURSIVE s(seq) AS (SELECT %d UNION ALL SELECT seq + 1 FROM s WHERE seq < %d) %s",
				t.name, first, last, t.fill)
			if _, err := db.ExecContext(ctx, fill); err != nil {
				return err
			}
			if t.rows == 0 && progress != nil {
				progress(last, n, time.Since(start))
			}
		}
	}
	return nil
}

// fillProgress says, after the first batch of demo.events, how long the
// whole fill will take at the rate measured, then each further quarter.
func (d *demo) fillProgress() func(done, all int, took time.Duration) {
	quarter := 0
	return func(done, all int, took time.Duration) {
		rate := float64(done) / took.Seconds()
		switch {
		case done == all:
		case done <= fillBatch && all > fillBatch:
			d.say("  about %s for all %s rows at the %s this machine writes them",
				formatDuration(time.Duration(float64(all)/rate*float64(time.Second))), statustext.Count(int64(all)), formatRate(rate))
		case done*4/all > quarter:
			quarter = done * 4 / all
			d.say("  %s of %s rows, about %s left", statustext.Count(int64(done)), statustext.Count(int64(all)),
				formatDuration(time.Duration(float64(all-done)/rate*float64(time.Second))))
		}
	}
}

// flavorName is the servers' kind as the demo prints it.
func (d *demo) flavorName() string {
	if d.flavor == sandbox.MySQL {
		return "MySQL"
	}
	return "MariaDB"
}

// startServers starts the source server and the target servers (one, or
// one per shard with --reshard) and opens a pool on each.
func (d *demo) startServers(ctx context.Context) error {
	var err error
	if d.ranges == nil {
		d.targets = []demoTarget{{name: "main"}}
		d.say("starting two throwaway %s servers", d.flavorName())
	} else {
		for i, r := range d.ranges {
			d.targets = append(d.targets, demoTarget{name: fmt.Sprintf("shard%d", i+1), keyRange: r})
		}
		d.say("starting %d throwaway %s servers: a source and %d target shards", 1+len(d.ranges), d.flavorName(), len(d.ranges))
	}
	if d.src, err = sandbox.Start(ctx, sandbox.Options{Flavor: d.flavor}); err != nil {
		return err
	}
	d.say("  source %s in %s", d.src.Addr(), d.src.Dir)
	if d.srcDB, err = sql.Open("mysql", d.src.DSN("")); err != nil {
		return err
	}
	for i := range d.targets {
		t := &d.targets[i]
		if t.srv, err = sandbox.Start(ctx, sandbox.Options{Flavor: d.flavor}); err != nil {
			return err
		}
		if d.ranges == nil {
			d.say("  target %s in %s", t.srv.Addr(), t.srv.Dir)
		} else {
			d.say("  target %s (%s) %s in %s", t.name, t.keyRange, t.srv.Addr(), t.srv.Dir)
		}
		if t.db, err = sql.Open("mysql", t.srv.DSN("")); err != nil {
			return fmt.Errorf("open target %s: %w", t.name, err)
		}
	}
	return nil
}

// spec is the demo's workflow: a move of every table to the target, or with
// --reshard a split of every table by hash of its id over the shards.
func (d *demo) spec() *rowliftv1.WorkflowSpec {
	spec := &rowliftv1.WorkflowSpec{
		Name: "demo-move", SourceDatabase: "demo",
		Sources: []*rowliftv1.SourceShard{{Name: "main", StreamerAddress: d.streamerAddr}},
	}
	if d.ranges != nil {
		spec.Name = "demo-reshard"
	}
	for _, t := range d.targets {
		ts := &rowliftv1.TargetShard{Name: t.name}
		if d.ranges != nil {
			ts.KeyRange = t.keyRange.String()
		}
		spec.Targets = append(spec.Targets, ts)
	}
	if d.reverse() {
		spec.Sources[0].ReverseTarget = demoOrigin
		spec.Targets[0].ReverseStreamerAddress = d.reverseStreamerAddr
	}
	for _, t := range demoTables {
		ts := &rowliftv1.TableSpec{Name: t.name}
		if d.ranges != nil {
			ts.ShardingColumn, ts.ShardingFunction = demoShardingColumn, string(vindex.Hash)
		}
		spec.Tables = append(spec.Tables, ts)
	}
	return spec
}

// demoOrigin is the coordinator's name for the source server, where the
// reverse workflow of --cutover writes; the target is "main".
const demoOrigin = "origin"

// startRoles runs the streamer, the applier and the coordinator in this
// process, logging to files in the demo's directory, and returns a client of
// the coordinator's Control API: the demo drives the workflow as a user would.
// With cutover it also runs a streamer next to the target and an applier next
// to the source, for the reverse workflow, and the coordinator knows the
// source server as demoOrigin.
func (d *demo) startRoles(ctx context.Context) (rowliftv1.ControlClient, error) {
	driverLog, err := d.logger("mysql-driver")
	if err != nil {
		return nil, err
	}
	logging.RouteDriver(driverLog)
	if d.streamerAddr, err = d.startStreamer(d.src, "streamer"); err != nil {
		return nil, err
	}
	targets := map[string]string{}
	for _, t := range d.targets {
		targets[t.name] = t.srv.DSN("")
	}
	if d.reverse() {
		if d.reverseStreamerAddr, err = d.startStreamer(d.targets[0].srv, "reverse-streamer"); err != nil {
			return nil, err
		}
		targets[demoOrigin] = d.src.DSN("")
	}
	clog, err := d.logger("coordinator")
	if err != nil {
		return nil, err
	}
	co, err := coordinator.New(coordinator.Config{Targets: targets, Logger: clog})
	if err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	d.closers = append(d.closers, co.Close)
	coordAddr, err := d.serve(func(gs *grpc.Server) { rowliftv1.RegisterControlServer(gs, co) })
	if err != nil {
		return nil, err
	}
	// As `rowlift coordinator` does: it finishes a cutover a call left unfinished.
	d.background(ctx, co.Run)
	if d.console != "" {
		if err := d.startConsole(ctx, co, clog); err != nil {
			return nil, err
		}
	}
	for _, t := range d.targets {
		name := "applier"
		if d.ranges != nil {
			name += "-" + t.name
		}
		if err := d.startApplier(ctx, t.srv, name); err != nil {
			return nil, err
		}
	}
	if d.reverse() {
		if err := d.startApplier(ctx, d.src, "reverse-applier"); err != nil {
			return nil, err
		}
	}
	conn, err := grpc.NewClient(coordAddr, grpcopt.DialOptions(nil)...)
	if err != nil {
		return nil, err
	}
	d.closers = append(d.closers, func() { conn.Close() })
	return rowliftv1.NewControlClient(conn), nil
}

// startConsole serves the web console of the demo's coordinator, open to
// anyone who reaches its address (by default on loopback only), as the
// coordinator's Control API is in the demo.
func (d *demo) startConsole(ctx context.Context, co *coordinator.Server, log *zap.Logger) error {
	lis, err := console.Listen(d.console, nil)
	if err != nil {
		return fmt.Errorf("--console-listen: %w", err)
	}
	c, err := console.New(console.Config{Control: co, Logger: log})
	if err != nil {
		lis.Close()
		return err
	}
	d.closers = append(d.closers, c.Close)
	d.background(ctx, c.Run)
	d.background(ctx, func(ctx context.Context) { _ = c.Serve(ctx, lis) })
	d.consoleURL = "http://" + lis.Addr().String() + "/"
	d.say("web console: %s (watch the move there)", d.consoleURL)
	return nil
}

// logger logs to <name>.log in the demo's directory.
func (d *demo) logger(name string) (*zap.Logger, error) {
	f, err := os.Create(filepath.Join(d.dir, name+".log"))
	if err != nil {
		return nil, fmt.Errorf("log file: %w", err)
	}
	d.closers = append(d.closers, func() { f.Close() })
	return logging.New(d.logOpts, f, false)
}

// startStreamer serves a streamer of the server, logging as name, and returns
// its address.
func (d *demo) startStreamer(srv *sandbox.Server, name string) (string, error) {
	log, err := d.logger(name)
	if err != nil {
		return "", err
	}
	st, err := streamer.New(streamer.Config{SourceDSN: srv.DSN(""), Logger: log})
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	d.closers = append(d.closers, func() { st.Close() })
	return d.serve(func(gs *grpc.Server) { rowliftv1.RegisterStreamerServer(gs, st) })
}

// startApplier runs an applier engine for the server, logging as name.
func (d *demo) startApplier(ctx context.Context, srv *sandbox.Server, name string) error {
	log, err := d.logger(name)
	if err != nil {
		return err
	}
	engine, err := applier.New(applier.Config{TargetDSN: srv.DSN(""), Logger: log, PollInterval: 200 * time.Millisecond})
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	d.background(ctx, func(ctx context.Context) { _ = engine.Run(ctx) })
	return nil
}

// background runs fn until the demo closes, not when ctx ends: on Ctrl-C the
// demo stops its parts in order.
func (d *demo) background(ctx context.Context, fn func(context.Context)) {
	bctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(bctx)
	}()
	d.closers = append(d.closers, func() { stop(); <-done })
}

// serve serves a gRPC service on a free local port and returns its address.
func (d *demo) serve(register func(*grpc.Server)) (string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	gs := grpc.NewServer(grpcopt.ServerOptions(nil)...)
	register(gs)
	d.servers = append(d.servers, gs)
	go func() { _ = gs.Serve(lis) }()
	return lis.Addr().String(), nil
}

// watch shows the workflow's progress until its copy is done and it has caught
// up, and returns the last status seen.
func (d *demo) watch(ctx context.Context, control rowliftv1.ControlClient, name string) (*rowliftv1.Workflow, error) {
	show := watchOutput(d.out, "text")
	return controlclient.WaitRunning(ctx, control, name, 500*time.Millisecond, func(w *rowliftv1.Workflow) error { return show(w, time.Now()) })
}

// waitApplied waits until the workflow's position covers pos.
func (d *demo) waitApplied(ctx context.Context, control rowliftv1.ControlClient, name, pos string) (*rowliftv1.Workflow, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		w, err := control.GetWorkflow(ctx, &rowliftv1.WorkflowRef{Name: name})
		if err != nil {
			return nil, fmt.Errorf("workflow status: %s", status.Convert(err).Message())
		}
		streams := w.GetStatus().GetStreams()
		applied := len(streams) > 0
		for _, st := range streams {
			ok, err := gtid.Covers(st.GetPosition().GetGtidSet(), pos)
			applied = applied && err == nil && ok
		}
		if applied {
			return w, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the target did not apply up to %s within 2 minutes (status: %s)", pos, w.GetStatus().GetMessage())
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// compare checks every table row by row, the side that takes the writes
// (live) against the other one, whose tables have their frozen names when
// otherFrozen.
func (d *demo) compare(ctx context.Context, live, other *sql.DB, otherFrozen bool) (bool, error) {
	identical := true
	for _, t := range demoTables {
		var opts verify.Options
		if otherFrozen {
			fz, err := frozen.Name(t.name)
			if err != nil {
				return false, err
			}
			opts.TargetTable = fz
		}
		r, err := verify.Table(ctx, live, other, "demo", "demo", t.name, opts)
		if err != nil {
			return false, fmt.Errorf("compare %s: %w", t.name, err)
		}
		d.say("  demo.%-10s %s", t.name, r.String())
		identical = identical && r.Identical()
	}
	return identical, nil
}

// startWriter starts the writer, counting its transactions in writes.
func (d *demo) startWriter(ctx context.Context, writes *atomic.Int64) {
	writing, stop := context.WithCancel(ctx)
	d.cancel = stop
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.write(writing, writes)
	}()
}

// stopWriter stops the writer and waits until it has.
func (d *demo) stopWriter() {
	d.cancel()
	d.wg.Wait()
}

// write changes the tables where route points until ctx ends: updates, inserts
// and deletes on all three tables, a few hundred transactions a second. A
// write that fails (its table frozen by a cutover) is skipped.
func (d *demo) write(ctx context.Context, writes *atomic.Int64) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for ctx.Err() == nil {
		var q string
		switch rng.IntN(6) {
		case 0:
			q = fmt.Sprintf("UPDATE demo.events SET amount = amount + 1, kind = 'order' WHERE id = %d", 1+rng.IntN(d.rows))
		case 1:
			q = fmt.Sprintf("INSERT INTO demo.events VALUES (%d, %d, 'view', 1.50, 'new', NOW(6))", d.nextID, rng.IntN(20000))
			d.nextID++
		case 2:
			q = fmt.Sprintf("DELETE FROM demo.events WHERE id = %d", 1+rng.IntN(d.rows))
		case 3:
			q = fmt.Sprintf("UPDATE demo.customers SET balance = balance - 1, name = CONCAT(name, '·') WHERE id = %d", 1+rng.IntN(20000))
		case 4:
			q = fmt.Sprintf("UPDATE demo.all_types SET d = d + 1, j = JSON_SET(j, '$.n', %d), ts = NOW(6) WHERE id = %d", rng.IntN(1000), 1+rng.IntN(2000))
		default:
			q = fmt.Sprintf("UPDATE demo.events SET id = %d WHERE id = %d", d.nextID, 1+rng.IntN(d.rows))
			d.nextID++
		}
		if _, err := d.route.Load().ExecContext(ctx, q); err == nil {
			writes.Add(1)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// close stops everything the demo started and removes the servers.
func (d *demo) close() {
	if d.cancel != nil {
		d.cancel()
	}
	d.wg.Wait()
	for _, gs := range d.servers {
		gs.Stop()
	}
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
	if d.srcDB != nil {
		d.srcDB.Close()
	}
	if d.src != nil {
		_ = d.src.Remove()
	}
	for _, t := range d.targets {
		if t.db != nil {
			t.db.Close()
		}
		if t.srv != nil {
			_ = t.srv.Remove()
		}
	}
}
