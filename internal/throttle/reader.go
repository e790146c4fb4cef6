package throttle

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// queryTimeout bounds one metric query: a server too busy to answer within it
// is a server to pause the copy for.
const queryTimeout = 5 * time.Second

// Reader reads the metrics one server's limits turn on, one query each.
type Reader struct {
	db     *sql.DB
	side   string
	limits *rowliftv1.ThrottleLimits
	// fromStatus is set once INNODB_METRICS turned out not to have an enabled
	// history counter, so later reads go straight to SHOW ENGINE INNODB STATUS.
	fromStatus bool
}

// NewReader reads side's metrics ("source" or "target") from db.
func NewReader(db *sql.DB, side string, limits *rowliftv1.ThrottleLimits) *Reader {
	return &Reader{db: db, side: side, limits: limits}
}

// Read returns one reading per metric turned on, in a fixed order.
func (r *Reader) Read(ctx context.Context) []Reading {
	var out []Reading
	if l := r.limits.GetThreadsRunning(); l > 0 {
		v, err := r.threadsRunning(ctx)
		out = append(out, Reading{Side: r.side, Metric: ThreadsRunning, Value: float64(v), Limit: float64(l), Err: err})
	}
	if l := r.limits.GetHistoryLength(); l > 0 {
		v, err := r.historyLength(ctx)
		out = append(out, Reading{Side: r.side, Metric: HistoryLength, Value: float64(v), Limit: float64(l), Err: err})
	}
	if q, l := r.limits.GetLagQuery(), r.limits.GetMaxLagSeconds(); q != "" && l > 0 {
		v, err := r.lag(ctx, q)
		out = append(out, Reading{Side: r.side, Metric: Lag, Value: v, Limit: l, Err: err})
	}
	return out
}

func (r *Reader) threadsRunning(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	var name string
	var n int64
	if err := r.db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Threads_running'").Scan(&name, &n); err != nil {
		return 0, fmt.Errorf("SHOW GLOBAL STATUS LIKE 'Threads_running': %w", err)
	}
	return n, nil
}

// historyLength reads InnoDB's history list length from INNODB_METRICS, where
// MySQL and MariaDB keep it enabled by default, or else from SHOW ENGINE INNODB
// STATUS, which every version prints but which costs the server more.
func (r *Reader) historyLength(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	if !r.fromStatus {
		n, ok, err := r.metricsCounter(ctx)
		if err != nil {
			return 0, err
		}
		if ok {
			return n, nil
		}
		r.fromStatus = true
	}
	var typ, name, status string
	if err := r.db.QueryRowContext(ctx, "SHOW ENGINE INNODB STATUS").Scan(&typ, &name, &status); err != nil {
		return 0, fmt.Errorf("SHOW ENGINE INNODB STATUS: %w", err)
	}
	return ParseHistoryLength(status)
}

func (r *Reader) metricsCounter(ctx context.Context) (int64, bool, error) {
	// SELECT *: the column that says whether the counter is on is ENABLED on
	// MariaDB and STATUS on MySQL.
	rows, err := r.db.QueryContext(ctx, "SELECT * FROM information_schema.INNODB_METRICS WHERE NAME = 'trx_rseg_history_len'")
	if err != nil {
		return 0, false, fmt.Errorf("read INNODB_METRICS: %w", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, false, fmt.Errorf("read INNODB_METRICS: %w", err)
	}
	if !rows.Next() {
		return 0, false, rows.Err()
	}
	raw := make([]sql.NullString, len(cols))
	dest := make([]any, len(cols))
	for i := range raw {
		dest[i] = &raw[i]
	}
	if err := rows.Scan(dest...); err != nil {
		return 0, false, fmt.Errorf("read INNODB_METRICS: %w", err)
	}
	return MetricsCounter(cols, nullables(raw))
}

func (r *Reader) lag(ctx context.Context, query string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	rows, err := r.db.QueryContext(ctx, query)
	if err != nil {
		return 0, fmt.Errorf("lag query: %w", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, fmt.Errorf("lag query: %w", err)
	}
	if len(cols) != 1 {
		return 0, fmt.Errorf("lag query returned %d columns, want one number of seconds", len(cols))
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return 0, fmt.Errorf("lag query: %w", err)
		}
		return 0, errors.New("lag query returned no row")
	}
	var v sql.NullString
	if err := rows.Scan(&v); err != nil {
		return 0, fmt.Errorf("lag query: %w", err)
	}
	if rows.Next() {
		return 0, errors.New("lag query returned more than one row, want one number of seconds")
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("lag query: %w", err)
	}
	return ParseLag(nullables([]sql.NullString{v})[0])
}

func nullables(raw []sql.NullString) []*string {
	out := make([]*string, len(raw))
	for i := range raw {
		if raw[i].Valid {
			out[i] = &raw[i].String
		}
	}
	return out
}

// Checker reads a server's metrics at most once per interval however many
// callers ask, so parallel table copies cost the server one query per metric
// per interval, and logs each metric going over its limit and back under.
type Checker struct {
	reader   *Reader
	interval time.Duration
	log      *zap.Logger
	now      func() time.Time

	mu       sync.Mutex
	readAt   time.Time
	readings []Reading
	reason   string // Reason(readings)
	tracker  Tracker
}

// NewChecker checks reader's metrics every interval, logging to log.
func NewChecker(reader *Reader, interval time.Duration, log *zap.Logger) *Checker {
	return &Checker{reader: reader, interval: interval, log: log, now: time.Now}
}

// Reason returns why the copy must pause, "" when every metric is under its
// limit, reading the server when the last reading is older than the interval.
func (c *Checker) Reason(ctx context.Context) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if start := c.now(); c.readAt.IsZero() || start.Sub(c.readAt) >= c.interval {
		readings := c.reader.Read(ctx)
		if ctx.Err() != nil {
			// A stream that is ending: its cancelled queries say nothing of the server.
			return c.reason
		}
		// Stamped when the read started: a caller ticking every interval must
		// find the reading due again, however long the queries took.
		c.readings, c.readAt, c.reason = readings, start, Reason(readings)
		started, ended := c.tracker.Update(readings, c.readAt)
		for _, t := range started {
			fields := []zap.Field{zap.String("side", t.Side), zap.String("metric", t.Metric)}
			if t.Err != nil {
				fields = append(fields, zap.Error(t.Err))
			} else {
				fields = append(fields, zap.Float64("value", t.Value), zap.Float64("limit", t.Limit))
			}
			c.log.Info("copy throttled: metric over its limit", append(fields, zap.String("reason", t.String()))...)
		}
		for _, t := range ended {
			c.log.Info("copy throttle lifted: metric back under its limit", zap.String("side", t.Side), zap.String("metric", t.Metric),
				zap.Float64("value", t.Value), zap.Float64("limit", t.Limit), zap.Duration("throttled_for", t.For))
		}
	}
	return c.reason
}
