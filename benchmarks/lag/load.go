package main

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

const (
	// warmup is how long the load runs before its measurement starts, so the
	// measurement sees the load's steady state rather than its start.
	warmup = 2 * time.Second
	// probeInterval is how often the probe reads what the target has applied.
	probeInterval = 10 * time.Millisecond
	insertEvent   = "INSERT INTO %s.events (created_us, payload) VALUES (?, ?)"
)

// payload is the payload of the n-th write of a load: 64 hex characters.
func payload(n int64) string {
	sum := sha256.Sum256(strconv.AppendInt(nil, n, 10))
	return hex.EncodeToString(sum[:])
}

// commits records when each row of bench.events was committed on the source, as
// its writer saw it: when its INSERT returned.
type commits struct {
	mu  sync.Mutex
	ack []int64 // Unix µs by id-1; 0 until the row's INSERT has returned
}

func (c *commits) add(id, ackUS int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := id - int64(len(c.ack)); n > 0 {
		c.ack = append(c.ack, make([]int64, n)...)
	}
	c.ack[id-1] = ackUS
}

// oldestPending is the earliest commit time of the rows after id visible that
// were committed by nowUS; ok is false when there are none. Rows commit in
// about id order, so the rows after the newest one the target shows are the
// ones it has yet to apply.
func (c *commits) oldestPending(visible, nowUS int64) (oldest int64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, us := range c.ack[min(visible, int64(len(c.ack))):] {
		if us != 0 && us <= nowUS && (!ok || us < oldest) {
			oldest, ok = us, true
		}
	}
	return oldest, ok
}

// count is how many rows were committed in [fromUS, toUS).
func (c *commits) count(fromUS, toUS int64) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, us := range c.ack {
		if us >= fromUS && us < toUS {
			n++
		}
	}
	return n
}

// lagSample is one reading of the probe.
type lagSample struct {
	atUS    int64 // when the probe sent its query, Unix µs
	visible int64 // MAX(id) of bench.events on the target
	lagUS   int64 // atUS - commit time of the oldest row committed by atUS and not visible; 0 if none
}

// load is single-row INSERT autocommit transactions into bench.events on the
// source at a fixed rate, spread over writers that share one schedule: the n-th
// write is due at start + n/rate. A write that is late (its writer was busy)
// goes at once, so a stall is made up for rather than lowering the rate, as
// with a ticker, which drops the ticks a slow receiver misses. Beside it, the
// probe reads what the target has applied every probeInterval.
type load struct {
	b     *bench
	rate  float64
	start time.Time
	seq   atomic.Int64
	stop  chan struct{}
	g     *errgroup.Group
	// ctx ends when the load fails (or the run is cancelled).
	ctx     context.Context
	samples []lagSample // the probe's; read after g.Wait
}

func (b *bench) startLoad(ctx context.Context, rate float64) (*load, error) {
	probe, err := b.tgtDB.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("probe connection: %w", err)
	}
	l := &load{b: b, rate: rate, start: time.Now(), stop: make(chan struct{})}
	l.g, l.ctx = errgroup.WithContext(ctx)
	for range b.cfg.Writers {
		l.g.Go(func() error { return l.write(l.ctx) })
	}
	l.g.Go(func() error {
		defer probe.Close()
		return l.probe(l.ctx, probe)
	})
	return l, nil
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

// finish stops the writers and the probe and returns the probe's samples.
func (l *load) finish() ([]lagSample, error) {
	close(l.stop)
	if err := l.g.Wait(); err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	return l.samples, nil
}

func (l *load) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

// write runs writes by the schedule until the load stops.
func (l *load) write(ctx context.Context) error {
	q := fmt.Sprintf(insertEvent, db)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for !l.stopped() {
		n := l.seq.Add(1) - 1
		timer.Reset(time.Until(l.start.Add(time.Duration(float64(n) / l.rate * float64(time.Second)))))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.stop:
			return nil
		case <-timer.C:
		}
		res, err := l.b.srcDB.ExecContext(ctx, q, time.Now().UnixMicro(), payload(n))
		if err != nil {
			return fmt.Errorf("write %d: %w", n, err)
		}
		ack := time.Now().UnixMicro()
		id, err := res.LastInsertId()
		if err != nil {
			return fmt.Errorf("write %d: insert id: %w", n, err)
		}
		l.b.commits.add(id, ack)
	}
	return nil
}

// probe samples the lag every probeInterval until the load stops.
func (l *load) probe(ctx context.Context, conn *sql.Conn) error {
	q := "SELECT COALESCE(MAX(id), 0) FROM " + db + ".events"
	tick := time.NewTicker(probeInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.stop:
			return nil
		case <-tick.C:
		}
		s := lagSample{atUS: time.Now().UnixMicro()}
		if err := conn.QueryRowContext(ctx, q).Scan(&s.visible); err != nil {
			return fmt.Errorf("probe: %w", err)
		}
		if oldest, ok := l.b.commits.oldestPending(s.visible, s.atUS); ok {
			s.lagUS = s.atUS - oldest
		}
		l.samples = append(l.samples, s)
	}
}
