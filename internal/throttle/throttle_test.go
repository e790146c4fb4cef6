package throttle

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

func TestReadingDecision(t *testing.T) {
	for _, tc := range []struct {
		r    Reading
		over bool
		text string
	}{
		{Reading{Side: "source", Metric: ThreadsRunning, Value: 57, Limit: 50}, true, "source Threads_running 57 > 50"},
		{Reading{Side: "source", Metric: ThreadsRunning, Value: 50, Limit: 50}, false, "source Threads_running 50 <= 50"},
		{Reading{Side: "target", Metric: HistoryLength, Value: 120000, Limit: 100000}, true, "target history_list_length 120000 > 100000"},
		{Reading{Side: "source", Metric: Lag, Value: 12.5, Limit: 10}, true, "source lag 12.5s > 10s"},
		{Reading{Side: "source", Metric: Lag, Value: 0.25, Limit: 0.5}, false, "source lag 0.25s <= 0.5s"},
		// A metric that cannot be read pauses the copy: it must not run blind.
		{Reading{Side: "target", Metric: Lag, Limit: 10, Err: errors.New("lag query returned NULL")}, true,
			"target lag unreadable (lag query returned NULL): the copy waits until it reads; fix the target throttle's lag setting, or set it to 0 (empty for the lag query) to turn the check off"},
	} {
		require.Equal(t, tc.over, tc.r.Over(), tc.text)
		require.Equal(t, tc.text, tc.r.String())
	}
}

func TestReasonListsEveryMetricOver(t *testing.T) {
	readings := []Reading{
		{Side: "source", Metric: ThreadsRunning, Value: 57, Limit: 50},
		{Side: "source", Metric: HistoryLength, Value: 10, Limit: 1000},
		{Side: "source", Metric: Lag, Value: 30, Limit: 10},
	}
	require.Equal(t, "source Threads_running 57 > 50; source lag 30s > 10s", Reason(readings))
	require.Equal(t, "", Reason(readings[1:2]))
	require.Equal(t, "", Reason(nil))
	require.Equal(t, "a; b", Join("", "a", "", "b"))
	require.Equal(t, "", Join("", ""))
}

func TestTrackerReportsStartsAndEndsOnce(t *testing.T) {
	t0 := time.Unix(1000, 0)
	threads := func(v float64) Reading {
		return Reading{Side: "source", Metric: ThreadsRunning, Value: v, Limit: 50}
	}
	lag := func(v float64) Reading { return Reading{Side: "source", Metric: Lag, Value: v, Limit: 10} }
	var tr Tracker

	started, ended := tr.Update([]Reading{threads(10), lag(1)}, t0)
	require.Empty(t, started)
	require.Empty(t, ended)

	started, ended = tr.Update([]Reading{threads(60), lag(1)}, t0.Add(time.Second))
	require.Equal(t, []Transition{{Reading: threads(60)}}, started)
	require.Empty(t, ended)

	// Still over, with another value: no new start.
	started, ended = tr.Update([]Reading{threads(70), lag(20)}, t0.Add(2*time.Second))
	require.Equal(t, []Transition{{Reading: lag(20)}}, started)
	require.Empty(t, ended)

	started, ended = tr.Update([]Reading{threads(40), lag(20)}, t0.Add(4*time.Second))
	require.Empty(t, started)
	require.Equal(t, []Transition{{Reading: threads(40), For: 3 * time.Second}}, ended)

	// A metric whose limit was turned off is no longer over.
	started, ended = tr.Update(nil, t0.Add(5*time.Second))
	require.Empty(t, started)
	require.Equal(t, []Transition{{Reading: Reading{Side: "source", Metric: Lag}, For: 3 * time.Second}}, ended)

	// An unreadable metric starts a throttle like one over its limit.
	bad := Reading{Side: "source", Metric: Lag, Limit: 10, Err: errors.New("no row")}
	started, _ = tr.Update([]Reading{bad}, t0.Add(6*time.Second))
	require.Equal(t, []Transition{{Reading: bad}}, started)
}

func TestParseHistoryLength(t *testing.T) {
	status := "------------\nTRANSACTIONS\n------------\nTrx id counter 16\n" +
		"Purge done for trx's n:o < 0 undo n:o < 0 state: running but idle\nHistory list length 4711\n" +
		"LIST OF TRANSACTIONS FOR EACH SESSION:\n"
	n, err := ParseHistoryLength(status)
	require.NoError(t, err)
	require.EqualValues(t, 4711, n)

	_, err = ParseHistoryLength("TRANSACTIONS\nTrx id counter 16\n")
	require.ErrorContains(t, err, `no "History list length" line`)
	_, err = ParseHistoryLength("History list length\n")
	require.ErrorContains(t, err, "has no number")
	_, err = ParseHistoryLength("History list length many\n")
	require.ErrorContains(t, err, `"History list length many"`)
}

func TestMetricsCounter(t *testing.T) {
	s := func(v string) *string { return &v }
	for _, tc := range []struct {
		name    string
		columns []string
		values  []*string
		n       int64
		ok      bool
		err     string
	}{
		{"mariadb enabled", []string{"NAME", "COUNT", "ENABLED"}, []*string{s("trx_rseg_history_len"), s("42"), s("1")}, 42, true, ""},
		{"mariadb disabled", []string{"NAME", "COUNT", "ENABLED"}, []*string{s("trx_rseg_history_len"), s("0"), s("0")}, 0, false, ""},
		{"mysql enabled", []string{"NAME", "COUNT", "STATUS"}, []*string{s("trx_rseg_history_len"), s("7"), s("enabled")}, 7, true, ""},
		{"mysql disabled", []string{"NAME", "COUNT", "STATUS"}, []*string{s("trx_rseg_history_len"), s("7"), s("disabled")}, 0, false, ""},
		{"no count column", []string{"NAME"}, []*string{s("trx_rseg_history_len")}, 0, false, ""},
		{"bad count", []string{"COUNT", "ENABLED"}, []*string{s("x"), s("1")}, 0, false, `COUNT "x"`},
	} {
		n, ok, err := MetricsCounter(tc.columns, tc.values)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.name)
			continue
		}
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.ok, ok, tc.name)
		require.Equal(t, tc.n, n, tc.name)
	}
}

func TestParseLag(t *testing.T) {
	s := func(v string) *string { return &v }
	v, err := ParseLag(s("12.5"))
	require.NoError(t, err)
	require.Equal(t, 12.5, v)
	v, err = ParseLag(s(" 3 "))
	require.NoError(t, err)
	require.Equal(t, 3.0, v)
	_, err = ParseLag(nil)
	require.ErrorContains(t, err, "NULL")
	_, err = ParseLag(s("Yes"))
	require.ErrorContains(t, err, `returned "Yes", not a number of seconds`)
}

func TestCheckLimits(t *testing.T) {
	require.NoError(t, Check("source", nil))
	require.NoError(t, Check("source", &rowliftv1.ThrottleLimits{ThreadsRunning: 50, LagQuery: "SELECT 1", MaxLagSeconds: 5}))
	require.ErrorContains(t, Check("target", &rowliftv1.ThrottleLimits{LagQuery: "SELECT 1"}), "target throttle has a lag query but no max_lag_seconds")
	require.ErrorContains(t, Check("source", &rowliftv1.ThrottleLimits{MaxLagSeconds: 1}), "no lag query")
	require.ErrorContains(t, Check("source", &rowliftv1.ThrottleLimits{ThreadsRunning: -1}), "must not be negative")

	require.False(t, Enabled(nil))
	require.False(t, Enabled(&rowliftv1.ThrottleLimits{}))
	require.True(t, Enabled(&rowliftv1.ThrottleLimits{HistoryLength: 1}))
	require.Equal(t, time.Second, Interval(0))
	require.Equal(t, 250*time.Millisecond, Interval(250))
}
