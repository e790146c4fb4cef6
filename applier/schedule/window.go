package schedule

import (
	"slices"
	"time"
)

// Window bounds how far ahead of the oldest uncommitted item the workers may
// start items (in-order mode), so that a run of rollbacks lowers the
// parallelism instead of repeating: every item started ahead holds its locks
// until its commit turn, and is what a stuck head is rolled back against.
// It is additive increase, multiplicative decrease: a rollback that comes
// before Limit items have committed since the previous one (that one did not
// help, or rollbacks come in a run) halves the limit; Limit clean commits in a
// row raise it by one, up to the most it started with. Pure, like Scheduler.
type Window struct {
	max, limit int
	// clean counts the commits since the limit last changed or a rollback;
	// since counts the commits since the last rollback.
	clean, since int
	rolledBack   bool
}

// NewWindow returns a window of most items (at least 1).
func NewWindow(most int) *Window {
	n := max(most, 1)
	return &Window{max: n, limit: n}
}

// Limit is how many items after the low watermark may have started: pass it
// to NextWithin. The oldest uncommitted item is always within it.
func (w *Window) Limit() int { return w.limit }

// RolledBack records a rollback decided by Unstick.
func (w *Window) RolledBack() {
	if w.rolledBack && w.since < w.limit {
		w.limit = max(w.limit/2, 1)
	}
	w.rolledBack, w.since, w.clean = true, 0, 0
}

// Committed records one item committed.
func (w *Window) Committed() {
	w.since++
	w.clean++
	if w.clean >= w.limit && w.limit < w.max {
		w.limit++
		w.clean = 0
	}
}

// Latency keeps the execution times of recent items, for the stuck-group
// rule's timing fallback: an item is overdue only when it has run much longer
// than items do on this target now, so a slow target is not a stuck one.
type Latency struct {
	ring [latencySamples]time.Duration
	n    int // samples recorded, up to len(ring)
	next int
}

const (
	// latencySamples is how many recent execution times Patience looks at.
	latencySamples = 256
	// minSamples is how many Patience needs before it trusts the percentile.
	minSamples = 16
	// patienceFactor times the 99th percentile is the patience: an item that
	// runs that much longer than almost every recent one is not merely slow.
	patienceFactor = 4
	// minPatience keeps sub-millisecond targets from taking a scheduling hiccup
	// for a stuck item.
	minPatience = 20 * time.Millisecond
	// initialPatience is the patience before minSamples items have executed.
	initialPatience = time.Second
)

// Observe records how long the oldest item took to execute, from when it
// started or became the oldest, whichever came later: what Patience is
// compared with.
func (l *Latency) Observe(d time.Duration) {
	l.ring[l.next] = d
	l.next = (l.next + 1) % len(l.ring)
	l.n = min(l.n+1, len(l.ring))
}

// Patience is how long the oldest item may run before the timing fallback
// takes it for stuck: patienceFactor times the 99th percentile of the recent
// execution times, at least minPatience; initialPatience until minSamples
// items have executed.
func (l *Latency) Patience() time.Duration {
	if l.n < minSamples {
		return initialPatience
	}
	s := slices.Clone(l.ring[:l.n])
	slices.Sort(s)
	p99 := s[(len(s)*99)/100]
	return max(patienceFactor*p99, minPatience)
}
