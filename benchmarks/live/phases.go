package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
	"github.com/rowlift/rowlift/state"
)

const (
	// warmup is how long the load runs before the baseline is measured, so
	// the baseline sees the load's steady state rather than its start.
	warmup = 2 * time.Second
	// sampleInterval is how often the move's progress is read.
	sampleInterval = 100 * time.Millisecond
	// caughtUpLag is the heartbeat lag at or under which the target has
	// caught up once the copy is done.
	caughtUpLag = time.Second
	// moveTimeout bounds the move, from its start until it has caught up.
	moveTimeout = 10 * time.Minute
	// afterCatchUp is how long the load goes on after the move caught up,
	// so the end of the move window is not the end of the load.
	afterCatchUp = 5 * time.Second
)

// phases is the times and CPU readings of the run's phases, and the move's
// samples.
type phases struct {
	// baselineFrom is the end of the warm-up; t0 the move's start, which
	// ends the baseline.
	baselineFrom, t0 time.Time
	cpuBaselineFrom  benchkit.CPUUse
	cpuT0            benchkit.CPUUse
	// samples are the move's, from t0 until it caught up (the last one).
	samples []sample
}

// measure runs the whole benchmark: the load, its baseline, the move under
// it, the end of the load, and the comparison of both tables.
func (b *bench) measure(ctx context.Context) (*report, error) {
	progress("load: oltp_write_only at %.0f transactions/s over %d connections, heartbeat every %s", b.cfg.TPS, b.cfg.Threads, heartbeatInterval)
	l := b.startLoad(ctx)
	p, err := b.runPhases(l)
	txns, lerr := l.finish()
	if err := errors.Join(err, lerr); err != nil {
		return nil, err
	}
	progress("load stopped after %d transactions and %d heartbeats; waiting for the target to apply the rest", len(txns), l.beats)
	if err := b.waitApplied(ctx); err != nil {
		return nil, err
	}
	verified, err := b.compare(ctx)
	if err != nil {
		return nil, err
	}
	for _, v := range verified {
		progress("  %s", v)
	}
	problems, err := b.procs.LogProblems()
	if err != nil {
		return nil, err
	}
	fence, err := b.streamer.LogEntry("copy and verify finished")
	if err != nil {
		return nil, err
	}
	return b.newReport(p, txns, l.beats, verified, problems, fence), nil
}

// runPhases lets the load warm up, measures the baseline, starts the move
// and follows it until it has caught up, then lets the load run on for
// afterCatchUp.
func (b *bench) runPhases(l *load) (p phases, err error) {
	ctx := l.Context()
	if err := l.Hold(warmup); err != nil {
		return p, err
	}
	progress("baseline: the load alone for %s", b.cfg.Baseline)
	if p.cpuBaselineFrom, err = b.cpuNow(); err != nil {
		return p, err
	}
	p.baselineFrom = time.Now()
	if err := l.Hold(b.cfg.Baseline); err != nil {
		return p, err
	}
	if p.cpuT0, err = b.cpuNow(); err != nil {
		return p, err
	}
	p.t0 = time.Now()
	progress("move: workflow %s of %s.%s and %s.%s", workflow, db, benchkit.SbtestTable, db, heartbeatTable)
	if err := b.startMove(ctx); err != nil {
		return p, err
	}
	if p.samples, err = b.follow(ctx, p.t0); err != nil {
		return p, err
	}
	m := analyze(p.samples, p.t0.UnixMicro(), caughtUpLag.Microseconds())
	progress("  copy done after %.2f s, caught up after %.2f s, heartbeat lag peak %.2f s", m.copyS, m.caughtUpS, m.lagPeakS)
	return p, l.Hold(afterCatchUp)
}

// sample is one reading of the move's progress.
type sample struct {
	// atUS is when the heartbeat row's read returned, Unix µs.
	atUS int64
	// heartbeatLagUS is atUS minus the heartbeat row's time on the target;
	// -1 while the target has no heartbeat row yet.
	heartbeatLagUS int64
	// rowliftLagUS is the stream's lag as the store records it (at the
	// applier's last commit); -1 before the stream has applied anything.
	rowliftLagUS int64
	// copied is whether every table's copy was done (deferred keys added).
	copied bool
	// cpu is every process's CPU seconds so far.
	cpu benchkit.CPUUse
}

// follow samples the move every sampleInterval from t0 until it has caught
// up (see analyze) and returns the samples, the last one the first caught up.
// It fails when the workflow fails, a rowlift process exits, or moveTimeout
// passes.
func (b *bench) follow(ctx context.Context, t0 time.Time) ([]sample, error) {
	ctx, cancel := context.WithTimeout(ctx, moveTimeout-time.Since(t0))
	defer cancel()
	tick := time.NewTicker(sampleInterval)
	defer tick.Stop()
	var samples []sample
	for {
		s, err := b.sample(ctx)
		if err != nil {
			if ctx.Err() == context.DeadlineExceeded {
				return nil, timedOut(samples)
			}
			return nil, err
		}
		samples = append(samples, s)
		if analyze(samples, t0.UnixMicro(), caughtUpLag.Microseconds()).caughtUp >= 0 {
			return samples, nil
		}
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				return nil, timedOut(samples)
			}
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// timedOut is follow's error when the move has not caught up in time.
func timedOut(samples []sample) error {
	copied, lag := false, "none"
	if n := len(samples); n > 0 {
		copied = samples[n-1].copied
		if us := samples[n-1].heartbeatLagUS; us >= 0 {
			lag = fmt.Sprintf("%.2f s", float64(us)/1e6)
		}
	}
	return fmt.Errorf("the move did not catch up within %s of its start (copy done: %v, last heartbeat lag: %s)", moveTimeout, copied, lag)
}

// sample reads the heartbeat row on the target, the stream's lag and copy
// state, and every process's CPU; it fails when the workflow has failed or
// a rowlift process has exited.
func (b *bench) sample(ctx context.Context) (sample, error) {
	s := sample{heartbeatLagUS: -1, rowliftLagUS: -1}
	var ts int64
	err := b.TgtDB.QueryRowContext(ctx, "SELECT ts_us FROM "+db+"."+heartbeatTable+" WHERE id = 1").Scan(&ts)
	s.atUS = time.Now().UnixMicro()
	switch {
	case err == nil:
		s.heartbeatLagUS = s.atUS - ts
	case !notThereYet(err):
		return s, fmt.Errorf("heartbeat on the target: %w", err)
	}
	for _, p := range b.procs.All() {
		if p.Exited() {
			return s, fmt.Errorf("rowlift %s exited during the move", p.Role)
		}
	}
	w, err := b.store.Workflow(ctx, workflow)
	if err != nil {
		return s, err
	}
	if w.State == state.Error {
		return s, fmt.Errorf("workflow %s failed: %s", workflow, w.Message)
	}
	if s.copied, err = b.store.CopyDone(ctx, workflow); err != nil {
		return s, err
	}
	streams, err := b.store.Streams(ctx, workflow)
	if err != nil {
		return s, err
	}
	if len(streams) > 0 && streams[0].SourceTimeUS > 0 {
		s.rowliftLagUS = streams[0].Lag().Microseconds()
	}
	s.cpu, err = b.cpuNow()
	return s, err
}

// notThereYet reports whether err is the target's heartbeat read before the
// applier has created the database or the table, or copied the row.
func notThereYet(err error) bool {
	if errors.Is(err, sql.ErrNoRows) {
		return true
	}
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1049 || me.Number == 1146) // unknown database, no such table
}
