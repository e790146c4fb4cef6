package main

import (
	"slices"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
)

// moveTimes is what a move's samples say, in seconds from its start t0.
type moveTimes struct {
	// copyDone and caughtUp index the first sample with the copy done, and
	// the first one from there on whose heartbeat lag is at most the
	// caught-up lag; -1 when there is none yet.
	copyDone, caughtUp int
	copyS, caughtUpS   float64
	// lagPeakS is the largest heartbeat lag from t0 until the copy was done
	// (until the last sample while it is not), and lagSamples how many
	// heartbeat lags that span has.
	lagPeakS   float64
	lagSamples int
}

// analyze finds in samples (in the order they were taken, from t0 on) when
// the copy was done, when the target then caught up (heartbeat lag at most
// maxLagUS), and the heartbeat lag's peak until the copy was done. A sample
// without a heartbeat lag (the target had no heartbeat row yet) never
// catches up.
func analyze(samples []sample, t0US, maxLagUS int64) moveTimes {
	m := moveTimes{copyDone: -1, caughtUp: -1}
	for i, s := range samples {
		if m.copyDone < 0 && s.heartbeatLagUS >= 0 {
			m.lagSamples++
			m.lagPeakS = max(m.lagPeakS, float64(s.heartbeatLagUS)/1e6)
		}
		if m.copyDone < 0 && s.copied {
			m.copyDone, m.copyS = i, float64(s.atUS-t0US)/1e6
		}
		if m.copyDone >= 0 && s.heartbeatLagUS >= 0 && s.heartbeatLagUS <= maxLagUS {
			m.caughtUp, m.caughtUpS = i, float64(s.atUS-t0US)/1e6
			break
		}
	}
	return m
}

// second is the load's figures over one second of a window.
type second struct {
	// FromS is the second's start from the window's start; LenS its length,
	// 1 but for the last (between 1 and 2, or the whole window when it is
	// shorter than a second).
	FromS float64 `json:"from_s"`
	LenS  float64 `json:"len_s"`
	// TPS is the transactions that committed in the second, per second.
	TPS float64 `json:"tps"`
	// Due is how many transactions were due in the second, and the
	// percentiles are of their latencies, from when each was due until its
	// COMMIT returned.
	Due   int     `json:"due"`
	P50Ms float64 `json:"p50_ms"`
	P95Ms float64 `json:"p95_ms"`
	P99Ms float64 `json:"p99_ms"`
}

// perSecond cuts [fromUS, toUS) into whole seconds, the remainder going to
// the last one, and puts each transaction's latency in the second it was due
// in and its commit in the second it committed in.
func perSecond(txns []txn, fromUS, toUS int64) []second {
	n := max(1, int((toUS-fromUS)/1e6))
	at := func(us int64) int {
		if us < fromUS || us >= toUS {
			return -1
		}
		return min(int((us-fromUS)/1e6), n-1)
	}
	lats := make([][]int64, n)
	commits := make([]int, n)
	for _, t := range txns {
		if i := at(t.dueUS); i >= 0 {
			lats[i] = append(lats[i], t.endUS-t.dueUS)
		}
		if i := at(t.endUS); i >= 0 {
			commits[i]++
		}
	}
	out := make([]second, n)
	for i := range out {
		end := toUS
		if i < n-1 {
			end = fromUS + int64(i+1)*1e6
		}
		s := &out[i]
		s.FromS, s.LenS = float64(i), float64(end-fromUS-int64(i)*1e6)/1e6
		s.TPS = float64(commits[i]) / s.LenS
		s.Due = len(lats[i])
		if s.Due == 0 {
			continue
		}
		slices.Sort(lats[i])
		ms := func(p float64) float64 { return float64(benchkit.Rank(lats[i], p)) / 1e3 }
		s.P50Ms, s.P95Ms, s.P99Ms = ms(0.50), ms(0.95), ms(0.99)
	}
	return out
}

// window is the load's figures over a span of the run: the baseline or the
// move.
type window struct {
	WallS float64 `json:"wall_s"`
	// Committed is the transactions that committed in the window; TPS is
	// that per second of it.
	Committed int64   `json:"committed"`
	TPS       float64 `json:"tps"`
	// The percentiles are the medians of the per-second ones, over the
	// seconds in which some transaction was due.
	P50Ms float64 `json:"p50_ms"`
	P95Ms float64 `json:"p95_ms"`
	P99Ms float64 `json:"p99_ms"`
	// Retries are those of the transactions due in the window.
	Retries int64 `json:"retries"`
	// CPU is each process's CPU seconds over the window, and CPUPerTxnUS
	// the same in µs per committed transaction.
	CPU         benchkit.CPUUse `json:"cpu_s"`
	CPUPerTxnUS benchkit.CPUUse `json:"cpu_us_per_txn"`
	Seconds     []second        `json:"seconds"`
}

// summarize computes the load's figures over [fromUS, toUS), in which the
// processes used cpu.
func summarize(txns []txn, fromUS, toUS int64, cpu benchkit.CPUUse) window {
	w := window{WallS: float64(toUS-fromUS) / 1e6, CPU: cpu, Seconds: perSecond(txns, fromUS, toUS)}
	for _, t := range txns {
		if t.endUS >= fromUS && t.endUS < toUS {
			w.Committed++
		}
		if t.dueUS >= fromUS && t.dueUS < toUS {
			w.Retries += int64(t.retries)
		}
	}
	w.TPS = float64(w.Committed) / w.WallS
	var p50, p95, p99 []float64
	for _, s := range w.Seconds {
		if s.Due > 0 {
			p50, p95, p99 = append(p50, s.P50Ms), append(p95, s.P95Ms), append(p99, s.P99Ms)
		}
	}
	if len(p50) > 0 {
		median := func(v []float64) float64 { slices.Sort(v); return benchkit.Rank(v, 0.5) }
		w.P50Ms, w.P95Ms, w.P99Ms = median(p50), median(p95), median(p99)
	}
	if w.Committed > 0 {
		per := func(s float64) float64 { return s * 1e6 / float64(w.Committed) }
		w.CPUPerTxnUS = benchkit.CPUUse{Streamer: per(cpu.Streamer), Applier: per(cpu.Applier), Source: per(cpu.Source), Target: per(cpu.Target), Bench: per(cpu.Bench)}
	}
	return w
}
