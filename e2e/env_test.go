package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// env is one source and one target server with a streamer and an applier process
// of the real binary between them, as an operator would run them.
type env struct {
	t        *testing.T
	src, dst *sandbox.Server
	srcDB    *sql.DB
	dstDB    *sql.DB
	store    *state.Store
	streamer *proc
	applier  *proc
	// streamerAddr is fixed for the env so a restarted streamer is found again.
	streamerAddr string
	// hooks is the environment the streamer and applier start with (test hooks).
	hooks []string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, sandbox.Options{})
}

// newEnvWith is newEnv with both servers started with opts (for example
// Args: []string{"--default-time-zone=+05:30"}).
func newEnvWith(t *testing.T, opts sandbox.Options) *env {
	t.Helper()
	return newEnvOf(t, opts, opts)
}

// newEnvOf is newEnv with the source started with src and the target with
// dst (a move between flavors).
func newEnvOf(t *testing.T, src, dst sandbox.Options) *env {
	t.Helper()
	s, d := sandboxtest.Start(t, src), sandboxtest.Start(t, dst)
	return newEnvOn(t, s, d, sandboxtest.Open(t, s, ""), sandboxtest.Open(t, d, ""))
}

// newEnvOn is newEnv on servers already started, with the test's own pools to
// them (over the Unix socket for servers that require TLS on TCP).
func newEnvOn(t *testing.T, src, dst *sandbox.Server, srcDB, dstDB *sql.DB) *env {
	t.Helper()
	e := &env{t: t, src: src, dst: dst, srcDB: srcDB, dstDB: dstDB}
	store, err := state.Open(context.Background(), e.dstDB)
	require.NoError(t, err)
	e.store = store
	e.streamerAddr = freeAddr(t)
	return e
}

// freeAddr returns a local address no process listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := sandbox.FreePort()
	require.NoError(t, err)
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// startStreamer starts the streamer process for the source server.
func (e *env) startStreamer(extraArgs ...string) *proc {
	args := append([]string{"streamer", "--listen", e.streamerAddr, "--source-dsn", e.src.DSN("")}, extraArgs...)
	e.streamer = startProc(e.t, "streamer", e.hooks, args...)
	return e.streamer
}

// startApplier starts the applier process for the target server.
func (e *env) startApplier(extraArgs ...string) *proc {
	args := append([]string{"applier", "--target-dsn", e.dst.DSN(""), "--poll-interval", "50ms"}, extraArgs...)
	e.applier = startProc(e.t, "applier", e.hooks, args...)
	return e.applier
}

// workflow returns a one-source move spec of the given tables from database db.
func (e *env) workflow(name, db string, tables ...string) *rowliftv1.WorkflowSpec {
	spec := &rowliftv1.WorkflowSpec{
		Name:           name,
		SourceDatabase: db,
		Sources:        []*rowliftv1.SourceShard{{Name: "main", StreamerAddress: e.streamerAddr}},
		Targets:        []*rowliftv1.TargetShard{{Name: "main"}},
		Options:        &rowliftv1.WorkflowOptions{},
	}
	for _, tbl := range tables {
		spec.Tables = append(spec.Tables, &rowliftv1.TableSpec{Name: tbl})
	}
	return spec
}

// start creates the workflow in the target's store and starts its copy.
func (e *env) start(spec *rowliftv1.WorkflowSpec) {
	e.t.Helper()
	ctx := context.Background()
	require.NoError(e.t, e.store.CreateWorkflow(ctx, spec, spec.GetTargets()[0].GetName()))
	require.NoError(e.t, e.store.SetState(ctx, spec.GetName(), state.Copying, ""))
}

// waitFor polls cond until it is true, failing the test with what it last saw.
func (e *env) waitFor(what string, timeout time.Duration, cond func() (bool, string)) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		var ok bool
		if ok, last = cond(); ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A hang explains itself: SIGQUIT makes each rowlift process write every
	// goroutine's stack to the log this test prints when it fails.
	for _, p := range []*proc{e.streamer, e.applier} {
		if p != nil {
			p.quit()
		}
	}
	e.t.Fatalf("timed out after %s waiting for %s; last seen: %s", timeout, what, last)
}

// waitState waits until the workflow reaches st and returns it.
func (e *env) waitState(name string, st state.State, timeout time.Duration) *state.Workflow {
	e.t.Helper()
	var w *state.Workflow
	e.waitFor(fmt.Sprintf("workflow %s in state %s", name, st), timeout, func() (bool, string) {
		var err error
		w, err = e.store.Workflow(context.Background(), name)
		if err != nil {
			return false, err.Error()
		}
		seen := fmt.Sprintf("state %s: %s", w.State, w.Message)
		if streams, err := e.store.Streams(context.Background(), name); err == nil {
			for _, s := range streams {
				seen += fmt.Sprintf("; stream %s at %q: %s", s.Source, s.Position, s.Message)
			}
		}
		return w.State == st, seen
	})
	return w
}

// sourceExec runs statements on the source server.
func (e *env) sourceExec(stmts ...string) {
	e.t.Helper()
	sandboxtest.Exec(e.t, e.srcDB, stmts...)
}

// count returns the row count of a table.
func count(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM "+table).Scan(&n))
	return n
}

// proc is one rowlift process with its log captured to a file that is printed
// when the test fails.
type proc struct {
	t    *testing.T
	name string
	args []string
	// env is added to the test's environment (test hooks).
	env  []string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

func startProc(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, args: args, env: env, log: filepath.Join(t.TempDir(), name+".log")}
	p.start()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			b, _ := os.ReadFile(p.log)
			t.Logf("log of %s:\n%s", name, sandbox.Tail(string(b), 400))
		}
	})
	return p
}

func (p *proc) start() {
	p.t.Helper()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(p.t, err)
	defer f.Close()
	fmt.Fprintf(f, "--- start %s\n", time.Now().Format(time.RFC3339Nano))
	p.cmd = exec.Command(rowliftBin, p.args...)
	p.cmd.Env = append(os.Environ(), p.env...)
	// A test binary killed on timeout must not leave rowlift processes behind.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.cmd.Stdout, p.cmd.Stderr = f, f
	require.NoError(p.t, p.cmd.Start())
	p.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(p.cmd, p.done)
}

// kill sends SIGKILL, as a crash or an OOM kill would, and waits for the exit.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop asks the process to exit (SIGTERM) and kills it if it does not.
func (p *proc) stop() {
	if !p.running() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.kill()
	}
}

// exited waits for the process to exit by itself, failing the test with its
// log if it has not within timeout.
func (p *proc) exited(timeout time.Duration) {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.t.Fatalf("%s did not exit within %s; its log:\n%s", p.name, timeout, sandbox.Tail(p.logText(), 20))
	}
}

// quit sends SIGQUIT, which makes a Go process dump its goroutines and exit.
func (p *proc) quit() {
	if !p.running() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
	}
}

// running reports whether the process has not exited.
func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// restart starts the process again with the same arguments.
func (p *proc) restart() { p.start() }

// logText returns what the process has logged so far.
func (p *proc) logText() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// waitCopyStarted waits until the target's table (db.table) has a row.
func (e *env) waitCopyStarted(table string) {
	e.t.Helper()
	e.waitFor("the copy of "+table+" to start", 30*time.Second, func() (bool, string) {
		var n int
		if err := e.dstDB.QueryRow("SELECT COUNT(*) FROM " + table).Scan(&n); err != nil {
			return false, err.Error()
		}
		return n > 0, fmt.Sprintf("%d rows copied", n)
	})
}
