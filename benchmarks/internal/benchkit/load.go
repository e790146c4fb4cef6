package benchkit

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// Load is a steady write load at a fixed rate, spread over writers that share
// one schedule: the n-th write is due at start + n/rate, and a late one (its
// writer was busy) goes at once, so a stall is made up for rather than
// lowering the rate, as with a ticker, which drops the ticks a slow receiver
// misses. The benchmarks that time something under load share it, so their
// loads keep the same pace.
type Load struct {
	rate  float64
	start time.Time
	seq   atomic.Int64
	stop  chan struct{}
	g     *errgroup.Group
	// ctx ends when the load fails (or the run is cancelled).
	ctx context.Context
}

// Writer is one writer's hold on its Load's schedule, with a timer of its own.
type Writer struct {
	l     *Load
	timer *time.Timer
}

// StartLoad starts writers goroutines at rate writes/s in all, each running
// write with its index and its Writer until the load stops or one fails.
func StartLoad(ctx context.Context, rate float64, writers int, write func(ctx context.Context, i int, w *Writer) error) *Load {
	l := &Load{rate: rate, start: time.Now(), stop: make(chan struct{})}
	l.g, l.ctx = errgroup.WithContext(ctx)
	for i := range writers {
		l.g.Go(func() error {
			w := &Writer{l: l, timer: time.NewTimer(0)}
			defer w.timer.Stop()
			return write(l.ctx, i, w)
		})
	}
	return l
}

// Go runs f beside the writers until the load stops (stop is closed), for
// what watches the load (lag's probe); its error fails the load.
func (l *Load) Go(f func(ctx context.Context, stop <-chan struct{}) error) {
	l.g.Go(func() error { return f(l.ctx, l.stop) })
}

// Every runs f every d beside the writers until the load stops, for what
// samples or marks the load (lag's probe, live's heartbeat); its error fails
// the load.
func (l *Load) Every(d time.Duration, f func(ctx context.Context) error) {
	l.Go(func(ctx context.Context, stop <-chan struct{}) error {
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-stop:
				return nil
			case <-tick.C:
			}
			if err := f(ctx); err != nil {
				return err
			}
		}
	})
}

// Hold lets the load run for d; it fails when the load does.
func (l *Load) Hold(d time.Duration) error {
	select {
	case <-l.ctx.Done():
		return fmt.Errorf("load: %w", context.Cause(l.ctx))
	case <-time.After(d):
		return nil
	}
}

// Finish stops the writers and whatever Go started and waits for them; it
// returns the first error of any.
func (l *Load) Finish() error {
	close(l.stop)
	if err := l.g.Wait(); err != nil {
		return fmt.Errorf("load: %w", err)
	}
	return nil
}

// Next waits until the next write of the schedule is due and returns its
// number (from 0); ok is false when the load has stopped or ctx has ended
// (err is then ctx's error).
func (w *Writer) Next(ctx context.Context) (n int64, ok bool, err error) {
	select {
	case <-w.l.stop:
		return 0, false, nil
	default:
	}
	n = w.l.seq.Add(1) - 1
	if ok, err := w.Pause(ctx, time.Until(w.Due(n))); !ok {
		return 0, false, err
	}
	return n, true, nil
}

// Due is when the n-th write of the schedule was due: a latency measured
// from it rather than from when the write went out counts the time a late
// write waited for its writer, which a stalled server would otherwise hide
// (coordinated omission).
func (w *Writer) Due(n int64) time.Time {
	return w.l.start.Add(time.Duration(float64(n) / w.l.rate * float64(time.Second)))
}

// Pause waits d, for a writer that tries a write again; ok is false when the
// load has stopped or ctx has ended (err is then ctx's error).
func (w *Writer) Pause(ctx context.Context, d time.Duration) (ok bool, err error) {
	w.timer.Reset(d)
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-w.l.stop:
		return false, nil
	case <-w.timer.C:
		return true, nil
	}
}

// Context ends when the load fails (or the run is cancelled), for work timed
// under the load that must stop with it.
func (l *Load) Context() context.Context { return l.ctx }
