// Package throttle reads the server metrics that pause a workflow's copy
// (Threads_running, InnoDB's history list length, a user's lag query) and
// decides whether one is over its limit. The streamer uses it for the source and
// the applier for the target; neither pauses replay, which must keep up with the
// source. The decisions (Over, Reason, Tracker, the parsers) do no I/O, so they
// are tested without a server; Reader and Checker are the I/O around them.
package throttle

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// DefaultInterval is how often metrics are read when the workflow does not say:
// often enough that a copy reacts within a second, rare enough that the
// queries cost the server nothing it would notice.
const DefaultInterval = time.Second

// The metrics, as reasons and logs name them.
const (
	ThreadsRunning = "Threads_running"
	HistoryLength  = "history_list_length"
	Lag            = "lag"
)

// Interval is the check interval given in milliseconds, DefaultInterval for
// zero: the applier and the streamer read it from different messages.
func Interval(ms int64) time.Duration {
	if ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return DefaultInterval
}

// Enabled reports whether limits turn on any check.
func Enabled(l *rowliftv1.ThrottleLimits) bool {
	return l.GetThreadsRunning() > 0 || l.GetHistoryLength() > 0 || (l.GetLagQuery() != "" && l.GetMaxLagSeconds() > 0)
}

// Check validates limits before a workflow runs with them, so a half-set lag
// check fails at creation rather than silently never pausing.
func Check(side string, l *rowliftv1.ThrottleLimits) error {
	switch {
	case l.GetThreadsRunning() < 0 || l.GetHistoryLength() < 0 || l.GetMaxLagSeconds() < 0:
		return fmt.Errorf("%s throttle limits must not be negative", side)
	case l.GetLagQuery() != "" && l.GetMaxLagSeconds() == 0:
		return fmt.Errorf("%s throttle has a lag query but no max_lag_seconds: set the limit it is compared with", side)
	case l.GetLagQuery() == "" && l.GetMaxLagSeconds() > 0:
		return fmt.Errorf("%s throttle has max_lag_seconds but no lag query to measure it with", side)
	}
	return nil
}

// Reading is one metric of one server measured against its limit.
type Reading struct {
	// Side is "source" or "target".
	Side   string
	Metric string
	Value  float64
	Limit  float64
	// Err says why the metric could not be read; such a reading is over its
	// limit, since a copy must not run blind on a server it is told to protect.
	Err error
}

// Over reports whether the reading pauses the copy.
func (r Reading) Over() bool { return r.Err != nil || r.Value > r.Limit }

// key names the metric across readings.
func (r Reading) key() string { return r.Side + " " + r.Metric }

func (r Reading) String() string {
	if r.Err != nil {
		return fmt.Sprintf("%s %s unreadable (%v): the copy waits until it reads; fix the %s throttle's %s setting, "+
			"or set it to 0 (empty for the lag query) to turn the check off", r.Side, r.Metric, r.Err, r.Side, r.Metric)
	}
	unit, op := "", "<="
	if r.Metric == Lag {
		unit = "s"
	}
	if r.Over() {
		op = ">"
	}
	return fmt.Sprintf("%s %s %s%s %s %s%s", r.Side, r.Metric, number(r.Value), unit, op, number(r.Limit), unit)
}

func number(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// Reason is what status shows for readings: every one over its limit, joined
// by "; ", or "" when none is.
func Reason(readings []Reading) string {
	var over []string
	for _, r := range readings {
		if r.Over() {
			over = append(over, r.String())
		}
	}
	return strings.Join(over, "; ")
}

// Join joins non-empty reasons of both sides.
func Join(reasons ...string) string {
	var out []string
	for _, r := range reasons {
		if r != "" {
			out = append(out, r)
		}
	}
	return strings.Join(out, "; ")
}

// Transition is a metric that went over its limit or came back under it.
type Transition struct {
	Reading
	// For is how long the metric was over, on a transition back under.
	For time.Duration
}

// Tracker remembers which metrics are over their limits, so that starts and
// ends of throttling are logged once each rather than at every check.
type Tracker struct {
	over map[string]time.Time
}

// Update takes a check's readings at now and returns the metrics that went over
// their limits and those that came back under.
func (t *Tracker) Update(readings []Reading, now time.Time) (started, ended []Transition) {
	if t.over == nil {
		t.over = map[string]time.Time{}
	}
	seen := map[string]bool{}
	for _, r := range readings {
		seen[r.key()] = true
		since, was := t.over[r.key()]
		switch {
		case r.Over() && !was:
			t.over[r.key()] = now
			started = append(started, Transition{Reading: r})
		case !r.Over() && was:
			delete(t.over, r.key())
			ended = append(ended, Transition{Reading: r, For: now.Sub(since)})
		}
	}
	// A metric no longer read (its limit turned off) is no longer over.
	for key, since := range t.over {
		if !seen[key] {
			side, metric, _ := strings.Cut(key, " ")
			delete(t.over, key)
			ended = append(ended, Transition{Reading: Reading{Side: side, Metric: metric}, For: now.Sub(since)})
		}
	}
	return started, ended
}

// ParseHistoryLength finds InnoDB's history list length in the text of SHOW
// ENGINE INNODB STATUS ("History list length 1234"), for servers whose
// INNODB_METRICS counter is missing or disabled.
func ParseHistoryLength(status string) (int64, error) {
	const label = "History list length"
	for line := range strings.Lines(status) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), label)
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return 0, fmt.Errorf("SHOW ENGINE INNODB STATUS: %q has no number", strings.TrimSpace(line))
		}
		n, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("SHOW ENGINE INNODB STATUS: %q: %w", strings.TrimSpace(line), err)
		}
		return n, nil
	}
	return 0, fmt.Errorf("SHOW ENGINE INNODB STATUS has no %q line", label)
}

// MetricsCounter reads the trx_rseg_history_len row of
// information_schema.INNODB_METRICS given as column names and values. ok is
// false when the counter is disabled (MariaDB's ENABLED=0, MySQL's
// STATUS='disabled'), whose COUNT is stale.
func MetricsCounter(columns []string, values []*string) (n int64, ok bool, err error) {
	var count *string
	for i, c := range columns {
		v := values[i]
		switch strings.ToUpper(c) {
		case "COUNT":
			count = v
		case "ENABLED":
			if v == nil || *v != "1" {
				return 0, false, nil
			}
		case "STATUS":
			if v == nil || !strings.EqualFold(*v, "enabled") {
				return 0, false, nil
			}
		}
	}
	if count == nil {
		return 0, false, nil
	}
	n, err = strconv.ParseInt(*count, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("INNODB_METRICS trx_rseg_history_len COUNT %q: %w", *count, err)
	}
	return n, true, nil
}

// ParseLag reads the one number of seconds a lag query returned; nil is NULL.
func ParseLag(value *string) (float64, error) {
	if value == nil {
		return 0, fmt.Errorf("lag query returned NULL (is replication running?)")
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(*value), 64)
	if err != nil {
		return 0, fmt.Errorf("lag query returned %q, not a number of seconds", *value)
	}
	return v, nil
}
