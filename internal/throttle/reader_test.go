package throttle

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// TestReaderOnARealServer reads every metric from a real server, the history
// list length both from INNODB_METRICS and from SHOW ENGINE INNODB STATUS, and
// lag queries that return what a user's query may return.
func TestReaderOnARealServer(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		srv := sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
		db := sandboxtest.Open(t, srv, "")
		sandboxtest.Exec(t, db, "CREATE DATABASE ctl", "CREATE TABLE ctl.lag (v DECIMAL(10,3))", "INSERT INTO ctl.lag VALUES (12.5)")
		ctx := context.Background()

		limits := &rowliftv1.ThrottleLimits{ThreadsRunning: 1000, HistoryLength: 1 << 40, LagQuery: "SELECT v FROM ctl.lag", MaxLagSeconds: 10}
		r := NewReader(db, "source", limits)
		readings := r.Read(ctx)
		require.Len(t, readings, 3)
		for _, rd := range readings {
			require.NoError(t, rd.Err, rd.Metric)
		}
		require.Equal(t, ThreadsRunning, readings[0].Metric)
		require.GreaterOrEqual(t, readings[0].Value, 1.0, "this session's own query runs")
		require.False(t, readings[0].Over())
		require.Equal(t, HistoryLength, readings[1].Metric)
		require.False(t, r.fromStatus, "MariaDB keeps the INNODB_METRICS counter on")
		require.Equal(t, Reading{Side: "source", Metric: Lag, Value: 12.5, Limit: 10}, readings[2])
		require.Equal(t, "source lag 12.5s > 10s", Reason(readings))

		fromMetrics := readings[1].Value
		r.fromStatus = true
		n, err := r.historyLength(ctx)
		require.NoError(t, err)
		// Purge may shorten the list between the two reads, never lengthen it on an idle server.
		require.LessOrEqual(t, float64(n), fromMetrics+10)

		for _, tc := range []struct{ query, err string }{
			{"SELECT NULL", "lag query returned NULL"},
			{"SELECT v FROM ctl.lag WHERE v < 0", "lag query returned no row"},
			{"SELECT 1, 2", "lag query returned 2 columns"},
			{"SELECT 1 UNION ALL SELECT 2", "more than one row"},
			{"SELECT 'Yes'", `returned "Yes", not a number`},
			{"SELECT nope FROM ctl.lag", "Unknown column"},
		} {
			_, err := r.lag(ctx, tc.query)
			require.ErrorContains(t, err, tc.err, tc.query)
		}
	})
}

// TestCheckerReadsOncePerInterval: parallel copies share one reading per
// interval, and a metric going over and back under is logged once each way.
func TestCheckerReadsOncePerInterval(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		srv := sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
		db := sandboxtest.Open(t, srv, "")
		sandboxtest.Exec(t, db, "CREATE DATABASE ctl", "CREATE TABLE ctl.lag (v INT)", "INSERT INTO ctl.lag VALUES (30)")
		core, logs := observer.New(zap.InfoLevel)
		c := NewChecker(NewReader(db, "target", &rowliftv1.ThrottleLimits{LagQuery: "SELECT v FROM ctl.lag", MaxLagSeconds: 10}), time.Hour, zap.New(core))
		now := time.Unix(1000, 0)
		c.now = func() time.Time { return now }
		ctx := context.Background()

		require.Equal(t, "target lag 30s > 10s", c.Reason(ctx))
		sandboxtest.Exec(t, db, "UPDATE ctl.lag SET v = 1")
		require.Equal(t, "target lag 30s > 10s", c.Reason(ctx), "within the interval the last reading stands")
		now = now.Add(time.Hour)
		require.Equal(t, "", c.Reason(ctx))

		entries := logs.All()
		require.Len(t, entries, 2)
		require.Equal(t, "copy throttled: metric over its limit", entries[0].Message)
		require.Equal(t, map[string]any{"side": "target", "metric": "lag", "value": 30.0, "limit": 10.0, "reason": "target lag 30s > 10s"},
			entries[0].ContextMap())
		require.Equal(t, "copy throttle lifted: metric back under its limit", entries[1].Message)
		require.Equal(t, time.Hour, entries[1].ContextMap()["throttled_for"])
	})
}

// TestCheckerDueAgainAfterAnIntervalFromItsRead: a caller asking every interval
// gets a fresh reading each time, however long the reading took (the applier
// ticks at the interval, and a slow query must not make it skip every other).
func TestCheckerDueAgainAfterAnIntervalFromItsRead(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		srv := sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
		db := sandboxtest.Open(t, srv, "")
		sandboxtest.Exec(t, db, "CREATE DATABASE ctl", "CREATE TABLE ctl.lag (v INT)", "INSERT INTO ctl.lag VALUES (30)")
		const interval = 300 * time.Millisecond
		c := NewChecker(NewReader(db, "source", &rowliftv1.ThrottleLimits{LagQuery: "SELECT SLEEP(0.2) + v FROM ctl.lag", MaxLagSeconds: 10}),
			interval, zap.NewNop())
		var first time.Time
		c.now = func() time.Time {
			now := time.Now()
			if first.IsZero() {
				first = now
			}
			return now
		}
		ctx := context.Background()
		require.Equal(t, "source lag 30s > 10s", c.Reason(ctx))
		sandboxtest.Exec(t, db, "UPDATE ctl.lag SET v = 1")
		time.Sleep(time.Until(first.Add(interval)))
		require.Equal(t, "", c.Reason(ctx), "an interval after the last read began, the metric is read again")
	})
}
