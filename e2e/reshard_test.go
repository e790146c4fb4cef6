package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/rowlift/rowlift/internal/frozen"
	"github.com/rowlift/rowlift/internal/grpcopt"
	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/keyrange"
	"github.com/rowlift/rowlift/internal/reshard"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/testhook"
	"github.com/rowlift/rowlift/internal/vindex"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// shard is one server of a reshard with its rowlift process: a source with
// its streamer or a target with its applier.
type shard struct {
	name, keyRange string
	srv            *sandbox.Server
	db             *sql.DB
	proc           *proc
	addr           string       // a source's streamer address
	store          *state.Store // the server's state (a source's too when the env switches)
	// revAddr is the address of a target's reverse streamer when the env
	// switches (a source then has a reverse applier); revProc is that process.
	revAddr string
	revProc *proc
	// base is a source's first key: its race tables were filled, and its
	// writers write, from there (fillRaceTablesAt).
	base int
}

// shardEnv is N source and M target servers, each with its own streamer or
// applier, and one coordinator over every target.
type shardEnv struct {
	t                *testing.T
	sources, targets []*shard
	ctl              rowliftv1.ControlClient
	// servers finds a shard by its name in a workflow: a source is also the
	// target "origin-NAME" of the reverse workflow.
	servers map[string]*shard
	// frozen holds the servers whose race tables a cutover renamed to their
	// frozen twins.
	frozen map[string]bool
	// cli runs the rowlift CLI against the coordinator.
	cli *cli
}

// shardSetup is what newShardEnv sets up beyond its arguments.
type shardSetup struct {
	// sourceNames and targetNames name the shards (default s0, s1, ... and
	// t0, t1, ...).
	sourceNames, targetNames []string
	// sourceBase is the distance between two sources' keys (0: every source
	// holds the same keys).
	sourceBase int
}

// shardOption changes newShardEnv's setup.
type shardOption func(*shardSetup)

// withShardNames names the sources and the targets.
func withShardNames(sources, targets []string) shardOption {
	return func(s *shardSetup) { s.sourceNames, s.targetNames = sources, targets }
}

// withDisjointSources fills source i's race tables from key i*base on, so no
// two sources share a key (base must exceed the keys the writers write).
func withDisjointSources(base int) shardOption {
	return func(s *shardSetup) { s.sourceBase = base }
}

// shardName is the i-th name of names, or prefix and i.
func shardName(names []string, prefix string, i int) string {
	if i < len(names) {
		return names[i]
	}
	return fmt.Sprintf("%s%d", prefix, i)
}

// newShardEnv starts the servers and processes of an N→M reshard; ranges are
// the sources' and the targets' key ranges ("" for a lone source's whole
// keyspace). Every source starts with the race tables filled alike.
func newShardEnv(t *testing.T, flavor sandbox.Flavor, keys int, hooks []string, sourceRanges, targetRanges []string, reversible bool,
	opts ...shardOption) *shardEnv {
	t.Helper()
	var setup shardSetup
	for _, o := range opts {
		o(&setup)
	}
	e := &shardEnv{t: t, servers: map[string]*shard{}, frozen: map[string]bool{}}
	coordArgs := []string{"coordinator"}
	for i, kr := range sourceRanges {
		s := &shard{name: shardName(setup.sourceNames, "s", i), keyRange: kr, base: i * setup.sourceBase,
			srv: sandboxtest.Start(t, sandbox.Options{Flavor: flavor})}
		s.db = sandboxtest.Open(t, s.srv, "")
		fillRaceTablesAt(t, s.db, s.base, keys)
		port, err := sandbox.FreePort()
		require.NoError(t, err)
		s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		s.proc = startProc(t, "streamer-"+s.name, hooks, "streamer", "--listen", s.addr, "--source-dsn", s.srv.DSN(""), "--log-level", "debug")
		e.sources = append(e.sources, s)
		e.servers[s.name], e.servers["origin-"+s.name] = s, s
		if reversible {
			store, err := state.Open(context.Background(), s.db)
			require.NoError(t, err)
			s.store = store
			s.revProc = startProc(t, "reverse-applier-"+s.name, hooks, "applier", "--target-dsn", s.srv.DSN(""), "--poll-interval", "50ms")
			coordArgs = append(coordArgs, "--target", "origin-"+s.name+"="+s.srv.DSN(""))
		}
	}
	for i, kr := range targetRanges {
		d := &shard{name: shardName(setup.targetNames, "t", i), keyRange: kr, srv: sandboxtest.Start(t, sandbox.Options{Flavor: flavor})}
		d.db = sandboxtest.Open(t, d.srv, "")
		store, err := state.Open(context.Background(), d.db)
		require.NoError(t, err)
		d.store = store
		d.proc = startProc(t, "applier-"+d.name, hooks, "applier", "--target-dsn", d.srv.DSN(""), "--poll-interval", "50ms", "--log-level", "debug")
		e.targets = append(e.targets, d)
		e.servers[d.name] = d
		if reversible {
			port, err := sandbox.FreePort()
			require.NoError(t, err)
			d.revAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			d.revProc = startProc(t, "reverse-streamer-"+d.name, hooks, "streamer", "--listen", d.revAddr, "--source-dsn", d.srv.DSN(""))
		}
		coordArgs = append(coordArgs, "--target", d.name+"="+d.srv.DSN(""))
	}
	port, err := sandbox.FreePort()
	require.NoError(t, err)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	startProc(t, "coordinator", nil, append(coordArgs, "--listen", addr)...)
	conn, err := grpc.NewClient(addr, grpcopt.DialOptions(nil)...)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	e.ctl = rowliftv1.NewControlClient(conn)
	e.cli = newCLIAt(t, addr)
	call(t, func(ctx context.Context) (*rowliftv1.ListWorkflowsResponse, error) {
		return e.ctl.ListWorkflows(ctx, &rowliftv1.ListWorkflowsRequest{})
	})
	return e
}

// raceShardTables are the race tables as a reshard splits them: by a hashed
// integer, by xxhash of a case-insensitive string, and by the numeric value
// (every id is below 2^56, so all of types lands in the lowest range). With
// several writable shards (several sources, or the targets after a switch)
// the writers may write one key in two spellings ('eu' and 'EU') on two of
// them, which xxhash of the bytes places apart and no merge can hold, so
// composite is split by its integer id instead; and uniq, whose unique key
// lacks its sharding column, is a reference table.
func raceShardTables(manyWritable bool) []*rowliftv1.TableSpec {
	if manyWritable {
		return []*rowliftv1.TableSpec{
			{Name: "ints", ShardingColumn: "id"},
			{Name: "composite", ShardingColumn: "id"},
			{Name: "uniq", Reference: true},
			{Name: "types", ShardingColumn: "id", ShardingFunction: "numeric"},
		}
	}
	return []*rowliftv1.TableSpec{
		{Name: "ints", ShardingColumn: "id"},
		{Name: "composite", ShardingColumn: "region", ShardingFunction: "xxhash"},
		{Name: "uniq", ShardingColumn: "id"},
		{Name: "types", ShardingColumn: "id", ShardingFunction: "numeric"},
	}
}

// spec is the reshard workflow of the env's shards.
func (e *shardEnv) spec(name string, tables []*rowliftv1.TableSpec) *rowliftv1.WorkflowSpec {
	spec := &rowliftv1.WorkflowSpec{Name: name, SourceDatabase: "race", Tables: tables,
		Options: &rowliftv1.WorkflowOptions{ChunkRows: 97, ParallelTables: 2}}
	for _, s := range e.sources {
		src := &rowliftv1.SourceShard{Name: s.name, StreamerAddress: s.addr, KeyRange: s.keyRange}
		if s.store != nil {
			src.ReverseTarget = "origin-" + s.name
		}
		spec.Sources = append(spec.Sources, src)
	}
	for _, d := range e.targets {
		spec.Targets = append(spec.Targets, &rowliftv1.TargetShard{Name: d.name, KeyRange: d.keyRange, ReverseStreamerAddress: d.revAddr})
	}
	return spec
}

// writers runs the race writers with each transaction sent at random to a
// server of the side route points to (the sources, or the targets after a
// switch): rows then also land outside their server's range, which a reshard
// must leave behind, as Vitess leaves a shard's stray rows.
func (e *shardEnv) writers(seed uint64, keys int, route *atomic.Pointer[[]*shard], committed *atomic.Int64) (stop func() int) {
	ctx, cancel := context.WithCancel(context.Background())
	wait := startRoutedWriters(ctx, func() *sql.DB {
		side := *route.Load()
		return side[rand.IntN(len(side))].db
	}, seed, 0, keys, committed, nil)
	return func() int {
		cancel()
		return wait()
	}
}

// waitCaughtUp waits until every target of the workflow has applied every
// transaction of the sources it streams from.
func (e *shardEnv) waitCaughtUp(spec *rowliftv1.WorkflowSpec, timeout time.Duration) {
	e.t.Helper()
	want := map[string]string{}
	for _, src := range spec.GetSources() {
		want[src.GetName()] = position(e.t, e.servers[src.GetName()].db)
	}
	deadline := time.Now().Add(timeout)
	for _, tg := range spec.GetTargets() {
		d := e.servers[tg.GetName()]
		for {
			behind := ""
			streams, err := d.store.Streams(context.Background(), spec.GetName())
			require.NoError(e.t, err)
			require.NotEmpty(e.t, streams, "target %s runs no stream", tg.GetName())
			for _, st := range streams {
				if ok, err := gtid.Covers(st.Position, want[st.Source]); err != nil || !ok {
					behind = fmt.Sprintf("stream %s → %s at %q (%s), want %s", st.Source, tg.GetName(), st.Position, st.Message, want[st.Source])
				}
			}
			if behind == "" {
				break
			}
			if time.Now().After(deadline) {
				e.t.Fatalf("timed out waiting for %s to catch up: %s", spec.GetName(), behind)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// waitState waits until the workflow is in st on every target. A target
// that stopped on a divergence fails the test with the story of the row it
// names (explainDiffs).
func (e *shardEnv) waitState(spec *rowliftv1.WorkflowSpec, st state.State, timeout time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for _, d := range e.targets {
		for {
			w, err := d.store.Workflow(context.Background(), spec.GetName())
			require.NoError(e.t, err)
			if w.State == st {
				break
			}
			if w.State == state.Error {
				e.t.Fatalf("target %s: %s\n%s", d.name, w.Message, e.explainDivergence(spec, d.name, w.Message))
			}
			if time.Now().After(deadline) {
				e.t.Fatalf("timed out waiting for %s on target %s: state %s (%s)", st, d.name, w.State, w.Message)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// shardRows reads a table as key → row, keeping the rows whose keyspace ID
// (of column under fn) keep accepts; a nil keep keeps every row.
func (e *shardEnv) shardRows(server, table string, key []string, column string, fn vindex.Func, keep func(uint64) bool) map[string]string {
	t := e.t
	t.Helper()
	name := table
	if e.frozen[e.servers[server].name] {
		name, _ = frozen.Name(table)
	}
	rows, err := e.servers[server].db.Query("SELECT * FROM race." + rowcodec.Ident(name))
	require.NoError(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	idx := func(name string) int {
		i := slices.IndexFunc(cols, func(c string) bool { return strings.EqualFold(c, name) })
		require.GreaterOrEqual(t, i, 0, "column %s of %s", name, table)
		return i
	}
	raw := make([]sql.RawBytes, len(cols))
	dest := make([]any, len(raw))
	for i := range raw {
		dest[i] = &raw[i]
	}
	out := map[string]string{}
	for rows.Next() {
		require.NoError(t, rows.Scan(dest...))
		if keep != nil {
			id, err := fn.ID(raw[idx(column)])
			require.NoError(t, err)
			if !keep(id) {
				continue
			}
		}
		var k []string
		for _, c := range key {
			k = append(k, string(raw[idx(c)]))
		}
		var v []string
		for _, b := range raw {
			if b == nil {
				v = append(v, "NULL")
			} else {
				v = append(v, strconv.Quote(string(b)))
			}
		}
		out[strings.Join(k, "/")] = strings.Join(v, ",")
	}
	require.NoError(t, rows.Err())
	return out
}

// raceKeys are the primary keys of the race tables and of the wide table
// (fillWide) some reshards move beside them.
var raceKeys = map[string][]string{"ints": {"id"}, "composite": {"region", "id"}, "uniq": {"id"}, "types": {"id"}, "blobs": {"id"}}

// checkShards compares every target of the workflow with what it must hold:
// for a sharded table, each overlapping source's rows whose keyspace ID is in
// both ranges; for a reference table, the rows of the source that streams it
// there. It also checks that the targets together hold every source row of
// its own source's range exactly once. A server a cutover froze is read under
// its tables' frozen names. With strays, rows outside a target's range on
// it are left out: an application that wrote to a target shard after a
// switch put them there (as it would in Vitess), not rowlift.
func (e *shardEnv) checkShards(spec *rowliftv1.WorkflowSpec, strays bool) {
	e.t.Helper()
	for _, tbl := range spec.GetTables() {
		fn, err := vindex.Parse(tbl.GetShardingFunction())
		require.NoError(e.t, err)
		key := raceKeys[tbl.GetName()]
		homes := map[string]string{} // source row key → the target holding it
		for _, tg := range spec.GetTargets() {
			streams, err := reshard.ForTarget(spec, tg.GetName())
			require.NoError(e.t, err)
			want := map[string]string{}
			for _, st := range streams {
				if !slices.ContainsFunc(st.Spec.GetTables(), func(x *rowliftv1.TableSpec) bool { return x.GetName() == tbl.GetName() }) {
					continue
				}
				var keep func(uint64) bool
				if st.Filtered && !tbl.GetReference() {
					keep = st.Range.Contains
				}
				for k, v := range e.shardRows(st.Source.GetName(), tbl.GetName(), key, tbl.GetShardingColumn(), fn, keep) {
					want[k] = v
					if !tbl.GetReference() {
						require.NotContains(e.t, homes, st.Source.GetName()+":"+k, "row %s of %s reaches two targets", k, tbl.GetName())
						homes[st.Source.GetName()+":"+k] = tg.GetName()
					}
				}
			}
			var own func(uint64) bool
			if strays && !tbl.GetReference() {
				tr, _ := keyrange.Parse(tg.GetKeyRange())
				own = tr.Contains
			}
			got := e.shardRows(tg.GetName(), tbl.GetName(), key, tbl.GetShardingColumn(), fn, own)
			var diffs []string
			for k, v := range want {
				if g, ok := got[k]; !ok {
					diffs = append(diffs, "missing "+k)
				} else if g != v {
					diffs = append(diffs, fmt.Sprintf("differs %s: source %s, target %s", k, v, g))
				}
			}
			for k := range got {
				if _, ok := want[k]; !ok {
					diffs = append(diffs, "extra "+k)
				}
			}
			slices.Sort(diffs)
			if len(diffs) > 0 {
				e.t.Errorf("%s: target %s (%s), table %s: %d rows expected:\n%s\n%s", spec.GetName(), tg.GetName(), tg.GetKeyRange(), tbl.GetName(), len(want),
					strings.Join(diffs, "\n"), e.explainDiffs(spec, tg.GetName(), tbl.GetName(), key, diffs))
				e.t.FailNow()
			}
		}
		if tbl.GetReference() {
			continue
		}
		// The union: every source row of its source's range has one home.
		for _, src := range spec.GetSources() {
			var keep func(uint64) bool // a move's sources hold their whole tables
			if sr, err := keyrange.Parse(src.GetKeyRange()); err == nil {
				keep = sr.Contains
			}
			for k := range e.shardRows(src.GetName(), tbl.GetName(), key, tbl.GetShardingColumn(), fn, keep) {
				require.Contains(e.t, homes, src.GetName()+":"+k, "row %s of %s on source %s reached no target", k, tbl.GetName(), src.GetName())
			}
		}
	}
}

// divergedRow finds the table and the key in an applier's divergence
// message: `... to ints: no row (id="360") to delete; ...`; keyValue finds
// each of the key's values.
var (
	divergedRow = regexp.MustCompile(`divergence applying source transaction \S+ to (\S+): [^(]*\(([^)]*)\)`)
	keyValue    = regexp.MustCompile(`="([^"]*)"`)
)

// divergedKey returns the table and the key (its values joined by "/", as
// explainDiffs takes it) that a divergence message names.
func divergedKey(msg string) (table, key string, ok bool) {
	m := divergedRow.FindStringSubmatch(msg)
	if m == nil {
		return "", "", false
	}
	var values []string
	for _, v := range keyValue.FindAllStringSubmatch(m[2], -1) {
		values = append(values, v[1])
	}
	return m[1], strings.Join(values, "/"), true
}

// explainDivergence is explainDiffs for the row a divergence message names,
// or a line saying the message names none.
func (e *shardEnv) explainDivergence(spec *rowliftv1.WorkflowSpec, target, msg string) string {
	table, key, ok := divergedKey(msg)
	if !ok {
		return "(the message names no row)"
	}
	return e.explainDiffs(spec, target, table, raceKeys[table], []string{"diverged " + key})
}

// explainDiffs tells a wrong row's story: the target's streams (position,
// copy state) and, for the first few differing keys, their row events in
// each source's binlog with GTIDs, so that one failure says whether the
// target missed a transaction, applied one twice or copied a row off its
// fence.
func (e *shardEnv) explainDiffs(spec *rowliftv1.WorkflowSpec, target, table string, keyCols, diffs []string) string {
	var b strings.Builder
	d := e.servers[target]
	ctx := context.Background()
	streams, err := d.store.Streams(ctx, spec.GetName())
	fmt.Fprintf(&b, "target %s streams (err %v):\n", target, err)
	for _, st := range streams {
		fmt.Fprintf(&b, "  from %s at %s (%s)\n", st.Source, st.Position, st.Message)
		copies, err := d.store.CopyState(ctx, spec.GetName(), st.Source)
		if err != nil {
			fmt.Fprintf(&b, "    copy state: %v\n", err)
		}
		for _, c := range copies {
			if c.Table == table {
				fmt.Fprintf(&b, "    copy of %s: last key %v, %d rows, done %v\n", c.Table, c.LastPK, c.RowsCopied, c.Done)
			}
		}
	}
	for i, diff := range diffs {
		if i == 3 {
			fmt.Fprintf(&b, "(and %d more)\n", len(diffs)-i)
			break
		}
		fields := strings.Fields(diff)
		key := strings.TrimSuffix(fields[1], ":")
		for _, src := range spec.GetSources() {
			s := e.servers[src.GetName()]
			fmt.Fprintf(&b, "%s: row events of %s key %s on source %s (now at %s):\n%s", diff, table, key, src.GetName(),
				position(e.t, s.db), rowHistory(e.t, s.srv, s.db, table, keyCols, strings.Split(key, "/")))
		}
	}
	return b.String()
}

// runReshard runs one N→M reshard of the race tables under the race writers,
// with kills of a streamer, an applier and a source server when kill is set,
// and checks every target shard.
func runReshard(t *testing.T, flavor sandbox.Flavor, sourceRanges, targetRanges []string, keys int, kill bool, alter string) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 7))
	hooks := []string{testhook.EnvVar + fmt.Sprintf("=chunk_read=0-20ms,replay_exec=0-5ms,seed=%d", seed)}
	e := newShardEnv(t, flavor, keys, hooks, sourceRanges, targetRanges, false)
	spec := e.spec("split", raceShardTables(len(sourceRanges) > 1))
	if alter != "" {
		spec.Options.OnDdl = rowliftv1.OnDDL_ON_DDL_EXEC
	}
	var route atomic.Pointer[[]*shard]
	route.Store(&e.sources)
	stop := e.writers(seed, keys, &route, new(atomic.Int64))
	defer stop()

	w := call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) {
		return e.ctl.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: spec})
	})
	if len(sourceRanges) == 1 {
		require.Contains(t, strings.Join(w.GetWarnings(), "\n"), "table uniq: unique key email (email) does not contain the sharding column id",
			"a unique key a reshard makes per-shard is named")
	}
	streams, err := reshard.Streams(spec)
	require.NoError(t, err)
	require.Len(t, w.GetStatus().GetStreams(), len(streams), "one stream per overlapping (source, target) pair")
	for _, st := range w.GetStatus().GetStreams() {
		require.NotEmpty(t, st.GetKeyRange(), "stream %s → %s shows its range", st.GetSource(), st.GetTarget())
	}
	call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) {
		return e.ctl.StartWorkflow(ctx, &rowliftv1.WorkflowRef{Name: "split"})
	})
	if alter != "" {
		// In the middle of the copy, on every source: each target applies it
		// once, from each stream that reaches it. Once every target copies,
		// so that the statement is in every stream, not in the tables the
		// targets are created from.
		for _, tg := range e.targets {
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
				var n int
				if tg.db.QueryRow("SELECT COUNT(*) FROM race.ints").Scan(&n) == nil && n > 0 {
					break
				}
				require.True(t, time.Now().Before(deadline), "the copy into %s did not start", tg.name)
			}
		}
		for _, src := range e.sources {
			sandboxtest.Exec(t, src.db, alter)
		}
		t.Logf("on every source: %s", alter)
	}
	if kill {
		time.Sleep(time.Duration(100+rng.IntN(300)) * time.Millisecond)
		e.sources[0].proc.kill()
		t.Log("SIGKILL streamer of s0")
		e.targets[len(e.targets)-1].proc.kill()
		t.Log("SIGKILL applier of the last target")
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		e.sources[0].proc.restart()
		e.targets[len(e.targets)-1].proc.restart()
		time.Sleep(time.Duration(200+rng.IntN(300)) * time.Millisecond)
		src := e.sources[len(e.sources)-1]
		require.NoError(t, src.srv.Kill())
		t.Logf("SIGKILL source server %s", src.name)
		require.NoError(t, src.srv.Restart(context.Background()))
	}
	e.waitState(spec, state.Running, 3*time.Minute)
	time.Sleep(300 * time.Millisecond) // replay after the copy too
	writes := stop()
	t.Logf("%d source transactions", writes)
	e.waitCaughtUp(spec, 2*time.Minute)
	e.checkShards(spec, false)

	st := call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) {
		return e.ctl.GetWorkflow(ctx, &rowliftv1.WorkflowRef{Name: "split"})
	}).GetStatus()
	var copied int64
	for _, s := range st.GetStreams() {
		copied += s.GetRowsCopied()
	}
	require.Equal(t, st.GetRowsCopied(), copied, "the streams' rows add up to the workflow's")
	require.Equal(t, rowliftv1.WorkflowPhase_WORKFLOW_PHASE_RUNNING, st.GetPhase())
	if alter != "" {
		for _, tg := range e.targets {
			require.Equal(t, columnsOf(t, e.sources[0].db, "race", "ints"), columnsOf(t, tg.db, "race", "ints"),
				"target %s has the source's columns", tg.name)
			require.Equal(t, indexesOf(t, e.sources[0].db, "race", "ints"), indexesOf(t, tg.db, "race", "ints"),
				"target %s has the source's keys", tg.name)
		}
	}
}

// indexesOf lists a table's index names, in order.
func indexesOf(t *testing.T, db *sql.DB, database, table string) string {
	t.Helper()
	var keys string
	require.NoError(t, db.QueryRow("SELECT GROUP_CONCAT(DISTINCT INDEX_NAME ORDER BY INDEX_NAME) FROM information_schema.STATISTICS "+
		"WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", database, table).Scan(&keys))
	return keys
}

// TestReshard splits, re-splits and merges the race tables under random
// traffic with primary key and keyspace ID changes: 1→2 (with an ALTER on the
// source during the copy, on_ddl EXEC, and kills of a streamer, an applier and
// the source server), 1→4, 2→3 (uneven, with a CREATE INDEX on both sources
// during the copy, which the middle target gets from each), 4→2 and 2→1.
// Each target holds exactly its range's rows of the sources it overlaps.
// ROWLIFT_RESHARD_MYSQL=1 runs every case on MySQL too (make soak-reshard,
// make stress).
func TestReshard(t *testing.T) {
	keys := envInt("ROWLIFT_RESHARD_KEYS", 600)
	allMySQL := envInt("ROWLIFT_RESHARD_MYSQL", 0) == 1
	for _, c := range []struct {
		name             string
		sources, targets []string
		kill             bool
		// mysql runs the case on MySQL servers too (two cases keep the
		// flavor's share of make test small).
		mysql bool
		// alter runs on the sources during the copy, with on_ddl EXEC.
		alter string
	}{
		{"1to2", []string{""}, []string{"-80", "80-"}, true, true, "ALTER TABLE race.ints MODIFY v VARCHAR(64)"},
		{"1to4", []string{""}, []string{"-40", "40-80", "80-c0", "c0-"}, false, false, ""},
		{"2to3", []string{"-80", "80-"}, []string{"-55", "55-aa", "aa-"}, false, true, "CREATE INDEX kn ON race.ints (n)"},
		{"4to2", []string{"-40", "40-80", "80-c0", "c0-"}, []string{"-80", "80-"}, false, false, ""},
		{"2to1", []string{"-80", "80-"}, []string{"-"}, false, false, ""},
	} {
		flavors := []sandbox.Flavor{sandbox.MariaDB}
		if c.mysql || allMySQL {
			flavors = append(flavors, sandbox.MySQL)
		}
		for _, flavor := range flavors {
			t.Run(c.name+"/"+string(flavor), func(t *testing.T) {
				t.Parallel() // two cases at a time (go test's -parallel is GOMAXPROCS)
				runReshard(t, flavor, c.sources, c.targets, keys, c.kill, c.alter)
			})
		}
	}
}

// TestReshardRefusals: each bad reshard request is refused with the range,
// table, column or function named, and nothing is written on any target.
func TestReshardRefusals(t *testing.T) {
	e := newShardEnv(t, sandbox.MariaDB, 30, nil, []string{""}, []string{"-80", "80-"}, false)
	sandboxtest.Exec(t, e.sources[0].db, "CREATE TABLE race.pad (id INT PRIMARY KEY, k VARCHAR(8))")
	for _, c := range []struct {
		name    string
		edit    func(*rowliftv1.WorkflowSpec)
		code    codes.Code
		message string
	}{
		{"gap", func(s *rowliftv1.WorkflowSpec) { s.Targets[1].KeyRange = "90-" }, codes.InvalidArgument,
			"targets: key ranges leave 80-90 uncovered"},
		{"overlap", func(s *rowliftv1.WorkflowSpec) { s.Targets[1].KeyRange = "70-" }, codes.InvalidArgument,
			"key ranges -80 and 70- overlap"},
		{"bad range", func(s *rowliftv1.WorkflowSpec) { s.Targets[0].KeyRange = "-8" }, codes.InvalidArgument, `target t0: key range "-8"`},
		{"no sharding column", func(s *rowliftv1.WorkflowSpec) { s.Tables[0].ShardingColumn = "" }, codes.InvalidArgument,
			"table ints has no sharding column: give --sharding-column ints=COLUMN[:FUNCTION]"},
		{"unknown function", func(s *rowliftv1.WorkflowSpec) { s.Tables[0].ShardingFunction = "md5" }, codes.InvalidArgument,
			"table ints: "},
		{"column not in table", func(s *rowliftv1.WorkflowSpec) { s.Tables[0].ShardingColumn = "nope" }, codes.InvalidArgument,
			"sharding column nope is not among its streamed columns"},
		{"hash of a string", func(s *rowliftv1.WorkflowSpec) { s.Tables[1].ShardingFunction = "hash" }, codes.FailedPrecondition,
			"sharding column region is varchar, but hash takes integer columns only"},
		{"reference and sharded", func(s *rowliftv1.WorkflowSpec) { s.Tables[0].Reference = true }, codes.InvalidArgument,
			"table ints has sharding column id and is a reference table"},
		{"unknown target", func(s *rowliftv1.WorkflowSpec) { s.Targets[1].Name = "nowhere" }, codes.InvalidArgument, "nowhere"},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec := e.spec("bad", raceShardTables(false))
			c.edit(spec)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := e.ctl.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: spec})
			require.Equal(t, c.code, status.Code(err), "%v", err)
			require.ErrorContains(t, err, c.message)
			for _, d := range e.targets {
				ws, err := d.store.Workflows(context.Background())
				require.NoError(t, err)
				require.Empty(t, ws, "target %s has nothing written", d.name)
			}
		})
	}
}

// TestReshardCutover is the end of a 1→2 split under the race writers:
// verify (clean), switch (the writers move to the target shards, at random,
// and the reverse workflow merges them back 2→1 into the source's frozen
// tables, across SIGKILL of its applier and of a streamer), reverse, switch
// again, complete; every side checked after each step.
func TestReshardCutover(t *testing.T) {
	seed := testSeed(t)
	keys := envInt("ROWLIFT_RESHARD_KEYS", 600)
	e := newShardEnv(t, sandbox.MariaDB, keys, nil, []string{""}, []string{"-80", "80-"}, true)
	// Without uniq: writes to the two shards after the switch may take the
	// same email, which no merge back can hold (the creation warning says so);
	// as a reference table, writes to the second shard would never go back.
	tables := slices.DeleteFunc(raceShardTables(true), func(t *rowliftv1.TableSpec) bool { return t.GetName() == "uniq" })
	spec := e.spec("split", tables)
	var route atomic.Pointer[[]*shard]
	route.Store(&e.sources)
	var committed atomic.Int64
	stop := e.writers(seed, keys, &route, &committed)
	defer func() { stop() }()
	waitWrites := func(what string) {
		from := committed.Load()
		deadline := time.Now().Add(time.Minute)
		for committed.Load() < from+2*raceWriters {
			require.True(t, time.Now().Before(deadline), "no writes %s", what)
			time.Sleep(20 * time.Millisecond)
		}
	}
	ref := &rowliftv1.WorkflowRef{Name: "split"}
	call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) {
		return e.ctl.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: spec})
	})
	call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) { return e.ctl.StartWorkflow(ctx, ref) })
	e.waitState(spec, state.Running, 3*time.Minute)

	verifyClean(t, e.ctl, ref)

	reverse := proto.Clone(spec).(*rowliftv1.WorkflowSpec)
	reverse.Name = "split_reverse"
	reverse.Sources, reverse.Targets = nil, nil
	for _, d := range e.targets {
		reverse.Sources = append(reverse.Sources, &rowliftv1.SourceShard{Name: d.name, KeyRange: d.keyRange})
	}
	reverse.Targets = []*rowliftv1.TargetShard{{Name: "origin-s0", KeyRange: "-"}}
	cut := func(direction string) {
		t.Helper()
		req := &rowliftv1.SwitchRequest{Workflow: ref, TimeoutMs: 60000}
		resp := call(t, func(ctx context.Context) (*rowliftv1.SwitchResponse, error) {
			if direction == "switch" {
				return e.ctl.SwitchWorkflow(ctx, req)
			}
			return e.ctl.ReverseWorkflow(ctx, req)
		})
		t.Logf("%s: write pause %d ms, freeze positions %v", direction, resp.GetWritePauseMs(), resp.GetFreezePositions())
		if direction == "switch" {
			route.Store(&e.targets)
			e.frozen = map[string]bool{"s0": true}
		} else {
			route.Store(&e.sources)
			e.frozen = map[string]bool{"t0": true, "t1": true}
		}
		waitWrites("after the " + direction)
	}
	// check compares the sides with the writers stopped, then starts them again.
	check := func(follower *rowliftv1.WorkflowSpec) {
		t.Helper()
		stop()
		e.waitCaughtUp(follower, 2*time.Minute)
		e.checkShards(follower, true)
		seed++
		stop = e.writers(seed, keys, &route, &committed)
	}
	cut("switch")
	// The 2→1 merge back survives SIGKILL of its applier and of a streamer.
	e.sources[0].revProc.kill()
	e.targets[1].revProc.kill()
	t.Log("SIGKILL reverse applier of s0 and reverse streamer of t1")
	waitWrites("while the reverse side is down")
	e.sources[0].revProc.restart()
	e.targets[1].revProc.restart()
	check(reverse)
	cut("reverse")
	check(spec)
	cut("switch")
	check(reverse)
	resp := call(t, func(ctx context.Context) (*rowliftv1.CompleteResponse, error) {
		return e.ctl.CompleteWorkflow(ctx, &rowliftv1.CompleteRequest{Workflow: ref})
	})
	require.Len(t, resp.GetKeptTables(), len(spec.GetTables()), "the source's frozen tables are kept: %v", resp.GetKeptTables())
	for _, s := range append(slices.Clone(e.sources), e.targets...) {
		if s.store == nil {
			continue
		}
		ws, err := s.store.Workflows(context.Background())
		require.NoError(t, err)
		require.Empty(t, ws, "complete removes every workflow from %s", s.name)
	}
}

// TestDivergedRowIsFound: the row a divergence names is found in the
// applier's message, for a one-column key and a composite one.
func TestDivergedRowIsFound(t *testing.T) {
	for msg, want := range map[string][2]string{
		`divergence applying source transaction 0-19300-143 to ints: no row (id="360") to delete; the target changed outside rowlift`: {"ints", "360"},
		`divergence applying source transaction 0-1-9 to composite: no row (region="eu", id="7") to update; the target`:               {"composite", "eu/7"},
	} {
		table, key, ok := divergedKey(msg)
		require.True(t, ok, msg)
		require.Equal(t, want, [2]string{table, key}, msg)
	}
	_, _, ok := divergedKey("copy ints: duplicate key (PRIMARY)")
	require.False(t, ok)
}
