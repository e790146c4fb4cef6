package e2e

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/statustext"
	"github.com/rowlift/rowlift/internal/verify"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// cli runs `rowlift workflow ...` commands against one coordinator, as an
// operator would: the coordinator's address from $ROWLIFT_COORDINATOR, and no
// config file but what a test writes.
type cli struct {
	t   *testing.T
	env []string
}

// result is what one command printed and how it exited.
type result struct {
	stdout, stderr string
	code           int
}

// newCLI starts `rowlift coordinator` for the env's target, named main, with
// coordinatorArgs added to its command line, and waits until it answers.
func (e *env) newCLI(coordinatorArgs ...string) *cli {
	e.t.Helper()
	_, c, _ := e.startCoordinatorCLI(nil, append([]string{"--target", "main=" + e.dst.DSN("")}, coordinatorArgs...)...)
	return c
}

// startCoordinatorCLI starts `rowlift coordinator` on a free port with args and
// the test hooks in env, and waits until `workflow list` succeeds; it returns
// the process, a CLI for it and that command's result. A coordinator that exits meanwhile fails the test at
// once with its log, rather than leave the CLI asking whatever took its port.
func (e *env) startCoordinatorCLI(env []string, args ...string) (*proc, *cli, result) {
	e.t.Helper()
	addr := freeAddr(e.t)
	p := startProc(e.t, "coordinator", env, append([]string{"coordinator", "--listen", addr}, args...)...)
	c := newCLIAt(e.t, addr)
	var r result
	e.waitFor("the coordinator to answer", 30*time.Second, func() (bool, string) {
		if !p.running() {
			e.t.Fatalf("the coordinator exited before it answered; its log:\n%s", sandbox.Tail(p.logText(), 20))
		}
		r = c.run("workflow", "list")
		return r.code == 0, r.stderr
	})
	return p, c, r
}

func newCLIAt(t *testing.T, addr string) *cli {
	return &cli{t: t, env: []string{"ROWLIFT_COORDINATOR=" + addr, "XDG_CONFIG_HOME=" + t.TempDir()}}
}

// run runs the binary with args and returns its output and exit code; it
// kills the binary after two minutes.
func (c *cli) run(args ...string) result {
	c.t.Helper()
	return c.runWithin(2*time.Minute, args...)
}

// runWithin is run for a command that may take longer: a verify of tables
// that grow with the test's length.
func (c *cli) runWithin(limit time.Duration, args ...string) result {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, rowliftBin, args...)
	cmd.Env = append(os.Environ(), c.env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		require.NoError(c.t, err, "run rowlift %q", args)
	}
	r := result{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
	c.t.Logf("$ rowlift %s\n%s%s(exit %d)", strings.Join(args, " "), r.stdout, r.stderr, r.code)
	return r
}

// ok runs a command that must succeed and returns its standard output.
func (c *cli) ok(args ...string) string {
	c.t.Helper()
	r := c.run(args...)
	require.Zero(c.t, r.code, "rowlift %q failed: %s", args, r.stderr)
	require.Empty(c.t, r.stderr)
	return r.stdout
}

// fails runs a command that must fail with exit code code and returns what it
// printed to stderr, which is all it prints.
func (c *cli) fails(code int, args ...string) string {
	c.t.Helper()
	r := c.run(args...)
	require.Equal(c.t, code, r.code, "exit code of rowlift %q", args)
	require.Empty(c.t, r.stdout)
	require.NotContains(c.t, r.stderr, "rpc error", "the server's message, not grpc-go's wrapping")
	return r.stderr
}

// TestCLIWorkflowLifecycle drives a workflow through its whole life with the CLI
// alone: create and start, watch the copy until it runs, stop, show as JSON,
// resume, list and delete.
func TestCLIWorkflowLifecycle(t *testing.T) {
	sandboxtest.EachFlavor(t, testCLIWorkflowLifecycle)
}

func testCLIWorkflowLifecycle(t *testing.T, flavor sandbox.Flavor) {
	e := newEnvWith(t, sandbox.Options{Flavor: flavor})
	e.sourceExec("CREATE DATABASE clidb",
		"CREATE TABLE clidb.t1 (id INT PRIMARY KEY, v VARCHAR(40))",
		"CREATE TABLE clidb.t2 (id INT PRIMARY KEY, v VARCHAR(40), w INT)",
		"INSERT INTO clidb.t1 WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 3000) SELECT i, LEFT(SHA2(i, 256), 40) FROM s",
		"INSERT INTO clidb.t2 WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 2000) SELECT i, LEFT(SHA2(i, 256), 32), i FROM s",
		"ANALYZE TABLE clidb.t1, clidb.t2")
	e.startStreamer()
	e.startApplier()
	c := e.newCLI()
	require.Equal(t, "no workflows\n", c.ok("workflow", "list"))

	out := c.ok("workflow", "create", "--name", "cli", "--source", "main="+e.streamerAddr, "--target", "main",
		"--source-database", "clidb", "--table", "t1", "--table", "t2:id,v", "--chunk-rows", "250", "--start")
	require.Equal(t, "created workflow cli: init\nstarted workflow cli: copying\nfollow it with: rowlift workflow watch cli\n", out)

	// Not a terminal: one line per update, the last one running.
	out = c.ok("workflow", "watch", "cli", "--until", "running", "--interval", "200ms")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Regexp(t, `^\S+ cli running 100\.0% rows 5,000/5,000 rate \S+ lag \S+ eta 0s`, lines[len(lines)-1])
	res, err := verify.Table(context.Background(), e.srcDB, e.dstDB, "clidb", "clidb", "t1", verify.Options{})
	require.NoError(t, err)
	require.True(t, res.Identical(), "%s", res)
	require.Equal(t, 2000, count(t, e.dstDB, "clidb.t2"), "t2 has only some columns: its rows are counted")

	require.Regexp(t, `^stopped workflow cli: stopped \(.+\)\n$`, c.ok("workflow", "stop", "cli"))
	e.sourceExec("INSERT INTO clidb.t1 VALUES (3001, 'while stopped')")

	var w rowliftv1.Workflow
	require.NoError(t, protojson.Unmarshal([]byte(c.ok("workflow", "show", "cli", "--output", "json")), &w))
	require.Equal(t, "cli", w.GetSpec().GetName())
	require.Equal(t, []string{"id", "v"}, w.GetSpec().GetTables()[1].GetColumns())
	require.Equal(t, int64(250), w.GetSpec().GetOptions().GetChunkRows())
	require.Equal(t, rowliftv1.WorkflowState_WORKFLOW_STATE_STOPPED, w.GetStatus().GetState())
	require.Equal(t, rowliftv1.WorkflowPhase_WORKFLOW_PHASE_STOPPED, w.GetStatus().GetPhase())
	require.Len(t, w.GetStatus().GetTables(), 2)
	require.Equal(t, int64(5000), w.GetStatus().GetRowsCopied())
	t2 := w.GetStatus().GetTables()[1]
	require.Positive(t, t2.GetBytesCopied())
	require.Positive(t, t2.GetBytesEstimate(), "the source's DATA_LENGTH")
	t2Bytes := statustext.Bytes(t2.GetBytesCopied())

	require.Equal(t, "resumed workflow cli: running\n", c.ok("workflow", "resume", "cli"))
	e.waitFor("the row written while stopped", 30*time.Second, func() (bool, string) {
		n := count(t, e.dstDB, "clidb.t1")
		return n == 3001, strconv.Itoa(n) + " rows"
	})

	out = c.ok("workflow", "list")
	require.Regexp(t, `^NAME +PHASE +COPIED +LAG +ETA +MESSAGE\ncli +(running|catching up) +100\.0% `, out)
	out = c.ok("workflow", "show", "cli")
	for _, want := range []string{"sources   main=" + e.streamerAddr, "tables    t1 t2:id,v", "options   --chunk-rows 250",
		"workflow cli   running", "  t2    [##############################]  100.0%  2,000 / 2,000"} {
		require.Contains(t, out, want)
	}
	require.Regexp(t, `\n  t2 +\[#+\] +100\.0% +2,000 / 2,000 +`+regexp.QuoteMeta(t2Bytes+" / "+t2Bytes)+" ", out, "the bytes copied, the estimate once done")

	require.Equal(t, "deleted workflow cli\nkept target tables with their rows (drop them by hand if unwanted): main:clidb.t1, main:clidb.t2\n",
		c.ok("workflow", "delete", "cli"))
	require.Equal(t, "no workflows\n", c.ok("workflow", "list"))
	require.Equal(t, 3001, count(t, e.dstDB, "clidb.t1"), "delete keeps the rows")
	require.Equal(t, "rowlift: show workflow cli: workflow \"cli\" not found on target main (NotFound)\n",
		c.fails(1, "workflow", "show", "cli"))
}

// TestCLIBadRequests checks that each request the coordinator refuses prints its
// message, once, on stderr, and exits 1; and that a bad command line exits 2
// without asking the coordinator.
func TestCLIBadRequests(t *testing.T) {
	e := newEnv(t)
	e.sourceExec("CREATE DATABASE clibad", "CREATE TABLE clibad.t (id INT PRIMARY KEY)")
	e.startStreamer()
	e.startApplier()
	c := e.newCLI()
	create := func(name string, more ...string) []string {
		return append([]string{"workflow", "create", "--name", name, "--source", "main=" + e.streamerAddr, "--target", "main",
			"--source-database", "clibad"}, more...)
	}

	t.Run("duplicate name", func(t *testing.T) {
		c.ok(create("dup", "--table", "t")...)
		require.Equal(t, "rowlift: create workflow dup: workflow \"dup\" already exists on target main (state init): "+
			"delete it first or pick another name (AlreadyExists)\n", c.fails(1, create("dup", "--table", "t")...))
	})
	t.Run("missing table", func(t *testing.T) {
		require.Equal(t, "rowlift: create workflow ghost: source main (streamer "+e.streamerAddr+"): table does not exist: "+
			"clibad.ghost on the source: check the workflow's table list and source database (InvalidArgument)\n",
			c.fails(1, create("ghost", "--table", "t", "--table", "ghost")...))
	})
	t.Run("unknown target", func(t *testing.T) {
		stderr := c.fails(1, append(create("elsewhere", "--table", "t"), "--target", "shard2")...)
		require.Contains(t, stderr, "rowlift: create workflow elsewhere: ")
		require.Contains(t, stderr, "shard2")
		require.Contains(t, stderr, "(InvalidArgument)\n")
	})
	t.Run("missing flag", func(t *testing.T) {
		require.Equal(t, "rowlift: no table to move: give --table NAME (repeatable) or --tables a,b,c\n", c.fails(2, create("none")...))
	})
	require.Equal(t, "NAME  PHASE  COPIED  LAG  ETA  MESSAGE\ndup   init   ?       -    -\n", c.ok("workflow", "list"),
		"only the valid workflow was created")
}

func TestCLIUnreachableCoordinator(t *testing.T) {
	port, err := sandbox.FreePort()
	require.NoError(t, err)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c := newCLIAt(t, addr)
	for _, args := range [][]string{{"workflow", "list"}, {"workflow", "watch", "w"}, {"workflow", "stop", "w"}} {
		stderr := c.fails(1, args...)
		require.Regexp(t, `^rowlift: \w+ workflows? ?w?: cannot reach the coordinator at `+addr+`: .*connection refused \(Unavailable\)\n$`, stderr)
	}
}

// TestCLIListWithTargetsDown: `workflow list` prints the workflows of the
// targets that answered and a line per target that did not, exiting 0; when
// no target answers it exits 4, and with --output json the entries are in the
// JSON too.
func TestCLIListWithTargetsDown(t *testing.T) {
	e := newEnv(t)
	e.start(e.workflow("up", "db", "t"))
	down := freeAddr(t)
	_, c, r := e.startCoordinatorCLI(nil, "--target", "main="+e.dst.DSN(""), "--target", "down=root:hidden-pw@tcp("+down+")/")
	require.Regexp(t, `^NAME +PHASE +COPIED +LAG +ETA +MESSAGE\nup +`, r.stdout)
	require.Regexp(t, `^rowlift: target down \(`+down+`\): [^\n]*cannot reach target server `+down+`[^\n]*\n$`, r.stderr)
	require.Equal(t, 1, strings.Count(r.stderr, "target down"), "the message names the target once")
	require.NotContains(t, r.stderr, "hidden-pw")

	r = c.run("workflow", "list", "--target", "down", "--target", "nosuch")
	require.Equal(t, 4, r.code, "no target answered")
	require.Empty(t, r.stdout)
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	require.Len(t, lines, 3, r.stderr)
	require.Regexp(t, `^rowlift: target down \(`+down+`\): .*cannot reach target server `+down, lines[0])
	require.Equal(t, `rowlift: target "nosuch" is not configured on this coordinator (it has down, main): `+
		"add --target nosuch=DSN to the coordinator", lines[1])
	require.Equal(t, "rowlift: list workflows: none of the 2 targets could be read (see above)", lines[2])

	r = c.run("workflow", "list", "--output", "json")
	require.Zero(t, r.code)
	var resp rowliftv1.ListWorkflowsResponse
	require.NoError(t, protojson.Unmarshal([]byte(r.stdout), &resp))
	require.Equal(t, []string{"main"}, resp.GetTargetsRead())
	require.Len(t, resp.GetTargetErrors(), 1)
	require.Equal(t, "down", resp.GetTargetErrors()[0].GetTarget())
}
