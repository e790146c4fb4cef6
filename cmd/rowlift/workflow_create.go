package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/rowlift/rowlift/internal/keyrange"
	"github.com/rowlift/rowlift/internal/statustext"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// createFlags are the flags of `rowlift workflow create`; spec turns them into the
// request. Zero options mean the server's documented defaults.
type createFlags struct {
	name                     string
	sources, targets, tables stringList
	tableList                string
	sourceDB, targetDB       string

	chunkRows, chunkBytes, packetBytes    int64
	parallelTables, applyWorkers          int
	commitBatchItems, commitBatchMS       int
	commitBatchBytes, maxReplayLagMS      int64
	outOfOrder, skipCreate, allowNonempty bool
	jsonAsText, keepKeys                  bool
	onDDL, copyMethod                     string
	throttleSource, throttleTarget        throttleFlags
	throttleCheckMS                       int64
	start                                 bool
	reverseTargets, reverseStreamers      stringList
	// Resharding: key ranges of sources, an even split over the targets, the
	// sharding column of each table and the tables copied whole.
	sourceRanges, shardingColumns stringList
	shards                        int
	referenceTables               string
}

// throttleFlags are the limits of one side (source or target) of --throttle-*.
type throttleFlags struct {
	threadsRunning, historyLength int64
	lagQuery                      string
	maxLagSeconds                 float64
}

func (t *throttleFlags) register(fs *flag.FlagSet, side, example string) {
	p := "throttle-" + side + "-"
	fs.Int64Var(&t.threadsRunning, p+"threads-running", 0,
		"pause the copy (never replay) while the "+side+"'s Threads_running is above `N`; 0: no check, e.g. --"+p+"threads-running 50")
	fs.Int64Var(&t.historyLength, p+"history-length", 0,
		"pause the copy while the "+side+"'s InnoDB history list length is above `N`; 0: no check, e.g. --"+p+"history-length 1000000")
	fs.StringVar(&t.lagQuery, p+"lag-query", "",
		"`SQL` returning one number of seconds of lag on the "+side+" (its replicas, a heartbeat table), e.g. --"+p+"lag-query '"+example+"'")
	fs.Float64Var(&t.maxLagSeconds, p+"max-lag-seconds", 0,
		"pause the copy while --"+p+"lag-query returns more than `SECONDS`; 0: no check, e.g. --"+p+"max-lag-seconds 10")
}

func (t *throttleFlags) limits() *rowliftv1.ThrottleLimits {
	if *t == (throttleFlags{}) {
		return nil
	}
	return &rowliftv1.ThrottleLimits{ThreadsRunning: t.threadsRunning, HistoryLength: t.historyLength, LagQuery: t.lagQuery, MaxLagSeconds: t.maxLagSeconds}
}

func (c *createFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.name, "name", "", "`NAME` of the new workflow, unique on its targets: letters, digits, '_' and '-', e.g. --name orders-move (required)")
	fs.Var(&c.sources, "source", "source shard as `NAME=STREAMER_ADDR` (host:port of the streamer next to the source server); repeatable, one per source shard,\n"+
		"e.g. --source main=10.0.0.5:7001 (at least one)")
	fs.Var(&c.targets, "target", "target shard as `NAME[=RANGE|=APPLIER_ADDR]`: a target configured on the coordinator (rowlift coordinator --target NAME=DSN),\n"+
		"with the key range it owns in a reshard (Vitess syntax: -80, 80-c0, c0-) or its applier's address (host:port) for reference;\n"+
		"repeatable, e.g. --target main, or --target shard1=-80 --target shard2=80- (at least one)")
	fs.Var(&c.sourceRanges, "source-range", "in a reshard from several source shards, `NAME=RANGE`: the key range source NAME holds; repeatable,\n"+
		"e.g. --source-range old1=-80 --source-range old2=80- (a lone source holds the whole keyspace)")
	fs.IntVar(&c.shards, "shards", 0, "reshard into `N` even key ranges (N a power of two), given to the N --target names in order, e.g. --shards 4")
	fs.Var(&c.shardingColumns, "sharding-column", "in a reshard, `TABLE=COLUMN[:FUNCTION]`: the column whose keyspace ID places each row, and the function that\n"+
		"computes it: hash (integers, as Vitess's hash vindex; the default), xxhash (any type, as Vitess's xxhash) or numeric (the unsigned\n"+
		"value itself); repeatable, e.g. --sharding-column orders=customer_id --sharding-column users=email:xxhash")
	fs.StringVar(&c.referenceTables, "reference-tables", "", "in a reshard, tables without a sharding column to copy whole to every target shard, as a\n"+
		"comma-separated `LIST`, e.g. --reference-tables countries,currencies")
	fs.StringVar(&c.sourceDB, "source-database", "", "`DB` (schema) holding the tables on the sources, e.g. --source-database shop (required)")
	fs.StringVar(&c.targetDB, "target-database", "", "`DB` to write the tables to on the targets; default the same name as on the sources, e.g. --target-database shop_new")
	fs.Var(&c.tables, "table", "table to move as `NAME[:COL,COL...]`, optionally only the given columns (default every non-generated column); repeatable,\n"+
		"e.g. --table customers --table orders:id,customer_id,total")
	fs.StringVar(&c.tableList, "tables", "", "tables to move with all their columns, as a comma-separated `LIST`; adds to --table, e.g. --tables customers,orders,items")
	fs.Int64Var(&c.chunkRows, "chunk-rows", 0, "most rows per chunk SELECT on the source (--chunk-bytes sizes chunks below it); 0: the server default\n"+
		"(100000), e.g. --chunk-rows 10000")
	fs.Int64Var(&c.chunkBytes, "chunk-bytes", 0, "bytes of rows per copy chunk: each chunk's rows are estimated from the table's row width, and a chunk\n"+
		"of wider rows than estimated ends at twice this; 0: the server default (16 MiB), e.g. --chunk-bytes 67108864")
	fs.Int64Var(&c.packetBytes, "packet-bytes", 0, "target gRPC message size in bytes; 0: the server default, e.g. --packet-bytes 4194304")
	fs.IntVar(&c.parallelTables, "parallel-tables", 0, "tables copied at once; 0: the server default, e.g. --parallel-tables 4")
	fs.IntVar(&c.applyWorkers, "apply-workers", 0, "connections the applier writes with; 0: the server default, e.g. --apply-workers 8")
	fs.IntVar(&c.commitBatchItems, "commit-batch-items", 0, "source transactions replayed per target transaction (1: each on its own); 0: default 256, e.g. --commit-batch-items 16")
	fs.Int64Var(&c.commitBatchBytes, "commit-batch-bytes", 0, "a replay group also ends at this many bytes of row images; 0: default 4 MiB, e.g. --commit-batch-bytes 1048576")
	fs.IntVar(&c.commitBatchMS, "commit-batch-ms", 0, "longest a replay group waits for more transactions, in milliseconds; 0: default 5, e.g. --commit-batch-ms 20")
	fs.Int64Var(&c.maxReplayLagMS, "max-replay-lag-ms", 0, "catch-up before copy: the copy waits between chunks while replay lags more than this many\n"+
		"milliseconds, and under writes sizes its chunks to be applied within half of it, so the move is ready for\n"+
		"cutover soon after its last chunk; 0: default 1000, -1: never, e.g. --max-replay-lag-ms 500")
	fs.BoolVar(&c.outOfOrder, "out-of-order-commit", false, "commit replayed transactions out of source order, checkpointing a low watermark, e.g. --out-of-order-commit")
	fs.StringVar(&c.onDDL, "on-ddl", "exec", "what a schema change on a moved table does: exec (apply it on the target, names mapped, and go on), stop (the workflow, naming the statement) or ignore (skip it), e.g. --on-ddl stop")
	fs.StringVar(&c.copyMethod, "copy-method", "auto", "how copied rows are written: auto (LOAD DATA when the target allows local_infile, else INSERT), load-data or insert,\n"+
		"e.g. --copy-method insert")
	fs.BoolVar(&c.skipCreate, "skip-create-tables", false, "do not create missing target tables from the source's definition (fail instead), e.g. --skip-create-tables")
	fs.BoolVar(&c.allowNonempty, "allow-nonempty-target", false, "copy into target tables that already hold rows, e.g. --allow-nonempty-target")
	fs.BoolVar(&c.keepKeys, "keep-secondary-keys", false, "create missing target tables with every secondary key, instead of adding the plain ones\n"+
		"as one sorted build once each table is copied (cheaper for the target), e.g. --keep-secondary-keys")
	fs.BoolVar(&c.jsonAsText, "json-as-text", false, "move MySQL JSON as its text, accepting that a MariaDB target turns the DECIMAL, DATE, TIME,\n"+
		"DATETIME, TIMESTAMP, BIT and BLOB values inside documents into the numbers and strings they print as,\n"+
		"e.g. --json-as-text for a MySQL source and a MariaDB target")
	c.throttleSource.register(fs, "source", "SELECT MAX(lag) FROM heartbeat.replicas")
	c.throttleTarget.register(fs, "target", "SELECT 0")
	fs.Int64Var(&c.throttleCheckMS, "throttle-check-ms", 0, "milliseconds between throttle metric reads on each side; 0: default 1000, e.g. --throttle-check-ms 500")
	fs.BoolVar(&c.start, "start", false, "start the copy right after creating the workflow, e.g. --start")
	fs.Var(&c.reverseTargets, "reverse-target", "for switching: `SOURCE=NAME`, where NAME is the source server configured on the coordinator (--target NAME=DSN),\n"+
		"whose applier writes the reverse workflow back into it; repeatable, e.g. --reverse-target main=main-source")
	fs.Var(&c.reverseStreamers, "reverse-streamer", "for switching: `TARGET=ADDR` of a streamer next to the target server, which the reverse workflow reads;\n"+
		"repeatable, e.g. --reverse-streamer main=10.0.0.7:7001")
}

// spec builds the CreateWorkflow request from the flags. It checks the form of
// each flag; what the names refer to is the coordinator's to check.
func (c *createFlags) spec() (*rowliftv1.WorkflowSpec, error) {
	if c.name == "" {
		return nil, usagef("--name is required")
	}
	if c.sourceDB == "" {
		return nil, usagef("--source-database is required")
	}
	spec := &rowliftv1.WorkflowSpec{Name: c.name, SourceDatabase: c.sourceDB, TargetDatabase: c.targetDB}
	seen := map[string]bool{}
	for _, s := range c.sources {
		name, addr, ok := strings.Cut(s, "=")
		if !ok || name == "" || addr == "" {
			return nil, usagef("--source %q: want NAME=STREAMER_ADDR, e.g. main=10.0.0.5:7001", s)
		}
		if seen[name] {
			return nil, usagef("--source %q: source %s is named twice", s, name)
		}
		seen[name] = true
		spec.Sources = append(spec.Sources, &rowliftv1.SourceShard{Name: name, StreamerAddress: addr})
	}
	if len(spec.Sources) == 0 {
		return nil, usagef("at least one --source NAME=STREAMER_ADDR is required")
	}
	clear(seen)
	for _, t := range c.targets {
		name, addr, hasAddr := strings.Cut(t, "=")
		if name == "" || (hasAddr && addr == "") {
			return nil, usagef("--target %q: want NAME or NAME=APPLIER_ADDR, e.g. main", t)
		}
		if err := state.CheckTargetName(name); err != nil {
			return nil, usagef("--target %q: %v", t, err)
		}
		if seen[name] {
			return nil, usagef("--target %q: target %s is named twice", t, name)
		}
		seen[name] = true
		tgt := &rowliftv1.TargetShard{Name: name}
		// An applier address is host:port; a key range never has a colon.
		if hasAddr && !strings.Contains(addr, ":") {
			tgt.KeyRange = addr
		} else {
			tgt.ApplierAddress = addr
		}
		spec.Targets = append(spec.Targets, tgt)
	}
	if len(spec.Targets) == 0 {
		return nil, usagef("at least one --target NAME is required (a target configured on the coordinator)")
	}
	if err := c.reverse(spec); err != nil {
		return nil, err
	}
	tables, err := c.tableSpecs()
	if err != nil {
		return nil, err
	}
	spec.Tables = tables
	if err := c.sharding(spec); err != nil {
		return nil, err
	}
	spec.Options, err = c.options()
	if err != nil {
		return nil, err
	}
	return spec, nil
}

// sharding adds the reshard flags to the spec. The coordinator checks that
// the ranges tile and each table has a sharding column or is a reference.
func (c *createFlags) sharding(spec *rowliftv1.WorkflowSpec) error {
	if c.shards != 0 {
		ranges, err := keyrange.Even(c.shards)
		if err != nil {
			return usagef("--shards %d: %v", c.shards, err)
		}
		if len(ranges) != len(spec.GetTargets()) {
			return usagef("--shards %d: give exactly %d --target names (got %d), which get the ranges in order", c.shards, c.shards, len(spec.GetTargets()))
		}
		for i, t := range spec.GetTargets() {
			if t.GetKeyRange() != "" {
				return usagef("--shards %d: target %s also has key range %s; use one or the other", c.shards, t.GetName(), t.GetKeyRange())
			}
			t.KeyRange = ranges[i].String()
		}
	}
	for _, item := range c.sourceRanges {
		name, kr, ok := strings.Cut(item, "=")
		i := slices.IndexFunc(spec.GetSources(), func(s *rowliftv1.SourceShard) bool { return s.GetName() == name })
		if !ok || kr == "" || i < 0 {
			return usagef("--source-range %q: want NAME=RANGE with NAME one of the --source names, e.g. old1=-80", item)
		}
		spec.Sources[i].KeyRange = kr
	}
	table := func(flagName, item, name string) (*rowliftv1.TableSpec, error) {
		i := slices.IndexFunc(spec.GetTables(), func(t *rowliftv1.TableSpec) bool { return t.GetName() == name })
		if i < 0 {
			return nil, usagef("%s %q: table %s is not among --table/--tables", flagName, item, name)
		}
		return spec.Tables[i], nil
	}
	for _, item := range c.shardingColumns {
		name, col, ok := strings.Cut(item, "=")
		col, fn, _ := strings.Cut(col, ":")
		if !ok || name == "" || col == "" {
			return usagef("--sharding-column %q: want TABLE=COLUMN[:FUNCTION], e.g. orders=customer_id or users=email:xxhash", item)
		}
		t, err := table("--sharding-column", item, name)
		if err != nil {
			return err
		}
		t.ShardingColumn, t.ShardingFunction = col, fn
	}
	if c.referenceTables != "" {
		for name := range strings.SplitSeq(c.referenceTables, ",") {
			t, err := table("--reference-tables", c.referenceTables, strings.TrimSpace(name))
			if err != nil {
				return err
			}
			t.Reference = true
		}
	}
	return nil
}

// tableSpecs is --table and --tables, each table once.
func (c *createFlags) tableSpecs() ([]*rowliftv1.TableSpec, error) {
	var tables []*rowliftv1.TableSpec
	seen := map[string]bool{}
	add := func(flagName, value string, t *rowliftv1.TableSpec) error {
		if t.Name == "" {
			return usagef("%s %q: empty table name", flagName, value)
		}
		if seen[t.Name] {
			return usagef("%s %q: table %s is named twice", flagName, value, t.Name)
		}
		seen[t.Name] = true
		tables = append(tables, t)
		return nil
	}
	for _, v := range c.tables {
		name, cols, hasCols := strings.Cut(v, ":")
		t := &rowliftv1.TableSpec{Name: strings.TrimSpace(name)}
		if hasCols {
			for col := range strings.SplitSeq(cols, ",") {
				if col = strings.TrimSpace(col); col == "" {
					return nil, usagef("--table %q: empty column name; want NAME[:COL,COL...]", v)
				}
				t.Columns = append(t.Columns, col)
			}
		}
		if err := add("--table", v, t); err != nil {
			return nil, err
		}
	}
	if c.tableList != "" {
		for name := range strings.SplitSeq(c.tableList, ",") {
			if err := add("--tables", c.tableList, &rowliftv1.TableSpec{Name: strings.TrimSpace(name)}); err != nil {
				return nil, err
			}
		}
	}
	if len(tables) == 0 {
		return nil, usagef("no table to move: give --table NAME (repeatable) or --tables a,b,c")
	}
	return tables, nil
}

func (c *createFlags) options() (*rowliftv1.WorkflowOptions, error) {
	o := &rowliftv1.WorkflowOptions{
		ChunkRows:           c.chunkRows,
		ChunkBytes:          c.chunkBytes,
		PacketBytes:         c.packetBytes,
		CommitBatchBytes:    c.commitBatchBytes,
		OutOfOrderCommit:    c.outOfOrder,
		SkipCreateTables:    c.skipCreate,
		AllowNonemptyTarget: c.allowNonempty,
		JsonAsText:          c.jsonAsText,
		KeepSecondaryKeys:   c.keepKeys,
		MaxReplayLagMs:      c.maxReplayLagMS,
	}
	for _, n := range []struct {
		flag string
		v    int
		dst  *int32
	}{
		{"parallel-tables", c.parallelTables, &o.ParallelTables},
		{"apply-workers", c.applyWorkers, &o.ApplyWorkers},
		{"commit-batch-items", c.commitBatchItems, &o.CommitBatchItems},
		{"commit-batch-ms", c.commitBatchMS, &o.CommitBatchMs},
	} {
		if n.v < 0 || n.v > math.MaxInt32 {
			return nil, usagef("--%s %d: must be between 0 (the default) and %d", n.flag, n.v, math.MaxInt32)
		}
		*n.dst = int32(n.v)
	}
	for _, n := range []struct {
		flag string
		v    int64
	}{{"chunk-rows", c.chunkRows}, {"chunk-bytes", c.chunkBytes}, {"packet-bytes", c.packetBytes}, {"commit-batch-bytes", c.commitBatchBytes}, {"throttle-check-ms", c.throttleCheckMS}} {
		if n.v < 0 {
			return nil, usagef("--%s %d: must be 0 (the default) or more", n.flag, n.v)
		}
	}
	switch c.onDDL {
	case "stop":
		o.OnDdl = rowliftv1.OnDDL_ON_DDL_STOP
	case "ignore":
		o.OnDdl = rowliftv1.OnDDL_ON_DDL_IGNORE
	case "exec":
		o.OnDdl = rowliftv1.OnDDL_ON_DDL_EXEC
	default:
		return nil, usagef("--on-ddl %q: want exec, stop or ignore", c.onDDL)
	}
	switch c.copyMethod {
	case "auto":
		o.CopyMethod = rowliftv1.CopyMethod_COPY_METHOD_UNSPECIFIED
	case "load-data":
		o.CopyMethod = rowliftv1.CopyMethod_COPY_METHOD_LOAD_DATA
	case "insert":
		o.CopyMethod = rowliftv1.CopyMethod_COPY_METHOD_INSERT
	default:
		return nil, usagef("--copy-method %q: want auto, load-data or insert", c.copyMethod)
	}
	src, dst := c.throttleSource.limits(), c.throttleTarget.limits()
	if src != nil || dst != nil || c.throttleCheckMS != 0 {
		o.Throttle = &rowliftv1.Throttle{Source: src, Target: dst, CheckIntervalMs: c.throttleCheckMS}
	}
	return o, nil
}

func workflowCreateCommand() *command {
	var c createFlags
	return workflowLeaf("create", "create a workflow, checked whole by the coordinator, and optionally start it",
		"--name NAME --source NAME=STREAMER_ADDR --target NAME --source-database DB (--table T[:COLS] ... | --tables T,T) [flags]\n\n"+
			"Example, move two tables of database shop from the source behind streamer 10.0.0.5:7001 to the\n"+
			"coordinator's target main, and start at once:\n"+
			"  rowlift workflow create --coordinator 10.0.0.9:7000 --name shop-move --source main=10.0.0.5:7001 \\\n"+
			"      --target main --source-database shop --tables customers,orders --start", 0,
		c.register,
		func(ctx context.Context, s *session, _ []string) error {
			spec, err := c.spec()
			if err != nil {
				return err
			}
			w, err := call(ctx, s, "create workflow "+spec.GetName(), func(ctx context.Context) (*rowliftv1.Workflow, error) {
				return s.client.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: spec})
			})
			if err != nil {
				return err
			}
			if s.flags.output == "text" {
				fmt.Fprintf(s.stdout, "created workflow %s: %s\n", spec.GetName(), statustext.StateLine(w.GetStatus()))
				for _, warning := range w.GetWarnings() {
					fmt.Fprintf(s.stdout, "warning: %s\n", warning)
				}
			}
			if c.start {
				ref := &rowliftv1.WorkflowRef{Name: spec.GetName()}
				for _, t := range spec.GetTargets() {
					ref.Targets = append(ref.Targets, t.GetName())
				}
				w, err = call(ctx, s, "start workflow "+spec.GetName(), func(ctx context.Context) (*rowliftv1.Workflow, error) {
					return s.client.StartWorkflow(ctx, ref)
				})
				if err != nil {
					return fmt.Errorf("workflow %s was created but not started (start it with `rowlift workflow start %s`): %w", spec.GetName(), spec.GetName(), err)
				}
			}
			if s.flags.output == "json" {
				return printJSON(s.stdout, w)
			}
			if c.start {
				fmt.Fprintf(s.stdout, "started workflow %s: %s\nfollow it with: rowlift workflow watch %s\n", spec.GetName(), statustext.StateLine(w.GetStatus()), spec.GetName())
			} else {
				fmt.Fprintf(s.stdout, "start it with: rowlift workflow start %s\n", spec.GetName())
			}
			return nil
		})
}

// reverse adds what a switch needs to the spec's sources and targets.
func (c *createFlags) reverse(spec *rowliftv1.WorkflowSpec) error {
	for _, item := range c.reverseTargets {
		name, target, ok := strings.Cut(item, "=")
		var src *rowliftv1.SourceShard
		for _, s := range spec.GetSources() {
			if s.GetName() == name {
				src = s
			}
		}
		if !ok || target == "" || src == nil {
			return usagef("--reverse-target %q: want SOURCE=NAME with SOURCE one of the --source names, e.g. main=main-source", item)
		}
		if err := state.CheckTargetName(target); err != nil {
			return usagef("--reverse-target %q: %v", item, err)
		}
		src.ReverseTarget = target
	}
	for _, item := range c.reverseStreamers {
		name, addr, ok := strings.Cut(item, "=")
		var dst *rowliftv1.TargetShard
		for _, t := range spec.GetTargets() {
			if t.GetName() == name {
				dst = t
			}
		}
		if !ok || addr == "" || dst == nil {
			return usagef("--reverse-streamer %q: want TARGET=ADDR with TARGET one of the --target names, e.g. main=10.0.0.7:7001", item)
		}
		dst.ReverseStreamerAddress = addr
	}
	return nil
}
