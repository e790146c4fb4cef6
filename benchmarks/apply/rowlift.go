package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
	"github.com/rowlift/rowlift/internal/testhook"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

const (
	// workflowName is the workflow of every rowlift target, each on its own server.
	workflowName = "apply"
	// pollInterval is how often a timed rowlift catch-up looks at its committed
	// position: the resolution of its timing.
	pollInterval = 10 * time.Millisecond
)

// rowliftConfig is one setting of the applier.
type rowliftConfig struct {
	key, name string
	opts      *rowliftv1.WorkflowOptions
	// slowed: the target is slowed by the test hook (-slow) and replays the
	// first -slow-k transactions only.
	slowed bool
}

// rowliftConfigs are the serial baseline (one worker, each source transaction
// committed on its own), then -workers workers, then with commit batching, then
// with out-of-order commits as well.
func (b *bench) rowliftConfigs() []rowliftConfig {
	n := int32(b.cfg.Workers)
	items, ms := int32(b.cfg.BatchItems), int32(b.cfg.BatchMs)
	batch := fmt.Sprintf("batch %d trx/%d ms", items, ms)
	return []rowliftConfig{
		{"rowlift-serial", "rowlift, 1 worker (serial)", &rowliftv1.WorkflowOptions{ApplyWorkers: 1, CommitBatchItems: 1}, false},
		{"rowlift-workers", fmt.Sprintf("rowlift, %d workers", n), &rowliftv1.WorkflowOptions{ApplyWorkers: n, CommitBatchItems: 1}, false},
		{"rowlift-batch", fmt.Sprintf("rowlift, %d workers, %s", n, batch),
			&rowliftv1.WorkflowOptions{ApplyWorkers: n, CommitBatchItems: items, CommitBatchMs: ms}, false},
		{"rowlift-ooo", fmt.Sprintf("rowlift, %d workers, %s, out of order", n, batch),
			&rowliftv1.WorkflowOptions{ApplyWorkers: n, CommitBatchItems: items, CommitBatchMs: ms, OutOfOrderCommit: true}, false},
	}
}

// slowedConfigs are the slowed-target case: the serial baseline and -workers
// workers, each source transaction committed on its own, on targets slowed by
// -slow; none without -slow.
func (b *bench) slowedConfigs() []rowliftConfig {
	if b.cfg.Slow == "" {
		return nil
	}
	n := int32(b.cfg.Workers)
	return []rowliftConfig{
		{"slowed-serial", "rowlift, 1 worker (serial), slowed target", &rowliftv1.WorkflowOptions{ApplyWorkers: 1, CommitBatchItems: 1}, true},
		{"slowed-workers", fmt.Sprintf("rowlift, %d workers, slowed target", n), &rowliftv1.WorkflowOptions{ApplyWorkers: n, CommitBatchItems: 1}, true},
	}
}

// rowliftTarget is a target that a rowlift workflow fills by its copy, and
// then replays the backlog into with an applier started for the timing.
type rowliftTarget struct {
	b      *bench
	n      *node
	opts   *rowliftv1.WorkflowOptions
	slowed bool
	store  *state.Store
	// metrics is where the replaying applier serves its metrics, for the
	// replay groups it rolled back.
	metrics string
	// copier copied the seed; replayer replays the backlog; finisher replays
	// the rest of it on a slowed target.
	copier, replayer, finisher *benchkit.Proc
	streamerCPU                float64 // the streamer's CPU seconds when replay started
	// profiled waits for the replay's profiles, with -profile.
	profiled func() error
}

func (t *rowliftTarget) node() *node { return t.n }

// logDir is a directory of its own for the applier of one phase, whose log is
// always named applier.log.
func (t *rowliftTarget) logDir(phase string) (string, error) {
	dir := filepath.Join(t.b.tmp, t.n.key+"-"+phase)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("log dir: %w", err)
	}
	return dir, nil
}

// prepare creates the workflow of every table, copies them with an applier and
// stops it once it has applied everything up to the seeded position.
func (t *rowliftTarget) prepare(ctx context.Context) error {
	var err error
	if t.store, err = state.Open(ctx, t.n.db); err != nil {
		return err
	}
	var tables []*rowliftv1.TableSpec
	for _, name := range t.b.tableNames() {
		tables = append(tables, &rowliftv1.TableSpec{Name: name})
	}
	spec := &rowliftv1.WorkflowSpec{
		Name:           workflowName,
		SourceDatabase: db,
		Sources:        []*rowliftv1.SourceShard{{Name: "main", StreamerAddress: t.b.streamerAddr}},
		Targets:        []*rowliftv1.TargetShard{{Name: "main"}},
		Tables:         tables,
		Options:        t.opts,
	}
	if err := t.store.CreateWorkflow(ctx, spec, spec.GetTargets()[0].GetName()); err != nil {
		return err
	}
	if err := t.store.SetState(ctx, workflowName, state.Copying, ""); err != nil {
		return err
	}
	dir, err := t.logDir("copy")
	if err != nil {
		return err
	}
	if t.copier, err = benchkit.StartApplier(t.b.bin, dir, t.n.srv.DSN("")); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	err = benchkit.WaitCopied(ctx, t.store, workflowName, t.b.streamer, t.copier)
	if err == nil {
		err = benchkit.WaitApplied(ctx, t.store, workflowName, t.b.seedPos, 50*time.Millisecond, t.b.streamer, t.copier)
	}
	if err = errors.Join(err, t.copier.Stop()); err != nil {
		return fmt.Errorf("%w\n%s\n%s", err, t.b.streamer.LogTail(), t.copier.LogTail())
	}
	return nil
}

// waitFetched has nothing to wait for: rowlift reads the backlog from the
// source through the streamer while it replays, and that is part of its time.
func (t *rowliftTarget) waitFetched(context.Context, string) error { return nil }

// replay starts an applier and waits until the workflow's committed position
// covers end.
func (t *rowliftTarget) replay(ctx context.Context, end string) error {
	var err error
	if t.streamerCPU, err = t.b.streamer.CPU(t.b.clkTck); err != nil {
		return err
	}
	dir, err := t.logDir("replay")
	if err != nil {
		return err
	}
	addrs, err := benchkit.FreeAddrs(2)
	if err != nil {
		return err
	}
	t.metrics = addrs[0]
	var env []string
	if t.slowed {
		env = []string{fmt.Sprintf("%s=%s=%s,seed=%d", testhook.EnvVar, testhook.SlowTarget, t.b.cfg.Slow, t.b.cfg.Seed)}
	}
	args := []string{"--target-dsn", t.n.srv.DSN(""), "--poll-interval", benchkit.PollInterval.String(), "--metrics-listen", t.metrics}
	if t.b.cfg.Profile != "" {
		args = append(args, "--debug-listen", addrs[1])
	}
	if t.replayer, err = benchkit.StartProcEnv(t.b.bin, dir, "applier", env, args...); err != nil {
		return err
	}
	if t.b.cfg.Profile != "" {
		// The profile outlasts a short catch-up: afterReplay waits for it.
		t.profiled = t.b.profile(context.WithoutCancel(ctx), t.n.key, t.replayer, addrs[1])
	}
	if err := benchkit.WaitApplied(ctx, t.store, workflowName, end, pollInterval, t.b.streamer, t.replayer); err != nil {
		return fmt.Errorf("%w\n%s\n%s", err, t.b.streamer.LogTail(), t.replayer.LogTail())
	}
	return nil
}

// afterReplay returns the CPU seconds of the applier and of the streamer during
// the replay and the replay groups the applier rolled back, and stops the
// applier, so it does not write its position on the target while the next
// configuration is timed.
func (t *rowliftTarget) afterReplay() (float64, int64, error) {
	if t.replayer == nil {
		return 0, 0, nil
	}
	a, err1 := t.replayer.CPU(t.b.clkTck)
	s, err2 := t.b.streamer.CPU(t.b.clkTck)
	rollbacks, err3 := rolledBack(t.metrics)
	var err4 error
	if t.profiled != nil {
		err4 = t.profiled()
	}
	return a + s - t.streamerCPU, rollbacks, errors.Join(err1, err2, err3, err4, t.replayer.Stop())
}

// rolledBack reads the replay groups rolled back to run again from the
// metrics an applier serves at addr.
func rolledBack(addr string) (int64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, fmt.Errorf("scrape applier metrics: %w", err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("scrape applier metrics: %w", err)
	}
	var n float64
	for _, m := range families["rowlift_replay_conflicts_total"].GetMetric() {
		n += m.GetCounter().GetValue()
	}
	return int64(n), nil
}

// finish brings a slowed target, timed on the first -slow-k transactions, to
// the end of the backlog with an applier that is not slowed, so that it is
// compared with the source like the others; it is not timed.
func (t *rowliftTarget) finish(ctx context.Context, end string) error {
	dir, err := t.logDir("finish")
	if err != nil {
		return err
	}
	if t.finisher, err = benchkit.StartApplier(t.b.bin, dir, t.n.srv.DSN("")); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, t.b.replayTimeout())
	defer cancel()
	err = benchkit.WaitApplied(ctx, t.store, workflowName, end, 50*time.Millisecond, t.b.streamer, t.finisher)
	if err = errors.Join(err, t.finisher.Stop()); err != nil {
		return fmt.Errorf("%s: finish the backlog: %w\n%s", t.n.name, err, t.finisher.LogTail())
	}
	return nil
}

// profile starts Go CPU profiles of -profile-seconds of the streamer and of
// applier, whose debug listener is applierDebug, written as
// <role>-<key>.pprof in -profile, and returns what waits for them.
func (b *bench) profile(ctx context.Context, key string, applier *benchkit.Proc, applierDebug string) func() error {
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, role := range []struct {
		name, addr string
		proc       *benchkit.Proc
	}{{"streamer", b.streamerDebug, b.streamer}, {"applier", applierDebug, applier}} {
		wg.Go(func() {
			path := filepath.Join(b.cfg.Profile, role.name+"-"+key+".pprof")
			if errs[i] = role.proc.WaitListening(ctx, role.addr); errs[i] == nil {
				errs[i] = benchkit.FetchProfile(ctx, role.name, role.addr, b.cfg.ProfileS, path)
			}
		})
	}
	return func() error {
		wg.Wait()
		return errors.Join(errs...)
	}
}

func (t *rowliftTarget) close() error {
	var errs []error
	for _, p := range []*benchkit.Proc{t.copier, t.replayer, t.finisher} {
		if p != nil {
			errs = append(errs, p.Stop())
		}
	}
	return errors.Join(append(errs, t.n.close())...)
}

// logProblems returns the warning and error lines of the target's appliers, by
// applier.
func (t *rowliftTarget) logProblems(out map[string][]string) error {
	for _, p := range []struct {
		phase string
		proc  *benchkit.Proc
	}{{"copy", t.copier}, {"replay", t.replayer}, {"finish", t.finisher}} {
		if p.proc == nil {
			continue
		}
		lines, err := p.proc.LogProblems()
		if err != nil {
			return err
		}
		if len(lines) > 0 {
			out["applier "+t.n.key+" "+p.phase] = lines
		}
	}
	return nil
}
