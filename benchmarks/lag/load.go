package main

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
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
// source at a fixed rate, on benchkit.Load's shared schedule. Beside it, the
// probe reads what the target has applied every probeInterval.
type load struct {
	*benchkit.Load
	b       *bench
	samples []lagSample // the probe's; read after Finish
	// probeConn is the probe's connection to the target, closed by finish.
	probeConn *sql.Conn
}

func (b *bench) startLoad(ctx context.Context, rate float64) (*load, error) {
	probe, err := b.TgtDB.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("probe connection: %w", err)
	}
	l := &load{b: b, probeConn: probe}
	l.Load = benchkit.StartLoad(ctx, rate, b.cfg.Writers, func(ctx context.Context, _ int, w *benchkit.Writer) error {
		return l.write(ctx, w)
	})
	l.Every(probeInterval, l.probe)
	return l, nil
}

// finish stops the writers and the probe and returns the probe's samples.
func (l *load) finish() ([]lagSample, error) {
	defer l.probeConn.Close()
	if err := l.Finish(); err != nil {
		return nil, err
	}
	return l.samples, nil
}

// write runs writes by the schedule until the load stops.
func (l *load) write(ctx context.Context, w *benchkit.Writer) error {
	q := fmt.Sprintf(insertEvent, db)
	for {
		n, ok, err := w.Next(ctx)
		if !ok {
			return err
		}
		res, err := l.b.SrcDB.ExecContext(ctx, q, time.Now().UnixMicro(), payload(n))
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
}

// probe samples the lag, every probeInterval while the load runs.
func (l *load) probe(ctx context.Context) error {
	s := lagSample{atUS: time.Now().UnixMicro()}
	if err := l.probeConn.QueryRowContext(ctx, "SELECT COALESCE(MAX(id), 0) FROM "+db+".events").Scan(&s.visible); err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	if oldest, ok := l.b.commits.oldestPending(s.visible, s.atUS); ok {
		s.lagUS = s.atUS - oldest
	}
	l.samples = append(l.samples, s)
	return nil
}
