package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rowlift/rowlift/internal/sandbox"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

const (
	workflowName = "bench"
	// pollInterval is how often the applier looks for workflows to run.
	pollInterval = 100 * time.Millisecond
	// applierSettle lets the applier finish starting before the clock runs, so only
	// the copy is timed (it still finds the workflow within pollInterval).
	applierSettle = 500 * time.Millisecond
	procTimeout   = 30 * time.Second
)

// buildRowlift builds the rowlift binary into dir once, and checks that it has the
// streamer and applier roles before any data is loaded.
func buildRowlift(ctx context.Context, dir string) (string, error) {
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
	for _, role := range []string{"streamer", "applier"} {
		if out, err := exec.CommandContext(ctx, bin, role, "--help").CombinedOutput(); err != nil {
			return "", fmt.Errorf("rowlift has no working %q subcommand (run without method d until it does): %w\n%s", role, err, out)
		}
	}
	progress("built %s", bin)
	return bin, nil
}

// copyRowlift is (d): rowlift's streamer next to the source and applier next to
// the target, as separate processes over gRPC, copy the table into an empty
// database. Only the copy is timed: from the workflow entering copying to every
// table's copy being done.
func (b *bench) copyRowlift(ctx context.Context, m *meter) error {
	const db = "bench_rowlift"
	if err := b.resetTarget(ctx, db); err != nil {
		return err
	}
	store, err := state.Open(ctx, b.tgtDB)
	if err != nil {
		return err
	}
	if err := store.DeleteWorkflow(ctx, workflowName); err != nil {
		return err
	}
	port, err := sandbox.FreePort()
	if err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	streamer, applier, err := b.startRoles(ctx, addr)
	if err != nil {
		return err
	}
	err = b.timeRowlift(ctx, m, store, addr, streamer, applier)
	err = errors.Join(err, streamer.stop(), applier.stop())
	if err != nil {
		return fmt.Errorf("%w\n%s\n%s", err, streamer.logTail(), applier.logTail())
	}
	return checkCount(ctx, b.tgtDB, db, b.cfg.Rows)
}

// startRoles starts the streamer, waits until it listens, then starts the applier.
func (b *bench) startRoles(ctx context.Context, addr string) (streamer, applier *rowliftProc, err error) {
	if streamer, err = b.startProc("streamer", "--listen", addr, "--source-dsn", b.source.DSN("")); err != nil {
		return nil, nil, err
	}
	if err := streamer.waitListening(ctx, addr); err != nil {
		return nil, nil, errors.Join(err, streamer.stop(), errors.New(streamer.logTail()))
	}
	if applier, err = b.startProc("applier", "--target-dsn", b.target.DSN(""), "--poll-interval", pollInterval.String()); err != nil {
		return nil, nil, errors.Join(err, streamer.stop())
	}
	select {
	case <-ctx.Done():
	case <-time.After(applierSettle):
	}
	return streamer, applier, nil
}

func (b *bench) timeRowlift(ctx context.Context, m *meter, store *state.Store, addr string, streamer, applier *rowliftProc) error {
	if err := store.CreateWorkflow(ctx, b.workflowSpec(addr)); err != nil {
		return err
	}
	if err := m.start(); err != nil {
		return err
	}
	s0, a0, err := rolesCPU(b.clkTck, streamer, applier)
	if err != nil {
		return err
	}
	if err := store.SetState(ctx, workflowName, state.Copying, ""); err != nil {
		return err
	}
	if err := waitCopied(ctx, store, streamer, applier); err != nil {
		return err
	}
	s1, a1, err := rolesCPU(b.clkTck, streamer, applier)
	if err != nil {
		return err
	}
	if err := m.stop(); err != nil {
		return err
	}
	m.s.StreamerCPUS, m.s.ApplierCPUS = s1-s0, a1-a0
	m.s.ClientCPUS = m.s.StreamerCPUS + m.s.ApplierCPUS
	return nil
}

func (b *bench) workflowSpec(streamerAddr string) *rowliftv1.WorkflowSpec {
	return &rowliftv1.WorkflowSpec{
		Name:           workflowName,
		SourceDatabase: sourceDB,
		TargetDatabase: "bench_rowlift",
		Sources:        []*rowliftv1.SourceShard{{Name: "main", StreamerAddress: streamerAddr}},
		Targets:        []*rowliftv1.TargetShard{{Name: "main"}},
		Tables:         []*rowliftv1.TableSpec{{Name: table}},
		Options: &rowliftv1.WorkflowOptions{
			ChunkRows:    b.cfg.ChunkRows,
			PacketBytes:  b.cfg.PacketBytes,
			ApplyWorkers: int32(b.cfg.Workers),
		},
	}
}

// waitCopied polls every 50ms until the workflow's copy is done, and fails when
// the workflow enters state error or a process exits.
func waitCopied(ctx context.Context, store *state.Store, procs ...*rowliftProc) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		for _, p := range procs {
			if p.exited() {
				return fmt.Errorf("rowlift %s exited during the copy: %v", p.role, p.cmd.ProcessState)
			}
		}
		done, err := store.CopyDone(ctx, workflowName)
		if err != nil {
			return err
		}
		w, err := store.Workflow(ctx, workflowName)
		if err != nil {
			return err
		}
		if w.State == state.Error {
			return fmt.Errorf("workflow %s failed: %s", workflowName, w.Message)
		}
		if done {
			return nil
		}
	}
}

func rolesCPU(clkTck float64, streamer, applier *rowliftProc) (s, a float64, err error) {
	if s, err = procCPU(streamer.cmd.Process.Pid, clkTck); err != nil {
		return 0, 0, err
	}
	a, err = procCPU(applier.cmd.Process.Pid, clkTck)
	return s, a, err
}

// rowliftProc is one running rowlift role, its output going to a log file.
type rowliftProc struct {
	role string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process has exited
}

func (b *bench) startProc(role string, args ...string) (*rowliftProc, error) {
	p := &rowliftProc{role: role, log: filepath.Join(b.tmp, role+".log"), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		return nil, fmt.Errorf("rowlift %s log: %w", role, err)
	}
	defer f.Close()
	p.cmd = exec.Command(b.rowlift, append([]string{role}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start rowlift %s: %w", role, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *rowliftProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitListening waits until the process accepts TCP connections on addr.
func (p *rowliftProc) waitListening(ctx context.Context, addr string) error {
	deadline := time.Now().Add(procTimeout)
	for time.Now().Before(deadline) {
		if p.exited() {
			return fmt.Errorf("rowlift %s exited at start: %v", p.role, p.cmd.ProcessState)
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
	return fmt.Errorf("rowlift %s did not listen on %s within %s", p.role, addr, procTimeout)
}

// stop ends the process with SIGTERM, or SIGKILL when it has not exited in time.
func (p *rowliftProc) stop() error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop rowlift %s: %w", p.role, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(procTimeout):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("rowlift %s did not stop within %s of SIGTERM; killed it", p.role, procTimeout)
}

func (p *rowliftProc) logTail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return fmt.Sprintf("--- rowlift %s: no log: %v", p.role, err)
	}
	return fmt.Sprintf("--- rowlift %s log (%s), last lines:\n%s", p.role, p.log, sandbox.Tail(string(b), 30))
}
