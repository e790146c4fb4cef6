package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
	"github.com/rowlift/rowlift/state"
)

const (
	// capacityDuration is how long the baseline commits as fast as it can.
	capacityDuration = 5 * time.Second
	// capacityDB holds the baseline's scratch table on the target.
	capacityDB = "bench_capacity"
)

// capacity is the baseline R: single-row INSERT autocommit transactions, as the
// load writes them, committed by one connection on the target as fast as it can.
type capacity struct {
	Transactions int64   `json:"transactions"`
	WallS        float64 `json:"wall_s"`
	PerS         float64 `json:"per_s"`
}

func (b *bench) measureCapacity(ctx context.Context) (capacity, error) {
	progress("baseline: one connection on the target for %s", capacityDuration)
	if err := b.quiesce(ctx); err != nil {
		return capacity{}, err
	}
	for _, q := range []string{"CREATE DATABASE " + capacityDB, fmt.Sprintf(eventsDDL, capacityDB)} {
		if _, err := b.TgtDB.ExecContext(ctx, q); err != nil {
			return capacity{}, fmt.Errorf("baseline: %s: %w", q, err)
		}
	}
	conn, err := b.TgtDB.Conn(ctx)
	if err != nil {
		return capacity{}, fmt.Errorf("baseline: %w", err)
	}
	defer conn.Close()
	q := fmt.Sprintf(insertEvent, capacityDB)
	var c capacity
	start := time.Now()
	for ; time.Since(start) < capacityDuration; c.Transactions++ {
		if _, err := conn.ExecContext(ctx, q, time.Now().UnixMicro(), payload(c.Transactions)); err != nil {
			return capacity{}, fmt.Errorf("baseline insert: %w", err)
		}
	}
	c.WallS = time.Since(start).Seconds()
	c.PerS = float64(c.Transactions) / c.WallS
	if _, err := b.TgtDB.ExecContext(ctx, "DROP DATABASE "+capacityDB); err != nil {
		return capacity{}, fmt.Errorf("baseline: drop %s: %w", capacityDB, err)
	}
	progress("  R = %.0f transactions/s", c.PerS)
	return c, nil
}

// quiesce waits until both servers have flushed what the last phase wrote; the
// workflow of bench.events keeps a few pages dirty with its position.
func (b *bench) quiesce(ctx context.Context) error {
	const maxDirty = 32
	return benchkit.Quiesce(ctx, maxDirty, b.SrcDB, b.TgtDB)
}

// span is a measured interval and the CPU used in it.
type span struct {
	from, to time.Time
	cpu      benchkit.CPUUse
}

func (s span) seconds() float64 { return s.to.Sub(s.from).Seconds() }

// measure runs fn and returns the span it took.
func (b *bench) measure(ctx context.Context, fn func(context.Context) error) (span, error) {
	c0, err := b.cpuNow()
	if err != nil {
		return span{}, err
	}
	s := span{from: time.Now()}
	if err := fn(ctx); err != nil {
		return span{}, err
	}
	s.to = time.Now()
	c1, err := b.cpuNow()
	s.cpu = c1.Sub(c0)
	return s, err
}

// withLoad starts the load, lets it warm up, runs fn under it, stops it, waits
// until the target has applied all of it, and returns the load's figures over
// the span fn measured.
func (b *bench) withLoad(ctx context.Context, rate float64, fn func(*load) (span, error)) (window, error) {
	l, err := b.startLoad(ctx, rate)
	if err != nil {
		return window{}, err
	}
	var s span
	if err = l.Hold(warmup); err == nil {
		s, err = fn(l)
	}
	samples, lerr := l.finish()
	if err := errors.Join(err, lerr); err != nil {
		return window{}, err
	}
	if err := b.waitCaughtUp(ctx); err != nil {
		return window{}, err
	}
	return b.summarize(rate, samples, s), nil
}

// steady measures the load alone for -duration.
func (b *bench) steady(ctx context.Context, rate float64) (window, error) {
	progress("steady load for %s", b.cfg.Duration)
	if err := b.quiesce(ctx); err != nil {
		return window{}, err
	}
	w, err := b.withLoad(ctx, rate, func(l *load) (span, error) {
		return b.measure(l.Context(), func(context.Context) error { return l.Hold(b.cfg.Duration) })
	})
	if err != nil {
		return window{}, fmt.Errorf("steady load: %w", err)
	}
	progress("  lag p50 %.1f ms, p99 %.1f ms, max %.1f ms", w.LagP50Ms, w.LagP99Ms, w.LagMaxMs)
	return w, nil
}

// copyResult is the copy of stress_test_pk with no load and under the load.
type copyResult struct {
	Rows           int64           `json:"rows"`
	IdleS          float64         `json:"idle_s"`
	LoadedS        float64         `json:"loaded_s"`
	Slowdown       float64         `json:"slowdown_loaded_over_idle"`
	IdleRowsPerS   float64         `json:"idle_rows_per_s"`
	LoadedRowsPerS float64         `json:"loaded_rows_per_s"`
	IdleCPU        benchkit.CPUUse `json:"idle_cpu_s"`
	// Load is the load during the loaded copy; its CPU is the loaded copy's.
	Load window `json:"load_during_loaded_copy"`
}

// copies times a copy of stress_test_pk with no load, drops it from the target,
// and times it again under the load.
func (b *bench) copies(ctx context.Context, rate float64) (copyResult, error) {
	r := copyResult{Rows: b.cfg.Rows}
	progress("copy of %d rows, idle", b.cfg.Rows)
	if err := b.quiesce(ctx); err != nil {
		return r, err
	}
	idle, err := b.timedCopy(ctx, "copy-idle")
	if err != nil {
		return r, fmt.Errorf("idle copy: %w", err)
	}
	r.IdleS, r.IdleCPU = idle.seconds(), idle.cpu
	progress("  %.2f s", r.IdleS)
	if err := b.dropCopy(ctx, "copy-idle"); err != nil {
		return r, err
	}
	progress("copy of %d rows under the load", b.cfg.Rows)
	if err := b.quiesce(ctx); err != nil {
		return r, err
	}
	if r.Load, err = b.withLoad(ctx, rate, func(l *load) (span, error) {
		return b.timedCopy(l.Context(), "copy-loaded")
	}); err != nil {
		return r, fmt.Errorf("loaded copy: %w", err)
	}
	r.LoadedS = r.Load.WallS
	progress("  %.2f s", r.LoadedS)
	r.Slowdown = r.LoadedS / r.IdleS
	r.IdleRowsPerS, r.LoadedRowsPerS = float64(r.Rows)/r.IdleS, float64(r.Rows)/r.LoadedS
	return r, nil
}

// timedCopy copies stress_test_pk with a new workflow, timed from the workflow
// entering copying to the copy being done, and checks the target's row count.
func (b *bench) timedCopy(ctx context.Context, name string) (span, error) {
	if err := b.store.CreateWorkflow(ctx, b.spec(name, benchkit.StressTable), "main"); err != nil {
		return span{}, err
	}
	s, err := b.measure(ctx, func(ctx context.Context) error {
		if err := b.store.SetState(ctx, name, state.Copying, ""); err != nil {
			return err
		}
		return benchkit.WaitCopied(ctx, b.store, name, b.streamer, b.applier)
	})
	if err != nil {
		return span{}, err
	}
	return s, benchkit.CheckCount(ctx, b.TgtDB, db+"."+benchkit.StressTable, b.cfg.Rows)
}

// dropCopy deletes a copy's workflow, gives the applier time to stop its stream,
// and drops the copied table from the target.
func (b *bench) dropCopy(ctx context.Context, name string) error {
	if err := b.store.DeleteWorkflow(ctx, name); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(5 * benchkit.PollInterval):
	}
	if _, err := b.TgtDB.ExecContext(ctx, "DROP TABLE "+db+"."+benchkit.StressTable); err != nil {
		return fmt.Errorf("drop the idle copy: %w", err)
	}
	return nil
}

// window is the load's figures over a measured span.
type window struct {
	WallS       float64         `json:"wall_s"`
	TargetRate  float64         `json:"target_rate_per_s"`
	WriteRate   float64         `json:"write_rate_per_s"`
	AppliedRate float64         `json:"applied_rate_per_s"`
	LagSamples  int             `json:"lag_samples"`
	LagP50Ms    float64         `json:"lag_p50_ms"`
	LagP99Ms    float64         `json:"lag_p99_ms"`
	LagMaxMs    float64         `json:"lag_max_ms"`
	CPU         benchkit.CPUUse `json:"cpu_s"`
}

// summarize computes the load's figures from the samples taken within s: the
// rates of source commits and of rows becoming visible on the target, and the
// lag's nearest-rank percentiles.
func (b *bench) summarize(rate float64, samples []lagSample, s span) window {
	from, to := s.from.UnixMicro(), s.to.UnixMicro()
	w := window{WallS: s.seconds(), TargetRate: rate, CPU: s.cpu}
	w.WriteRate = float64(b.commits.count(from, to)) / w.WallS
	var lags []int64
	var first, last lagSample
	for _, smp := range samples {
		if smp.atUS < from || smp.atUS >= to {
			continue
		}
		if lags == nil {
			first = smp
		}
		last = smp
		lags = append(lags, smp.lagUS)
	}
	w.LagSamples = len(lags)
	if len(lags) < 2 {
		return w
	}
	w.AppliedRate = float64(last.visible-first.visible) / (float64(last.atUS-first.atUS) / 1e6)
	slices.Sort(lags)
	w.LagP50Ms, w.LagP99Ms = float64(benchkit.Rank(lags, 0.50))/1e3, float64(benchkit.Rank(lags, 0.99))/1e3
	w.LagMaxMs = float64(lags[len(lags)-1]) / 1e3
	return w
}
