package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// fakeControl is a Control server that records what the CLI asks and answers
// with canned workflows, so the client is tested without a coordinator.
type fakeControl struct {
	rowliftv1.UnimplementedControlServer
	mu      sync.Mutex
	created []*rowliftv1.WorkflowSpec
	calls   []string
	// fail, when set, is every call's error.
	fail error
	// updates are what WatchWorkflow sends, in order, before it waits for the
	// client to go away.
	updates []*rowliftv1.Workflow
}

func (f *fakeControl) record(call string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
	return f.fail
}

func workflowIn(name string, st rowliftv1.WorkflowState, phase rowliftv1.WorkflowPhase) *rowliftv1.Workflow {
	return &rowliftv1.Workflow{Spec: &rowliftv1.WorkflowSpec{Name: name}, Status: &rowliftv1.WorkflowStatus{State: st, Phase: phase, EtaSeconds: -1}}
}

func (f *fakeControl) CreateWorkflow(_ context.Context, req *rowliftv1.CreateWorkflowRequest) (*rowliftv1.Workflow, error) {
	if err := f.record("create " + req.GetSpec().GetName()); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.created = append(f.created, req.GetSpec())
	f.mu.Unlock()
	return workflowIn(req.GetSpec().GetName(), rowliftv1.WorkflowState_WORKFLOW_STATE_INIT, rowliftv1.WorkflowPhase_WORKFLOW_PHASE_INIT), nil
}

func (f *fakeControl) StartWorkflow(_ context.Context, ref *rowliftv1.WorkflowRef) (*rowliftv1.Workflow, error) {
	if err := f.record("start " + ref.GetName() + " " + strings.Join(ref.GetTargets(), ",")); err != nil {
		return nil, err
	}
	return workflowIn(ref.GetName(), rowliftv1.WorkflowState_WORKFLOW_STATE_COPYING, rowliftv1.WorkflowPhase_WORKFLOW_PHASE_COPYING), nil
}

func (f *fakeControl) GetWorkflow(_ context.Context, ref *rowliftv1.WorkflowRef) (*rowliftv1.Workflow, error) {
	if err := f.record("get " + ref.GetName()); err != nil {
		return nil, err
	}
	return workflowIn(ref.GetName(), rowliftv1.WorkflowState_WORKFLOW_STATE_RUNNING, rowliftv1.WorkflowPhase_WORKFLOW_PHASE_RUNNING), nil
}

func (f *fakeControl) WatchWorkflow(req *rowliftv1.WatchWorkflowRequest, stream rowliftv1.Control_WatchWorkflowServer) error {
	if err := f.record("watch " + req.GetWorkflow().GetName()); err != nil {
		return err
	}
	for _, w := range f.updates {
		if err := stream.Send(w); err != nil {
			return err
		}
	}
	<-stream.Context().Done()
	return nil
}

// startFake serves f with opts on a free local port and returns its address.
func startFake(t *testing.T, f *fakeControl, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer(opts...)
	rowliftv1.RegisterControlServer(gs, f)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

// isolate keeps the machine's own environment and config file out of a test.
func isolate(t *testing.T) {
	t.Helper()
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	for _, f := range []string{"coordinator", "output", "config", "table", "chunk-rows", "timeout", "tls-cert", "tls-key", "tls-ca", "token-file"} {
		t.Setenv(envName(f), "")
		require.NoError(t, os.Unsetenv(envName(f)))
	}
}

// writeConfig writes the default config file ($XDG_CONFIG_HOME/rowlift/config).
func writeConfig(t *testing.T, lines ...string) {
	t.Helper()
	path := filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "rowlift", "config")
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
}

var createArgs = []string{"workflow", "create", "--name", "w", "--source", "main=127.0.0.1:7001", "--target", "main", "--source-database", "shop"}

func TestCreateSendsTheSpecOfItsFlags(t *testing.T) {
	isolate(t)
	f := &fakeControl{}
	addr := startFake(t, f)
	out, err := runCLI(t, "workflow", "create", "--coordinator", addr, "--name", "shop-move",
		"--source", "main=10.0.0.5:7001", "--target", "main=10.0.0.6:7002", "--target", "other",
		"--source-database", "shop", "--target-database", "shop_new",
		"--table", "orders:id,total", "--tables", "customers, items",
		"--chunk-rows", "5000", "--chunk-bytes", "1048576", "--parallel-tables", "3", "--apply-workers", "8", "--commit-batch-items", "16",
		"--commit-batch-ms", "20", "--out-of-order-commit", "--on-ddl", "ignore", "--copy-method", "insert",
		"--skip-create-tables", "--allow-nonempty-target", "--keep-secondary-keys", "--throttle-source-threads-running", "50", "--start")
	require.NoError(t, err, out)
	want := &rowliftv1.WorkflowSpec{
		Name:           "shop-move",
		Sources:        []*rowliftv1.SourceShard{{Name: "main", StreamerAddress: "10.0.0.5:7001"}},
		Targets:        []*rowliftv1.TargetShard{{Name: "main", ApplierAddress: "10.0.0.6:7002"}, {Name: "other"}},
		SourceDatabase: "shop",
		TargetDatabase: "shop_new",
		Tables:         []*rowliftv1.TableSpec{{Name: "orders", Columns: []string{"id", "total"}}, {Name: "customers"}, {Name: "items"}},
		Options: &rowliftv1.WorkflowOptions{
			ChunkRows: 5000, ChunkBytes: 1 << 20, ParallelTables: 3, ApplyWorkers: 8, CommitBatchItems: 16, CommitBatchMs: 20,
			OutOfOrderCommit: true, OnDdl: rowliftv1.OnDDL_ON_DDL_IGNORE, CopyMethod: rowliftv1.CopyMethod_COPY_METHOD_INSERT,
			SkipCreateTables: true, AllowNonemptyTarget: true, KeepSecondaryKeys: true,
			Throttle: &rowliftv1.Throttle{Source: &rowliftv1.ThrottleLimits{ThreadsRunning: 50}},
		},
	}
	require.Len(t, f.created, 1)
	require.True(t, proto.Equal(want, f.created[0]), "got %v", f.created[0])
	require.Equal(t, []string{"create shop-move", "start shop-move main,other"}, f.calls)
	require.Equal(t, "created workflow shop-move: init\nstarted workflow shop-move: copying\n"+
		"follow it with: rowlift workflow watch shop-move\n", out)
}

func TestCreateFlagErrorsAreUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--source", "main"}, `--source "main": want NAME=STREAMER_ADDR`},
		{[]string{"--source", "a=x:1", "--source", "a=y:1"}, "source a is named twice"},
		{[]string{"--target", "=x:1"}, `--target "=x:1": want NAME or NAME=APPLIER_ADDR`},
		{[]string{"--target", "shard.2"}, `--target "shard.2": target name "shard.2": use 1 to 64 letters, digits, '_' or '-'`},
		{[]string{"--target", "a b=80-", "--table", "t"}, `--target "a b=80-": target name "a b": use 1 to 64`},
		{[]string{"--table", "t", "--reverse-target", "main=old:db"}, `--reverse-target "main=old:db": target name "old:db": use 1 to 64`},
		{[]string{"--table", "t", "--tables", "u,t"}, `--tables "u,t": table t is named twice`},
		{[]string{"--table", "t:a,,b"}, "empty column name"},
		{[]string{"--tables", "a,,b"}, "empty table name"},
		{[]string{"--on-ddl", "apply", "--table", "t"}, `--on-ddl "apply": want exec, stop or ignore`},
		{[]string{"--copy-method", "copy", "--table", "t"}, "want auto, load-data or insert"},
		{[]string{"--apply-workers", "-1", "--table", "t"}, "--apply-workers -1: must be between 0"},
		{[]string{"--chunk-rows", "-5", "--table", "t"}, "--chunk-rows -5: must be 0 (the default) or more"},
		{[]string{"--chunk-bytes", "-1", "--table", "t"}, "--chunk-bytes -1: must be 0 (the default) or more"},
		{nil, "no table to move"},
		{[]string{"--table", "t", "--shards", "3"}, "--shards 3: 3 shards: the keyspace splits evenly into 1, 2, 4"},
		{[]string{"--table", "t", "--shards", "2"}, "--shards 2: give exactly 2 --target names (got 1)"},
		{[]string{"--table", "t", "--sharding-column", "u=id"}, `--sharding-column "u=id": table u is not among --table/--tables`},
		{[]string{"--table", "t", "--sharding-column", "t"}, `--sharding-column "t": want TABLE=COLUMN[:FUNCTION]`},
		{[]string{"--table", "t", "--reference-tables", "t,u"}, `--reference-tables "t,u": table u is not among`},
		{[]string{"--table", "t", "--source-range", "other=-80"}, `--source-range "other=-80": want NAME=RANGE with NAME one of the --source names`},
	} {
		t.Run(tc.want, func(t *testing.T) {
			var c createFlags
			fs := newTestFlagSet()
			c.register(fs)
			base := []string{"--name", "w", "--source", "main=h:1", "--target", "main", "--source-database", "d"}
			require.NoError(t, fs.Parse(append(base, tc.args...)))
			_, err := c.spec()
			require.ErrorContains(t, err, tc.want)
			require.Equal(t, 2, exitCode(err))
		})
	}
}

// TestCreateReshardFlags: --target NAME=RANGE (an address has a colon),
// --shards, --source-range, --sharding-column and --reference-tables.
func TestCreateReshardFlags(t *testing.T) {
	spec := func(args ...string) *rowliftv1.WorkflowSpec {
		t.Helper()
		var c createFlags
		fs := newTestFlagSet()
		c.register(fs)
		require.NoError(t, fs.Parse(append([]string{"--name", "w", "--source-database", "d", "--tables", "orders,countries"}, args...)))
		s, err := c.spec()
		require.NoError(t, err)
		return s
	}
	s := spec("--source", "old1=h:1", "--source", "old2=h:2", "--source-range", "old1=-80", "--source-range", "old2=80-",
		"--target", "a=-55", "--target", "b=55-aa", "--target", "c=10.0.0.7:7002",
		"--sharding-column", "orders=customer_id", "--sharding-column", "countries=code:xxhash")
	require.Equal(t, "-80", s.GetSources()[0].GetKeyRange())
	require.Equal(t, "80-", s.GetSources()[1].GetKeyRange())
	require.Equal(t, []string{"-55", "55-aa", ""}, []string{s.GetTargets()[0].GetKeyRange(), s.GetTargets()[1].GetKeyRange(), s.GetTargets()[2].GetKeyRange()})
	require.Equal(t, "10.0.0.7:7002", s.GetTargets()[2].GetApplierAddress())
	require.Equal(t, [2]string{"customer_id", ""}, [2]string{s.GetTables()[0].GetShardingColumn(), s.GetTables()[0].GetShardingFunction()})
	require.Equal(t, [2]string{"code", "xxhash"}, [2]string{s.GetTables()[1].GetShardingColumn(), s.GetTables()[1].GetShardingFunction()})

	s = spec("--source", "main=h:1", "--target", "n1", "--target", "n2", "--target", "n3", "--target", "n4", "--shards", "4",
		"--sharding-column", "orders=customer_id", "--reference-tables", "countries")
	var ranges []string
	for _, tg := range s.GetTargets() {
		ranges = append(ranges, tg.GetKeyRange())
	}
	require.Equal(t, []string{"-40", "40-80", "80-c0", "c0-"}, ranges)
	require.True(t, s.GetTables()[1].GetReference())
}

func TestRequiredCreateFlags(t *testing.T) {
	for flagName, want := range map[string]string{
		"--name": "--name is required", "--source-database": "--source-database is required",
		"--source": "at least one --source", "--target": "at least one --target",
	} {
		var c createFlags
		fs := newTestFlagSet()
		c.register(fs)
		var args []string
		for _, a := range [][2]string{{"--name", "w"}, {"--source", "m=h:1"}, {"--target", "m"}, {"--source-database", "d"}, {"--table", "t"}} {
			if a[0] != flagName {
				args = append(args, a[:]...)
			}
		}
		require.NoError(t, fs.Parse(args))
		_, err := c.spec()
		require.ErrorContains(t, err, want)
	}
}

// TestPrecedence checks flag > $ROWLIFT_<FLAG> > config file > default, for a
// plain flag, a repeatable one and the coordinator address itself: each layer
// below the winning one names an unreachable coordinator, so the command only
// succeeds if the winner's address is the one used.
func TestPrecedence(t *testing.T) {
	const nowhere = "127.0.0.1:1"
	for _, tc := range []struct {
		layers []string // layers that set the flags
		chunk  int64
		tables []string
	}{
		{[]string{"flag", "env", "config"}, 300, []string{"fromflag1", "fromflag2"}},
		{[]string{"flag", "config"}, 300, []string{"fromflag1", "fromflag2"}},
		{[]string{"flag", "env"}, 300, []string{"fromflag1", "fromflag2"}},
		{[]string{"env", "config"}, 200, []string{"fromenv"}},
		{[]string{"config"}, 100, []string{"fromconfig1", "fromconfig2"}},
		{nil, 0, []string{"default"}},
	} {
		t.Run(strings.Join(append([]string{"layers"}, tc.layers...), "-"), func(t *testing.T) {
			isolate(t)
			f := &fakeControl{}
			addr := startFake(t, f)
			// winner is the address for the highest layer, nowhere for the others.
			winner := func(layer string) string {
				if len(tc.layers) > 0 && tc.layers[0] == layer {
					return addr
				}
				return nowhere
			}
			args := append([]string(nil), createArgs...)
			var config []string
			for _, layer := range tc.layers {
				switch layer {
				case "flag":
					args = append(args, "--coordinator", addr, "--chunk-rows", "300", "--table", "fromflag1", "--table", "fromflag2")
				case "env":
					t.Setenv("ROWLIFT_COORDINATOR", winner("env"))
					t.Setenv("ROWLIFT_CHUNK_ROWS", "200")
					t.Setenv("ROWLIFT_TABLE", "fromenv")
				case "config":
					config = []string{"# written by the test", "", "coordinator = " + winner("config"), "chunk_rows = 100",
						"table = fromconfig1", "table=fromconfig2", "# a key of watch, which create skips:", "interval = 5s"}
				}
			}
			if len(tc.layers) == 0 {
				args = append(args, "--coordinator", addr, "--table", "default")
			}
			writeConfig(t, config...)
			out, err := runCLI(t, args...)
			require.NoError(t, err, out)
			require.Len(t, f.created, 1)
			var tables []string
			for _, tbl := range f.created[0].GetTables() {
				tables = append(tables, tbl.GetName())
			}
			require.Equal(t, tc.chunk, f.created[0].GetOptions().GetChunkRows())
			require.Equal(t, tc.tables, tables)
		})
	}
}

func newTestFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

func TestConfigFileErrors(t *testing.T) {
	isolate(t)
	addr := startFake(t, &fakeControl{})
	for _, tc := range []struct {
		lines []string
		want  string
	}{
		{[]string{"coordinator = " + addr, "chunk-rowz = 5"}, `config:2: unknown key "chunk-rowz": not a flag of any ` + "`rowlift workflow`" + ` command`},
		{[]string{"just words"}, `line 1: want "flag = value", got "just words"`},
		{[]string{"timeout = forever"}, `config:1: timeout = "forever": parse error`},
		{[]string{"config = /etc/other"}, "config:1: a config file cannot name another one"},
	} {
		writeConfig(t, tc.lines...)
		_, err := runCLI(t, "workflow", "show", "w")
		require.ErrorContains(t, err, tc.want)
		require.Equal(t, 2, exitCode(err))
	}
}

func TestExplicitConfigFile(t *testing.T) {
	isolate(t)
	f := &fakeControl{}
	addr := startFake(t, f)
	writeConfig(t, "coordinator = 127.0.0.1:1") // the default file, which --config replaces
	path := filepath.Join(t.TempDir(), "prod.conf")
	require.NoError(t, os.WriteFile(path, []byte("coordinator = \""+addr+"\"\noutput = json\n"), 0o644))

	out, err := runCLI(t, "workflow", "show", "w", "--config", path)
	require.NoError(t, err, out)
	var w rowliftv1.Workflow
	require.NoError(t, protojson.Unmarshal([]byte(out), &w), out)
	require.Equal(t, "w", w.GetSpec().GetName())

	t.Setenv("ROWLIFT_CONFIG", path)
	out, err = runCLI(t, "workflow", "show", "w", "--output", "text")
	require.NoError(t, err, out)
	require.Contains(t, out, "workflow w   running")

	_, err = runCLI(t, "workflow", "show", "w", "--config", path+".missing")
	require.ErrorContains(t, err, "config file: open "+path+".missing: no such file or directory")
	require.Equal(t, 2, exitCode(err))
}

func TestServerErrorsShowTheMessageAndCode(t *testing.T) {
	isolate(t)
	f := &fakeControl{fail: status.Error(codes.AlreadyExists, "workflow w already exists on target main")}
	addr := startFake(t, f)
	_, err := runCLI(t, append(createArgs, "--coordinator", addr, "--table", "t")...)
	require.EqualError(t, err, "create workflow w: workflow w already exists on target main (AlreadyExists)")
	require.Equal(t, codes.AlreadyExists, status.Code(err), "the status survives the rewording")
	require.Equal(t, 1, exitCode(err))

	f.fail = status.Error(codes.NotFound, "no workflow ghost on any target")
	_, err = runCLI(t, "workflow", "watch", "ghost", "--coordinator", addr)
	require.EqualError(t, err, "watch workflow ghost: no workflow ghost on any target (NotFound)")
}

func TestUnreachableCoordinator(t *testing.T) {
	isolate(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close())
	for _, args := range [][]string{{"workflow", "list"}, {"workflow", "watch", "w"}} {
		_, err := runCLI(t, append(args, "--coordinator", addr)...)
		require.ErrorContains(t, err, "cannot reach the coordinator at "+addr+": ")
		require.ErrorContains(t, err, "connection refused (Unavailable)")
		require.NotContains(t, err.Error(), "rpc error")
		require.Equal(t, 1, exitCode(err))
	}
}

func TestUsageErrors(t *testing.T) {
	isolate(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"workflow", "show"}, "missing the workflow's NAME: `rowlift workflow show NAME [flags]`"},
		{[]string{"workflow", "show", "a", "b"}, `unexpected argument(s) ["b"]`},
		{[]string{"workflow", "list", "--coordinator", "x:1", "--output", "yaml"}, `--output must be text or json, not "yaml"`},
		{[]string{"workflow", "show", "w", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"workflow", "watch", "w", "--coordinator", "x:1", "--until", "soon"}, `--until "soon": want copying`},
		{[]string{"workflow", "frobnicate"}, `unknown subcommand "frobnicate"`},
		{[]string{"workflow", "stop", "w", "--timeout", "0s"}, "--timeout 0s: must be positive"},
		{[]string{"workflow"}, "missing subcommand"},
	} {
		_, err := runCLI(t, tc.args...)
		require.ErrorContains(t, err, tc.want, "%q", tc.args)
		require.Equal(t, 2, exitCode(err), "%q", tc.args)
	}
}

func TestEveryWorkflowCommandHasHelpWithExamples(t *testing.T) {
	for _, c := range workflowCommand().subs {
		out, err := runCLI(t, "workflow", c.name, "--help")
		require.ErrorIs(t, err, flag.ErrHelp)
		require.Contains(t, out, "rowlift workflow "+c.name+" ", "usage shows an example")
		fs := newTestFlagSet()
		c.flags(fs)
		fs.VisitAll(func(f *flag.Flag) {
			require.Contains(t, out, "-"+f.Name, c.name)
			require.Contains(t, f.Usage, "e.g. --"+f.Name, "%s --%s explains itself with an example", c.name, f.Name)
		})
	}
}

func updateAt(phase rowliftv1.WorkflowPhase, st rowliftv1.WorkflowState, message string) *rowliftv1.Workflow {
	w := workflowIn("w", st, phase)
	w.Status.Message = message
	return w
}

func TestWatchEndsAtUntilOrFailure(t *testing.T) {
	isolate(t)
	copying := updateAt(rowliftv1.WorkflowPhase_WORKFLOW_PHASE_COPYING, rowliftv1.WorkflowState_WORKFLOW_STATE_COPYING, "")
	running := updateAt(rowliftv1.WorkflowPhase_WORKFLOW_PHASE_RUNNING, rowliftv1.WorkflowState_WORKFLOW_STATE_RUNNING, "copy done")
	failed := updateAt(rowliftv1.WorkflowPhase_WORKFLOW_PHASE_ERROR, rowliftv1.WorkflowState_WORKFLOW_STATE_ERROR, "table gone")

	addr := startFake(t, &fakeControl{updates: []*rowliftv1.Workflow{copying, running}})
	out, err := runCLI(t, "workflow", "watch", "w", "--coordinator", addr, "--until", "catching-up")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	require.Contains(t, lines[0], " w copying ")
	require.Contains(t, lines[1], " w running ")

	addr = startFake(t, &fakeControl{updates: []*rowliftv1.Workflow{copying, failed}})
	out, err = runCLI(t, "workflow", "watch", "w", "--coordinator", addr, "--output", "json")
	require.EqualError(t, err, "watch workflow w: workflow failed: table gone")
	lines = strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, "one JSON object per line")
	for i, want := range []*rowliftv1.Workflow{copying, failed} {
		var got rowliftv1.Workflow
		require.NoError(t, protojson.Unmarshal([]byte(lines[i]), &got))
		require.True(t, proto.Equal(want, &got))
	}

	// Ctrl-C ends a watch without an error.
	addr = startFake(t, &fakeControl{updates: []*rowliftv1.Workflow{copying}})
	ctx, cancel := context.WithCancel(context.Background())
	var buf syncBuffer
	done := make(chan error)
	go func() { done <- root().run(ctx, []string{"workflow", "watch", "w", "--coordinator", addr}, &buf, &buf) }()
	require.Eventually(t, func() bool { return strings.Contains(buf.String(), " w copying ") }, 10*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
}

// syncBuffer is a bytes.Buffer safe to read while a command writes to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
