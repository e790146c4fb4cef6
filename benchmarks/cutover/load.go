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
	// refusedUS is the first of those tries (0: none), Unix µs.
	refusedUS int64
}

// load is single-row autocommit transactions on the moved table at a fixed
// rate, on benchkit.Load's shared schedule. Each write goes wherever route
// points at the time, as an application's would after its routing hook
// re-routed it, and is
// tried again until it commits when it meets the table frozen ("doesn't
// exist") or locked.
type load struct {
	*benchkit.Load
	b     *bench
	route atomic.Pointer[sql.DB]

	mu     sync.Mutex
	writes []write
}

// startLoad starts the writers on the source.
func (b *bench) startLoad(ctx context.Context) *load {
	l := &load{b: b}
	l.route.Store(b.SrcDB)
	l.Load = benchkit.StartLoad(ctx, b.cfg.Rate, b.cfg.Writers, func(ctx context.Context, i int, w *benchkit.Writer) error {
		return l.write(ctx, rand.New(rand.NewPCG(1, uint64(i))), w)
	})
	return l
}

// finish stops the writers and returns every write, in the order they committed.
func (l *load) finish() ([]write, error) {
	if err := l.Finish(); err != nil {
		return nil, err
	}
	return l.writes, nil
}

// write runs writes by the schedule until the load stops.
func (l *load) write(ctx context.Context, rng *rand.Rand, wr *benchkit.Writer) error {
	for {
		n, ok, err := wr.Next(ctx)
		if !ok {
			return err
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
			if w.retries == 0 {
				w.refusedUS = time.Now().UnixMicro()
			}
			w.retries++
			// The load stops between cutovers: nothing blocks then.
			if ok, err := wr.Pause(ctx, retryPause); !ok {
				return err
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
		return "UPDATE " + table + " SET sig = ? WHERE id = ?", []any{benchkit.StressSig(n), seeded}
	case 2:
		id := l.b.cfg.Rows + 1 + n
		sig := benchkit.StressSig(id)
		return "INSERT INTO " + table + " (id, sig, c) VALUES (?, ?, ?)", []any{id, sig, sig[:8]}
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
