package metrics

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ApplyStream records the metrics of one applier stream, a (workflow, source)
// pair on a target. Its label sets are built once, when it opens, so recording
// a chunk or a replay group allocates nothing.
type ApplyStream struct {
	in     *instruments
	add    []metric.AddOption
	record []metric.RecordOption
	obs    []metric.ObserveOption
	tables map[string]tableOptions

	// mu guards what the observable instruments report.
	mu sync.Mutex
	// lag is that of the last commit; known once a position has committed.
	lag      time.Duration
	lagKnown bool
	// positionAt is when the last position committed, or the stream opened.
	positionAt time.Time
	// throttled is whether the last report said the copy is held back, and
	// throttledSince when that report came: the time held back is counted up
	// to it.
	throttled      bool
	throttledSince time.Time
}

// tableOptions are a stream's labels with one table's.
type tableOptions struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

// OpenApplyStream starts recording a stream of workflow from source into
// target (the names the workflow spec gives them) that carries tables (their
// source names). Its counters show from the start, at 0, so that an alert on
// their increase sees the first one. Close it when the stream's controller ends.
func OpenApplyStream(workflow, source, target string, tables []string) *ApplyStream {
	return std.openApplyStream(workflow, source, target, tables)
}

func (in *instruments) openApplyStream(workflow, source, target string, tables []string) *ApplyStream {
	labels := []attribute.KeyValue{attribute.String("workflow", workflow), attribute.String("source", source), attribute.String("target", target)}
	set := attribute.NewSet(labels...)
	s := &ApplyStream{in: in, add: []metric.AddOption{metric.WithAttributeSet(set)}, record: []metric.RecordOption{metric.WithAttributeSet(set)},
		obs: []metric.ObserveOption{metric.WithAttributeSet(set)}, tables: map[string]tableOptions{}, positionAt: time.Now()}
	ctx := context.Background()
	for _, t := range tables {
		tset := attribute.NewSet(append(labels, attribute.String("table", t))...)
		opts := tableOptions{add: []metric.AddOption{metric.WithAttributeSet(tset)}, record: []metric.RecordOption{metric.WithAttributeSet(tset)}}
		s.tables[t] = opts
		for _, c := range []metric.Int64Counter{in.copyRows, in.copyChunks, in.divergences} {
			c.Add(ctx, 0, opts.add...)
		}
	}
	for _, c := range []metric.Int64Counter{in.replayTxs, in.replayRows, in.conflicts, in.retries} {
		c.Add(ctx, 0, s.add...)
	}
	in.throttledTime.Add(ctx, 0, s.add...)
	in.mu.Lock()
	in.streams[s] = struct{}{}
	in.mu.Unlock()
	return s
}

// Close stops reporting the stream's gauges and counts a throttle still on.
func (s *ApplyStream) Close() {
	s.Throttled(false)
	s.in.mu.Lock()
	delete(s.in.streams, s)
	s.in.mu.Unlock()
}

// table returns the label options of one of the stream's tables; a table the
// stream was not opened with gets the stream's labels only.
func (s *ApplyStream) table(name string) tableOptions {
	if t, ok := s.tables[name]; ok {
		return t
	}
	return tableOptions{add: s.add, record: s.record}
}

// ChunkCommitted records a copy chunk of rows committed to table, whose target
// transaction took took.
func (s *ApplyStream) ChunkCommitted(table string, rows int64, took time.Duration) {
	ctx := context.Background()
	t := s.table(table)
	s.in.copyRows.Add(ctx, rows, t.add...)
	s.in.copyChunks.Add(ctx, 1, t.add...)
	s.in.chunkDuration.Record(ctx, took.Seconds(), t.record...)
}

// GroupCommitted records a replay group of transactions holding rows row
// changes, which took took from its first statement to its commit.
func (s *ApplyStream) GroupCommitted(transactions, rows int, took time.Duration) {
	ctx := context.Background()
	s.in.replayTxs.Add(ctx, int64(transactions), s.add...)
	s.in.replayRows.Add(ctx, int64(rows), s.add...)
	s.in.groupSize.Record(ctx, int64(transactions), s.record...)
	s.in.groupDuration.Record(ctx, took.Seconds(), s.record...)
}

// Conflict records a replay group rolled back to run again.
func (s *ApplyStream) Conflict() { s.in.conflicts.Add(context.Background(), 1, s.add...) }

// Retry records a failed stream about to be opened again.
func (s *ApplyStream) Retry() { s.in.retries.Add(context.Background(), 1, s.add...) }

// Diverged records a divergence found in table.
func (s *ApplyStream) Diverged(table string) {
	s.in.divergences.Add(context.Background(), 1, s.table(table).add...)
}

// PositionCommitted records that the target committed a new position, whose
// last item the source committed at sourceTimeUS (microseconds since the
// epoch; 0 when unknown, which leaves the lag as it was).
func (s *ApplyStream) PositionCommitted(sourceTimeUS int64) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.positionAt = now
	if sourceTimeUS > 0 {
		s.lag, s.lagKnown = max(now.Sub(time.UnixMicro(sourceTimeUS)), 0), true
	}
}

// Throttled records whether the streamer holds the copy back, as its last
// heartbeat said; the time it was held counts from one report to the next.
func (s *ApplyStream) Throttled(on bool) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.throttled {
		s.in.throttledTime.Add(context.Background(), now.Sub(s.throttledSince).Seconds(), s.add...)
	}
	s.throttled, s.throttledSince = on, now
}

// observe reports the stream's gauges. in.mu is held.
func (s *ApplyStream) observe(o metric.Observer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lagKnown {
		o.ObserveFloat64(s.in.lag, s.lag.Seconds(), s.obs...)
	}
	o.ObserveFloat64(s.in.positionAge, time.Since(s.positionAt).Seconds(), s.obs...)
	var throttled int64
	if s.throttled {
		throttled = 1
	}
	o.ObserveInt64(s.in.throttled, throttled, s.obs...)
}

// Workflows reports the workflows an applier last read from its target, by
// target and state.
type Workflows struct {
	in *instruments
	mu sync.Mutex
	// counts are the workflows by [target, state].
	counts map[[2]string]int64
}

// NewWorkflows starts reporting an applier's workflows, none until Set.
func NewWorkflows() *Workflows {
	return std.newWorkflows()
}

func (in *instruments) newWorkflows() *Workflows {
	w := &Workflows{in: in, counts: map[[2]string]int64{}}
	in.mu.Lock()
	in.lists[w] = struct{}{}
	in.mu.Unlock()
	return w
}

// Set replaces the counts with those of states, the [target, state] pair of
// every workflow read.
func (w *Workflows) Set(states [][2]string) {
	counts := make(map[[2]string]int64, len(w.counts))
	for _, ts := range states {
		counts[ts]++
	}
	w.mu.Lock()
	w.counts = counts
	w.mu.Unlock()
}

// observe reports the counts. in.mu is held.
func (w *Workflows) observe(o metric.Observer) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ts, n := range w.counts {
		o.ObserveInt64(w.in.workflows, n, metric.WithAttributes(attribute.String("target", ts[0]), attribute.String("state", ts[1])))
	}
}
