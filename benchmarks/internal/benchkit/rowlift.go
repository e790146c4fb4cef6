package benchkit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/state"
)

const (
	// PollInterval is how often the applier looks for workflows to run.
	PollInterval = 100 * time.Millisecond
	// applierSettle lets the applier finish starting before any clock runs, so
	// only the work is timed (it still finds a workflow within PollInterval).
	applierSettle = 500 * time.Millisecond
	procTimeout   = 30 * time.Second
	// stateCheckInterval is how often WaitApplied looks for a failed workflow.
	stateCheckInterval = 500 * time.Millisecond
)

// Build builds the rowlift binary into dir, and checks that it has the streamer,
// applier and coordinator roles before any data is loaded.
func Build(ctx context.Context, dir string) (string, error) {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(gomod)) == "" {
		return "", fmt.Errorf("find the rowlift module (run from inside it): %v", err)
	}
	bin := filepath.Join(dir, "rowlift")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/rowlift")
	build.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build rowlift: %w\n%s", err, out)
	}
	for _, role := range []string{"streamer", "applier", "coordinator"} {
		if out, err := exec.CommandContext(ctx, bin, role, "--help").CombinedOutput(); err != nil {
			return "", fmt.Errorf("rowlift has no working %q subcommand: %w\n%s", role, err, out)
		}
	}
	return bin, nil
}

// Proc is one running rowlift role, its output going to a log file.
type Proc struct {
	Role string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process has exited
}

// StartProc starts bin with the role and args, logging to logDir/<role>.log.
func StartProc(bin, logDir, role string, args ...string) (*Proc, error) {
	return StartProcEnv(bin, logDir, role, nil, args...)
}

// StartProcEnv is StartProc with env (KEY=value) added to the benchmark's own
// environment: test hooks that slow a role down on purpose.
func StartProcEnv(bin, logDir, role string, env []string, args ...string) (*Proc, error) {
	p := &Proc{Role: role, log: filepath.Join(logDir, role+".log"), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		return nil, fmt.Errorf("rowlift %s log: %w", role, err)
	}
	defer f.Close()
	p.cmd = exec.Command(bin, append([]string{role}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if len(env) > 0 {
		p.cmd.Env = append(os.Environ(), env...)
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start rowlift %s: %w", role, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// StartRoles starts a streamer listening on addr for the source, waits until it
// listens, then starts an applier for the target polling every PollInterval, and
// gives it time to settle.
// Each role also gets the args of its own name in extra (such as
// --debug-listen for a profile).
func StartRoles(ctx context.Context, bin, logDir, addr, sourceDSN, targetDSN string, extra map[string][]string) (streamer, applier *Proc, err error) {
	if streamer, err = StartStreamer(ctx, bin, logDir, addr, sourceDSN, extra["streamer"]...); err != nil {
		return nil, nil, err
	}
	applierArgs := append([]string{"--target-dsn", targetDSN, "--poll-interval", PollInterval.String()}, extra["applier"]...)
	if applier, err = StartProc(bin, logDir, "applier", applierArgs...); err != nil {
		return nil, nil, errors.Join(err, streamer.Stop())
	}
	select {
	case <-ctx.Done():
	case <-time.After(applierSettle):
	}
	return streamer, applier, nil
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// CPU is the CPU seconds the process has used.
func (p *Proc) CPU(clkTck float64) (float64, error) {
	return ProcCPU(p.Pid(), clkTck)
}

// Pid is the process's pid, for what a benchmark does to it (nice.Set).
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// WaitListening waits until the process accepts TCP connections on addr, so
// what a benchmark asks of it does not race its start.
func (p *Proc) WaitListening(ctx context.Context, addr string) error {
	deadline := time.Now().Add(procTimeout)
	for time.Now().Before(deadline) {
		if p.Exited() {
			return fmt.Errorf("rowlift %s exited at start: %v", p.Role, p.cmd.ProcessState)
		}
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			return conn.Close()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("rowlift %s did not listen on %s within %s", p.Role, addr, procTimeout)
}

// Stop ends the process with SIGTERM, or SIGKILL when it has not exited in time.
func (p *Proc) Stop() error {
	if p.Exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop rowlift %s: %w", p.Role, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(procTimeout):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("rowlift %s did not stop within %s of SIGTERM; killed it", p.Role, procTimeout)
}

// LogTail is the end of the process's log, headed by its path, for errors.
func (p *Proc) LogTail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return fmt.Sprintf("--- rowlift %s: no log: %v", p.Role, err)
	}
	return fmt.Sprintf("--- rowlift %s log (%s), last lines:\n%s", p.Role, p.log, sandbox.Tail(string(b), 30))
}

// LogProblems returns the lines of the process's log that are neither info nor
// debug entries: warnings, errors, and anything not written by the logger (a
// panic, for one).
func (p *Proc) LogProblems() ([]string, error) {
	f, err := os.Open(p.log)
	if err != nil {
		return nil, fmt.Errorf("rowlift %s log: %w", p.Role, err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var entry struct {
			Level string `json:"level"`
		}
		if json.Unmarshal(sc.Bytes(), &entry) == nil && (entry.Level == "info" || entry.Level == "debug") {
			continue
		}
		out = append(out, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("rowlift %s log: %w", p.Role, err)
	}
	return out, nil
}

// LogEntry returns the fields of the last entry of the process's log whose
// message is msg, nil when there is none: what a benchmark reads of the
// numbers a role logs, such as the fence's locks when a copy ends.
func (p *Proc) LogEntry(msg string) (map[string]any, error) {
	f, err := os.Open(p.log)
	if err != nil {
		return nil, fmt.Errorf("rowlift %s log: %w", p.Role, err)
	}
	defer f.Close()
	var last map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var entry map[string]any
		if json.Unmarshal(sc.Bytes(), &entry) == nil && entry["msg"] == msg {
			last = entry
		}
	}
	if err := sc.Err(); err != nil {
		return last, fmt.Errorf("rowlift %s log: %w", p.Role, err)
	}
	return last, nil
}

// WaitCopied polls every 50ms until the workflow's copy is done, and fails when
// the workflow enters state error or one of procs exits.
func WaitCopied(ctx context.Context, store *state.Store, workflow string, procs ...*Proc) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		for _, p := range procs {
			if p.Exited() {
				return fmt.Errorf("rowlift %s exited during the copy: %v", p.Role, p.cmd.ProcessState)
			}
		}
		done, err := store.CopyDone(ctx, workflow)
		if err != nil {
			return err
		}
		w, err := store.Workflow(ctx, workflow)
		if err != nil {
			return err
		}
		if w.State == state.Error {
			return fmt.Errorf("workflow %s failed: %s", workflow, w.Message)
		}
		if done {
			return nil
		}
	}
}

// StartStreamer starts a streamer listening on addr for the source and waits
// until it listens. One streamer serves every workflow of its source, so a
// benchmark that replays into several targets starts one of these and an
// applier per target (StartApplier) instead of StartRoles' pair.
func StartStreamer(ctx context.Context, bin, logDir, addr, sourceDSN string, args ...string) (*Proc, error) {
	return startListening(ctx, bin, logDir, "streamer", addr, append([]string{"--source-dsn", sourceDSN}, args...)...)
}

// StartCoordinator starts a coordinator listening on addr that knows the
// target servers of targets (name to DSN), and waits until it listens. A
// benchmark drives workflows through it, over the Control API, when it times
// what an operator's command takes (a switch, a verify).
func StartCoordinator(ctx context.Context, bin, logDir, addr string, targets map[string]string) (*Proc, error) {
	var args []string
	for _, name := range slices.Sorted(maps.Keys(targets)) {
		args = append(args, "--target", name+"="+targets[name])
	}
	return startListening(ctx, bin, logDir, "coordinator", addr, args...)
}

// startListening starts bin with the role, --listen addr and args, and waits
// until it listens.
func startListening(ctx context.Context, bin, logDir, role, addr string, args ...string) (*Proc, error) {
	p, err := StartProc(bin, logDir, role, append([]string{"--listen", addr}, args...)...)
	if err != nil {
		return nil, err
	}
	if err := p.WaitListening(ctx, addr); err != nil {
		return nil, errors.Join(err, p.Stop(), errors.New(p.LogTail()))
	}
	return p, nil
}

// StartApplier starts an applier for the target polling every PollInterval and
// returns at once, without StartRoles' settling time: a benchmark that times
// how long a target takes to catch up counts the applier's start as part of it.
func StartApplier(bin, logDir, targetDSN string) (*Proc, error) {
	return StartProc(bin, logDir, "applier", "--target-dsn", targetDSN, "--poll-interval", PollInterval.String())
}

// WaitApplied polls every interval until every stream of the workflow has
// committed a position that contains pos, a GTID set of either flavor such as
// the source's dbconn.Position: the target has then applied everything the
// source had logged. It fails when the workflow enters state error or one of procs
// exits; ctx bounds the wait. The interval is the resolution of a timing that
// ends here, and each poll is one small query on the target (the workflow's
// state is read only every stateCheckInterval, to keep the polling light).
func WaitApplied(ctx context.Context, store *state.Store, workflow, pos string, interval time.Duration, procs ...*Proc) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var checked time.Time // when the workflow's state was last read
	for {
		streams, err := store.Streams(ctx, workflow)
		if err != nil {
			return err
		}
		if len(streams) == 0 {
			return fmt.Errorf("workflow %s has no streams", workflow)
		}
		applied := true
		for _, st := range streams {
			covers, err := gtid.Covers(st.Position, pos)
			if err != nil {
				return fmt.Errorf("position %q of workflow %s against %q: %w", st.Position, workflow, pos, err)
			}
			applied = applied && covers
		}
		if applied {
			return nil
		}
		for _, p := range procs {
			if p.Exited() {
				return fmt.Errorf("rowlift %s exited before workflow %s applied %s: %v", p.Role, workflow, pos, p.cmd.ProcessState)
			}
		}
		if time.Since(checked) >= stateCheckInterval {
			w, err := store.Workflow(ctx, workflow)
			if err != nil {
				return err
			}
			if w.State == state.Error {
				return fmt.Errorf("workflow %s failed: %s", workflow, w.Message)
			}
			checked = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for workflow %s to apply %s: %w", workflow, pos, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// PrintLogProblems prints the warning and error lines of the rowlift logs
// (LogProblems by process name), or that there were none: every result says
// whether rowlift complained while it was measured.
func PrintLogProblems(w io.Writer, problems map[string][]string) {
	if len(problems) == 0 {
		fmt.Fprintln(w, "rowlift logs: no warnings or errors")
		return
	}
	for _, proc := range slices.Sorted(maps.Keys(problems)) {
		lines := problems[proc]
		fmt.Fprintf(w, "rowlift %s log: %d warning/error lines:\n", proc, len(lines))
		for _, line := range lines {
			fmt.Fprintln(w, "  "+line)
		}
	}
}

// TempBuild makes the temp dir of a run of the benchmark called name (for the
// rowlift binary and the process logs) and builds rowlift into it, saying so
// through progress: the start every benchmark that runs rowlift makes. On
// error it removes the dir and returns "".
func TempBuild(ctx context.Context, name string, progress func(string, ...any)) (dir, bin string, err error) {
	if dir, err = os.MkdirTemp("", "rowlift-bench-"+name+"-"); err != nil {
		return "", "", fmt.Errorf("temp dir: %w", err)
	}
	if bin, err = Build(ctx, dir); err != nil {
		os.RemoveAll(dir)
		return "", "", err
	}
	progress("built %s", bin)
	return dir, bin, nil
}

// Procs are a benchmark's rowlift processes by name, so that every benchmark
// gathers their logs and stops them the same way.
type Procs struct {
	names []string
	procs []*Proc
}

// Add records a started process under name.
func (ps *Procs) Add(name string, p *Proc) {
	ps.names = append(ps.names, name)
	ps.procs = append(ps.procs, p)
}

// All are the processes in the order they were added.
func (ps *Procs) All() []*Proc { return ps.procs }

// LogProblems returns the warning and error lines of the logs, by process name.
func (ps *Procs) LogProblems() (map[string][]string, error) {
	out := map[string][]string{}
	for i, p := range ps.procs {
		lines, err := p.LogProblems()
		if err != nil {
			return nil, err
		}
		if len(lines) > 0 {
			out[ps.names[i]] = lines
		}
	}
	return out, nil
}

// LogTails is the end of every log, for an error's message.
func (ps *Procs) LogTails() string {
	var tails []string
	for _, p := range ps.procs {
		tails = append(tails, p.LogTail())
	}
	return strings.Join(tails, "\n")
}

// Stop stops the processes, the last added first.
func (ps *Procs) Stop() error {
	var errs []error
	for i := len(ps.procs) - 1; i >= 0; i-- {
		errs = append(errs, ps.procs[i].Stop())
	}
	return errors.Join(errs...)
}

// FreeAddrs returns n loopback addresses (host:port) with free ports, for the
// processes a benchmark starts.
func FreeAddrs(n int) ([]string, error) {
	out := make([]string, n)
	for i := range out {
		port, err := sandbox.FreePort()
		if err != nil {
			return nil, err
		}
		out[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	return out, nil
}
