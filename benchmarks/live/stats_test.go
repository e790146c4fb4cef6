package main

import (
	"math"
	"testing"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
)

// at is a sample at ms after t0 (0) with heartbeat lag lagMs (-1: none).
func at(ms, lagMs int64, copied bool) sample {
	lag := int64(-1)
	if lagMs >= 0 {
		lag = lagMs * 1000
	}
	return sample{atUS: ms * 1000, heartbeatLagUS: lag, copied: copied}
}

func TestAnalyze(t *testing.T) {
	const maxLag = 1_000_000
	for _, c := range []struct {
		name               string
		samples            []sample
		copyDone, caughtUp int
		copyS, caughtUpS   float64
		lagPeakS           float64
		lagSamples         int
	}{
		{
			name:     "no heartbeat row yet: no lag, never caught up",
			samples:  []sample{at(100, -1, false), at(200, -1, true)},
			copyDone: 1, caughtUp: -1, copyS: 0.2,
		},
		{
			name:     "caught up at the sample that finds the copy done",
			samples:  []sample{at(100, -1, false), at(200, 300, false), at(300, 900, true)},
			copyDone: 2, caughtUp: 2, copyS: 0.3, caughtUpS: 0.3, lagPeakS: 0.9, lagSamples: 2,
		},
		{
			name: "a low lag before the copy is done does not count",
			samples: []sample{at(100, 200, false), at(200, 2500, false), at(300, 1800, true),
				at(400, 1200, true), at(500, 1000, true), at(600, 100, true)},
			copyDone: 2, caughtUp: 4, copyS: 0.3, caughtUpS: 0.5, lagPeakS: 2.5, lagSamples: 3,
		},
		{
			name:     "the peak is until the copy is done, not after",
			samples:  []sample{at(100, 500, false), at(200, 1500, true), at(300, 3000, true), at(400, 50, true)},
			copyDone: 1, caughtUp: 3, copyS: 0.2, caughtUpS: 0.4, lagPeakS: 1.5, lagSamples: 2,
		},
		{
			name:     "copy not done",
			samples:  []sample{at(100, 10, false), at(200, 20, false)},
			copyDone: -1, caughtUp: -1, lagPeakS: 0.02, lagSamples: 2,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := analyze(c.samples, 0, maxLag)
			want := moveTimes{copyDone: c.copyDone, caughtUp: c.caughtUp, copyS: c.copyS, caughtUpS: c.caughtUpS, lagPeakS: c.lagPeakS, lagSamples: c.lagSamples}
			if m != want {
				t.Errorf("analyze = %+v, want %+v", m, want)
			}
		})
	}
}

// tx is a transaction due at dueMs that took latMs, with retries.
func tx(dueMs, latMs int64, retries int) txn {
	return txn{dueUS: dueMs * 1000, endUS: (dueMs + latMs) * 1000, retries: retries}
}

func TestPerSecond(t *testing.T) {
	var txns []txn
	// Due in second 0: 100 transactions of 1..100 ms, the last 9 of which
	// commit in second 1. Due in second 1 (stretched to the window's end at
	// 2.5 s): 10 of 5 ms with a retry each, one of 5 ms and one of 20 ms.
	// One before the window and one after it.
	for i := range int64(100) {
		txns = append(txns, tx(i*10, i+1, 0))
	}
	for i := range int64(10) {
		txns = append(txns, tx(1000+i*100, 5, 1))
	}
	txns = append(txns, tx(1999, 5, 0), tx(2400, 20, 0), tx(-50, 10, 7), tx(2500, 1, 7))
	secs := perSecond(txns, 0, 2_500_000)
	if len(secs) != 2 {
		t.Fatalf("%d seconds, want 2 (the last one stretched): %+v", len(secs), secs)
	}
	s0, s1 := secs[0], secs[1]
	if s0.Due != 100 || s0.P50Ms != 50 || s0.P95Ms != 95 || s0.P99Ms != 99 || s0.TPS != 91 || s0.LenS != 1 {
		t.Errorf("second 0 = %+v, want 100 due, p50/p95/p99 50/95/99 ms, 91 tps", s0)
	}
	if s1.Due != 12 || s1.LenS != 1.5 || s1.TPS != 21/1.5 || s1.P50Ms != 5 || s1.P95Ms != 20 || s1.P99Ms != 20 {
		t.Errorf("second 1 = %+v, want 12 due over 1.5 s, 14 tps, p50/p95/p99 5/20/20 ms", s1)
	}

	w := summarize(txns, 0, 2_500_000, benchkit.CPUUse{Source: 0.112, Target: 0.224})
	if w.Committed != 112 || w.TPS != 112/2.5 || w.Retries != 10 {
		t.Errorf("window: %d committed, %g tps, %d retries; want 112, %g, 10", w.Committed, w.TPS, w.Retries, 112/2.5)
	}
	// Medians of two seconds: the lower of each pair, by nearest rank.
	if w.P50Ms != 5 || w.P95Ms != 20 || w.P99Ms != 20 {
		t.Errorf("window p50/p95/p99 = %g/%g/%g ms, want 5/20/20", w.P50Ms, w.P95Ms, w.P99Ms)
	}
	if math.Abs(w.CPUPerTxnUS.Source-1000) > 1e-6 || math.Abs(w.CPUPerTxnUS.Target-2000) > 1e-6 {
		t.Errorf("CPU per transaction = %+v, want source 1000 µs, target 2000 µs", w.CPUPerTxnUS)
	}
}

func TestPerSecondShortWindow(t *testing.T) {
	secs := perSecond([]txn{tx(100, 10, 0), tx(300, 30, 0)}, 0, 400_000)
	if len(secs) != 1 || secs[0].LenS != 0.4 || secs[0].TPS != 5 || secs[0].P99Ms != 30 {
		t.Errorf("perSecond of a 0.4 s window = %+v, want one second of 0.4 s, 5 tps, p99 30 ms", secs)
	}
}
