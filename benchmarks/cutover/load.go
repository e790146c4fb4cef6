package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"golang.org/x/sync/errgroup"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
)

// retryPause is how long a writer waits before it tries a blocked write again:
// the resolution of the blocked times it records.
const retryPause = time.Millisecond

// write is one transaction of the load as its writer saw it.
type write struct {
	startUS int64 // its first try, Unix µs
	endUS   int64 // when its statement returned without error, Unix µs
	retries int   // tries that met a frozen or locked table
}

// load is single-row autocommit transactions on the moved table at a fixed
// rate, spread over writers that share one schedule: the n-th write is due at
// start + n/rate, and a late one goes at once, so a stall is made up for. Each
// write goes wherever route points at the time, as an application's would
// after it is re-routed, and is tried again until it commits when it meets
// the table frozen ("doesn't exist") or locked.
type load struct {
	b     *bench
	rate  float64
	start time.Time
	seq   atomic.Int64
	route atomic.Pointer[sql.DB]
	stop  chan struct{}
	g     *errgroup.Group
	// ctx ends when the load fails (or the run is cancelled).
	ctx context.Context

	mu     sync.Mutex
	writes []write
}

// startLoad starts the writers on the source.
func (b *bench) startLoad(ctx context.Context) *load {
	l := &load{b: b, rate: b.cfg.Rate, start: time.Now(), stop: make(chan struct{})}
	l.route.Store(b.srcDB)
	l.g, l.ctx = errgroup.WithContext(ctx)
	for i := range b.cfg.Writers {
		rng := rand.New(rand.NewPCG(1, uint64(i)))
		l.g.Go(func() error { return l.write(l.ctx, rng) })
	}
	return l
}

// hold lets the load run for d; it fails when the load does.
func (l *load) hold(d time.Duration) error {
	select {
	case <-l.ctx.Done():
		return fmt.Errorf("load: %w", context.Cause(l.ctx))
	case <-time.After(d):
		return nil
	}
}

// finish stops the writers and returns every write, in the order they committed.
func (l *load) finish() ([]write, error) {
	close(l.stop)
	if err := l.g.Wait(); err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	return l.writes, nil
}

// write runs writes by the schedule until the load stops.
func (l *load) write(ctx context.Context, rng *rand.Rand) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		n := l.seq.Add(1) - 1
		timer.Reset(time.Until(l.start.Add(time.Duration(float64(n) / l.rate * float64(time.Second)))))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.stop:
			return nil
		case <-timer.C:
		}
		q, args := l.statement(n, rng)
		w := write{startUS: time.Now().UnixMicro()}
		for {
			_, err := l.route.Load().ExecContext(ctx, q, args...)
			if err == nil {
				break
			}
			if !blocked(err) {
				return fmt.Errorf("write %d (%s): %w", n, q, err)
			}
			w.retries++
			timer.Reset(retryPause)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-l.stop:
				return nil // the load stops between cutovers: nothing blocks then
			case <-timer.C:
			}
		}
		w.endUS = time.Now().UnixMicro()
		l.mu.Lock()
		l.writes = append(l.writes, w)
		l.mu.Unlock()
	}
}

// statement is the n-th write: half of them update a seeded row, a quarter
// insert a row of their own, a quarter delete a seeded row (if still there).
func (l *load) statement(n int64, rng *rand.Rand) (string, []any) {
	table := db + "." + benchkit.StressTable
	seeded := 1 + rng.Int64N(l.b.cfg.Rows)
	switch n % 4 {
	case 0, 1:
		return "UPDATE " + table + " SET sig = SHA1(?) WHERE id = ?", []any{n, seeded}
	case 2:
		id := l.b.cfg.Rows + 1 + n
		return "INSERT INTO " + table + " (id, sig, c) VALUES (?, SHA1(?), LEFT(SHA1(?), 8))", []any{id, id, id}
	default:
		return "DELETE FROM " + table + " WHERE id = ?", []any{seeded}
	}
}

// blocked reports whether err is what a write meets during a cutover: its
// table renamed away by the freeze, or a lock.
func blocked(err error) bool {
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		return false
	}
	switch me.Number {
	case 1146, 1205, 1213: // table doesn't exist, lock wait timeout, deadlock
		return true
	}
	return false
}
