package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
	"github.com/rowlift/rowlift/internal/controlclient"
	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/frozen"
	"github.com/rowlift/rowlift/internal/verify"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

const (
	// warmup is how long the load runs before anything is measured, so the
	// measurements see its steady state rather than its start.
	warmup = 2 * time.Second
	// callTimeout bounds a switch or reverse call: the coordinator's own
	// timeout (one minute by default) rolls a stuck one back well before.
	callTimeout = 2 * time.Minute
	// verifyPoll is how often the verify's status is read: the resolution of
	// its time.
	verifyPoll = 20 * time.Millisecond
	// appliedPoll is how often the final catch-up reads the target's position.
	appliedPoll = 10 * time.Millisecond
)

// measureAll starts the load, compares the table by checksum and by verify
// under it, runs the cutovers, stops the load and compares both sides.
func (b *bench) measureAll(ctx context.Context) (*report, error) {
	rep := b.newReport()
	progress("load: %.0f transactions/s over %d writers", b.cfg.Rate, b.cfg.Writers)
	l := b.startLoad(ctx)
	loadStart := time.Now()
	err := b.underLoad(l, rep)
	writes, lerr := l.finish()
	if err := errors.Join(err, lerr); err != nil {
		return nil, err
	}
	rep.Load = summarizeLoad(writes, b.cfg.Rate, time.Since(loadStart))
	for i := range rep.Cutovers {
		rep.Cutovers[i].observe(writes)
	}
	rep.summarize()
	if err := b.final(ctx, rep); err != nil {
		return nil, err
	}
	// The verify ended before the cutovers: its spans have been exported since.
	rep.VerifyChunks = holdsOf(b.spans.Durations(verifyChunkSpan))
	rep.VerifyDigests = holdsOf(b.spans.Durations(verifyDigestSpan))
	rep.ratios()
	rep.LogProblems, err = b.procs.LogProblems()
	return rep, err
}

// underLoad runs every measurement that needs the load, in the load's context.
func (b *bench) underLoad(l *load, rep *report) error {
	if err := l.Hold(warmup); err != nil {
		return err
	}
	var err error
	if rep.Checksum, err = b.checksums(l.Context()); err != nil {
		return err
	}
	if rep.Verify, err = b.verify(l.Context()); err != nil {
		return err
	}
	for i := range b.cfg.Switches {
		for _, direction := range []string{"switch", "reverse"} {
			if err := l.Hold(b.cfg.Interval); err != nil {
				return err
			}
			c, err := b.cutover(l, len(rep.Cutovers), direction)
			if err != nil {
				return fmt.Errorf("%s %d of %d: %w", direction, i+1, b.cfg.Switches, err)
			}
			progress("  %-7s %2d: write pause %4d ms, re-routed at %6.1f ms, call %6.1f ms", direction, i+1, c.WritePauseMs, c.RerouteMs, c.CallMs)
			rep.Cutovers = append(rep.Cutovers, c)
		}
	}
	// The writes after the last reverse flow to the target before the load stops.
	return l.Hold(b.cfg.Interval)
}

// checksumResult is the baseline: CHECKSUM TABLE of the moved table on both
// servers, one after the other and both at once.
type checksumResult struct {
	// Rows is the source table's COUNT(*) just before.
	Rows               int64   `json:"rows"`
	SequentialS        float64 `json:"sequential_s"`
	SequentialRowsPerS float64 `json:"sequential_rows_per_s"`
	ParallelS          float64 `json:"parallel_s"`
	ParallelRowsPerS   float64 `json:"parallel_rows_per_s"`
}

func (b *bench) checksums(ctx context.Context) (checksumResult, error) {
	var r checksumResult
	table := db + "." + benchkit.StressTable
	if err := b.SrcDB.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table).Scan(&r.Rows); err != nil {
		return r, fmt.Errorf("count %s: %w", table, err)
	}
	progress("baseline: CHECKSUM TABLE of %d rows on both servers, one after the other, then both at once", r.Rows)
	sequential := func() error {
		for _, pool := range []*sql.DB{b.SrcDB, b.TgtDB} {
			if err := checksum(ctx, pool, table); err != nil {
				return err
			}
		}
		return nil
	}
	// An untimed pass first, so that neither timing (nor the verify's after
	// them) pays for what a first full read of the table costs.
	if err := sequential(); err != nil {
		return r, err
	}
	start := time.Now()
	if err := sequential(); err != nil {
		return r, err
	}
	r.SequentialS = time.Since(start).Seconds()
	start = time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for _, pool := range []*sql.DB{b.SrcDB, b.TgtDB} {
		g.Go(func() error { return checksum(gctx, pool, table) })
	}
	if err := g.Wait(); err != nil {
		return r, err
	}
	r.ParallelS = time.Since(start).Seconds()
	r.SequentialRowsPerS, r.ParallelRowsPerS = float64(r.Rows)/r.SequentialS, float64(r.Rows)/r.ParallelS
	progress("  %.0f rows/s one after the other, %.0f rows/s both at once", r.SequentialRowsPerS, r.ParallelRowsPerS)
	return r, nil
}

func checksum(ctx context.Context, pool *sql.DB, table string) error {
	var name string
	var sum sql.NullInt64
	if err := pool.QueryRowContext(ctx, "CHECKSUM TABLE "+table).Scan(&name, &sum); err != nil {
		return fmt.Errorf("CHECKSUM TABLE %s: %w", table, err)
	}
	if !sum.Valid {
		return fmt.Errorf("CHECKSUM TABLE %s: no checksum (is the table there?)", table)
	}
	return nil
}

// verifyResult is the workflow's verify.
type verifyResult struct {
	RowsCompared int64   `json:"rows_compared,omitempty"`
	WallS        float64 `json:"wall_s,omitempty"`
	RowsPerS     float64 `json:"rows_per_s,omitempty"`
	Missing      int64   `json:"missing,omitempty"`
	Extra        int64   `json:"extra,omitempty"`
	Different    int64   `json:"different,omitempty"`
}

// copyResult is the workflow's copy of the table, before the load: from the
// StartWorkflow call until the workflow ran (its copy done), read every 100 ms.
type copyResult struct {
	Rows     int64   `json:"rows"`
	WallS    float64 `json:"wall_s"`
	RowsPerS float64 `json:"rows_per_s"`
}

func (b *bench) copyResult() copyResult {
	r := copyResult{Rows: b.cfg.Rows, WallS: b.copied.Seconds()}
	r.RowsPerS = float64(r.Rows) / r.WallS
	return r
}

// verifyChunkSpan is the applier's span of one verify chunk while the apply
// waits for it: a digest chunk's target snapshot (and its place in the queue
// of checks), or a row chunk's whole comparison and the commit of what it
// found. Its duration bounds how long the chunk holds the target.
const verifyChunkSpan = "rowlift.applier.verify_chunk"

// verifyDigestSpan is the applier's span of the target's digest of a verify
// chunk, read in the chunk's snapshot beside the apply.
const verifyDigestSpan = "rowlift.applier.verify_digest"

// chunkHolds are the durations of the verify's chunks on the target, ms.
type chunkHolds struct {
	Chunks  int     `json:"chunks"`
	TotalMs float64 `json:"total_ms"`
	dist
}

func holdsOf(ds []time.Duration) chunkHolds {
	ms := make([]float64, len(ds))
	var total float64
	for i, d := range ds {
		ms[i] = float64(d.Microseconds()) / 1e3
		total += ms[i]
	}
	return chunkHolds{Chunks: len(ds), TotalMs: total, dist: distOf(ms)}
}

// verify runs VerifyWorkflow and times it from the call until its status says
// done (read every verifyPoll).
func (b *bench) verify(ctx context.Context) (verifyResult, error) {
	start := time.Now()
	v, err := controlclient.Verify(ctx, b.control, workflow, verifyPoll)
	if err != nil {
		return verifyResult{}, err
	}
	r := verifyResult{RowsCompared: v.GetRowsCompared(), WallS: time.Since(start).Seconds(),
		Missing: v.GetMissing(), Extra: v.GetExtra(), Different: v.GetDifferent()}
	r.RowsPerS = float64(r.RowsCompared) / r.WallS
	progress("verify: %d rows compared in %.2f s, %d differences", r.RowsCompared, r.WallS, r.Missing+r.Extra+r.Different)
	return r, nil
}

// cutoverResult is one switch or reverse.
type cutoverResult struct {
	Direction string `json:"direction"`
	// WritePauseMs is the write pause as rowlift reports it: from the freeze
	// until the other side could take writes.
	WritePauseMs int64 `json:"write_pause_ms"`
	// CallMs is how long the SwitchWorkflow or ReverseWorkflow call took.
	CallMs float64 `json:"call_ms"`
	// WritersMs is the write pause the application saw: the longest time from
	// a write's first refused try (its table frozen or locked) to its commit,
	// among the writes refused during the cutover.
	WritersMs float64 `json:"writers_ms"`
	// BlockedWrites of the writes in flight during the cutover met the table
	// frozen or locked.
	BlockedWrites int `json:"blocked_writes"`
	// RerouteMs is when the routing hook re-routed the writers, from the
	// call's start; AnswerMs how much later the call answered.
	RerouteMs float64 `json:"reroute_ms"`
	AnswerMs  float64 `json:"answer_after_reroute_ms"`
	// The call's start and end and the writers' re-routing, Unix µs.
	StartUS    int64 `json:"start_us"`
	EndUS      int64 `json:"end_us"`
	ReroutedUS int64 `json:"rerouted_us"`
}

// hookPoll is how often the bench looks for the routing hook's mark: the
// resolution of the re-routing's time.
const hookPoll = time.Millisecond

// cutover runs a switch or a reverse through the Control API with a routing
// hook that marks a file, and re-routes the load to the side that takes the
// writes the moment the mark appears, as an application's routing layer
// driven by the hook would (or when the call answers, if the hook never ran).
func (b *bench) cutover(l *load, n int, direction string) (cutoverResult, error) {
	rpc, to := b.control.SwitchWorkflow, b.TgtDB
	if direction == "reverse" {
		rpc, to = b.control.ReverseWorkflow, b.SrcDB
	}
	ctx, cancel := context.WithTimeout(l.Context(), callTimeout)
	defer cancel()
	c := cutoverResult{Direction: direction}
	mark := filepath.Join(b.tmp, fmt.Sprintf("routed-%d", n))
	answered := make(chan struct{})
	rerouted := make(chan int64, 1)
	go func() {
		for {
			select {
			case <-answered:
				rerouted <- 0
				return
			case <-time.After(hookPoll):
			}
			if _, err := os.Stat(mark); err == nil {
				l.route.Store(to)
				rerouted <- time.Now().UnixMicro()
				return
			}
		}
	}()
	start := time.Now()
	resp, err := rpc(ctx, &rowliftv1.SwitchRequest{Workflow: &rowliftv1.WorkflowRef{Name: workflow}, HookCmd: "touch '" + mark + "'"})
	end := time.Now()
	close(answered)
	c.ReroutedUS = <-rerouted
	if err != nil {
		return c, fmt.Errorf("%s workflow %s: %s", direction, workflow, status.Convert(err).Message())
	}
	if c.ReroutedUS == 0 {
		l.route.Store(to)
		c.ReroutedUS = time.Now().UnixMicro()
	}
	c.StartUS, c.EndUS = start.UnixMicro(), end.UnixMicro()
	c.CallMs = float64(end.Sub(start).Microseconds()) / 1e3
	c.RerouteMs = float64(c.ReroutedUS-c.StartUS) / 1e3
	c.AnswerMs = float64(c.EndUS-c.ReroutedUS) / 1e3
	c.WritePauseMs = resp.GetWritePauseMs()
	return c, nil
}

// observe finds the writes of the cutover: refused between the call's start
// and the writers' re-routing (the pause as they saw it), and in flight then.
func (c *cutoverResult) observe(writes []write) {
	for _, w := range writes {
		if w.startUS > c.ReroutedUS || w.endUS < c.StartUS {
			continue
		}
		if w.retries > 0 {
			c.BlockedWrites++
			c.WritersMs = max(c.WritersMs, float64(w.endUS-w.refusedUS)/1e3)
		}
	}
}

// loadResult is what the load did over the whole run.
type loadResult struct {
	TargetRate float64 `json:"target_rate_per_s"`
	Writes     int     `json:"writes"`
	WallS      float64 `json:"wall_s"`
	WriteRate  float64 `json:"write_rate_per_s"`
	// Blocked writes met the table frozen or locked at least once; Retries
	// is how many tries they took beyond the first, in all.
	Blocked int `json:"blocked_writes"`
	Retries int `json:"retries"`
	// LatencyMs is the time from first try to commit of every write.
	LatencyMs dist `json:"latency_ms"`
}

func summarizeLoad(writes []write, rate float64, wall time.Duration) loadResult {
	r := loadResult{TargetRate: rate, Writes: len(writes), WallS: wall.Seconds()}
	r.WriteRate = float64(r.Writes) / r.WallS
	lat := make([]float64, 0, len(writes))
	for _, w := range writes {
		if w.retries > 0 {
			r.Blocked++
			r.Retries += w.retries
		}
		lat = append(lat, float64(w.endUS-w.startUS)/1e3)
	}
	r.LatencyMs = distOf(lat)
	return r
}

// final waits until the target has applied every write (the last cutover was
// a reverse: the source takes them, and the workflow follows it into the
// target's frozen table), then compares the two tables row by row.
func (b *bench) final(ctx context.Context, rep *report) error {
	pos, err := dbconn.Position(ctx, b.SrcDB)
	if err != nil {
		return fmt.Errorf("source position: %w", err)
	}
	progress("load stopped; waiting for the target to apply up to %s", pos)
	wctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	if err := benchkit.WaitApplied(wctx, b.tgtStore, workflow, pos, appliedPoll, b.procs.All()...); err != nil {
		return err
	}
	fz, err := frozen.Name(benchkit.StressTable)
	if err != nil {
		return err
	}
	res, err := verify.Table(ctx, b.SrcDB, b.TgtDB, db, db, benchkit.StressTable, verify.Options{TargetTable: fz})
	if err != nil {
		return err
	}
	rep.Identical = res.Identical()
	if !rep.Identical {
		rep.Differences = res.String()
	}
	progress("compared: %s", res.String())
	return nil
}
