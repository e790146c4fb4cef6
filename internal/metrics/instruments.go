package metrics

import (
	"context"
	"errors"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
)

// scope names rowlift's meter; its instruments all start with "rowlift.".
const scope = "github.com/rowlift/rowlift"

// durationBuckets bound the latency histograms, in seconds: from a small
// replay group (a millisecond) to a large copy chunk on a busy target (a minute).
var durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// groupBuckets bound the replay group sizes, in transactions; commit_batch_items
// defaults to 256.
var groupBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}

// Catalog returns the Prometheus names of rowlift's own metrics as a scrape
// shows them: counters end in _total, and a histogram NAME shows as
// NAME_bucket, NAME_sum and NAME_count, all three listed. Dashboards and alerts
// may query these names and no others (gRPC, go_* and process_* metrics
// aside); a test keeps the list equal to what a scrape shows.
func Catalog() []string {
	return []string{
		"rowlift_binlog_position_age_seconds",
		"rowlift_build_info",
		"rowlift_copy_chunk_duration_seconds_bucket",
		"rowlift_copy_chunk_duration_seconds_count",
		"rowlift_copy_chunk_duration_seconds_sum",
		"rowlift_copy_chunks_total",
		"rowlift_copy_rows_total",
		"rowlift_copy_throttled",
		"rowlift_copy_throttled_time_seconds_total",
		"rowlift_divergences_total",
		"rowlift_replay_conflicts_total",
		"rowlift_replay_group_duration_seconds_bucket",
		"rowlift_replay_group_duration_seconds_count",
		"rowlift_replay_group_duration_seconds_sum",
		"rowlift_replay_group_transactions_bucket",
		"rowlift_replay_group_transactions_count",
		"rowlift_replay_group_transactions_sum",
		"rowlift_replay_lag_seconds",
		"rowlift_replay_rows_total",
		"rowlift_replay_transactions_total",
		"rowlift_stream_retries_total",
		"rowlift_streamer_chunks_sent_total",
		"rowlift_streamer_sent_bytes_total",
		"rowlift_workflows",
	}
}

// instruments are rowlift's instruments on one meter, and the live streams and
// workflow lists whose state the observable ones report at each collection.
type instruments struct {
	copyRows      metric.Int64Counter
	copyChunks    metric.Int64Counter
	chunkDuration metric.Float64Histogram
	replayTxs     metric.Int64Counter
	replayRows    metric.Int64Counter
	groupSize     metric.Int64Histogram
	groupDuration metric.Float64Histogram
	conflicts     metric.Int64Counter
	divergences   metric.Int64Counter
	retries       metric.Int64Counter
	throttledTime metric.Float64Counter
	sentBytes     metric.Int64Counter
	chunksSent    metric.Int64Counter
	lag           metric.Float64ObservableGauge
	positionAge   metric.Float64ObservableGauge
	throttled     metric.Int64ObservableGauge
	workflows     metric.Int64ObservableGauge

	mu      sync.Mutex
	streams map[*ApplyStream]struct{}
	lists   map[*Workflows]struct{}
}

// std records through the global MeterProvider: nothing until Serve sets one,
// whose meter the instruments then delegate to.
var std = mustInstruments(otel.Meter(scope))

func mustInstruments(m metric.Meter) *instruments {
	in, err := newInstruments(m)
	if err != nil {
		panic(err) // constant names and options: the package's tests catch it
	}
	return in
}

func newInstruments(m metric.Meter) (*instruments, error) {
	in := &instruments{streams: map[*ApplyStream]struct{}{}, lists: map[*Workflows]struct{}{}}
	var errs [17]error
	in.copyRows, errs[0] = m.Int64Counter("rowlift.copy.rows", metric.WithUnit("{row}"),
		metric.WithDescription("Rows the applier committed to the target by copy chunks; the sum over a workflow's tables is its status's rows copied. "+
			"Copy rate is rate() of it."))
	in.copyChunks, errs[1] = m.Int64Counter("rowlift.copy.chunks", metric.WithUnit("{chunk}"),
		metric.WithDescription("Copy chunk items the applier committed to the target, each in one transaction with its copy state "+
			"(the streamer counts the items it sends in rowlift_streamer_chunks_sent_total)."))
	in.chunkDuration, errs[2] = m.Float64Histogram("rowlift.copy.chunk.duration", metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(durationBuckets...),
		metric.WithDescription("Time a copy chunk's target transaction took, from BEGIN to COMMIT, waiting for the previous chunk's commit included."))
	in.replayTxs, errs[3] = m.Int64Counter("rowlift.replay.transactions", metric.WithUnit("{transaction}"),
		metric.WithDescription("Source transactions the applier committed to the target from the binlog."))
	in.replayRows, errs[4] = m.Int64Counter("rowlift.replay.rows", metric.WithUnit("{row}"),
		metric.WithDescription("Row changes (inserts, updates, deletes) of the replayed source transactions."))
	in.groupSize, errs[5] = m.Int64Histogram("rowlift.replay.group.transactions", metric.WithUnit("{transaction}"),
		metric.WithExplicitBucketBoundaries(groupBuckets...),
		metric.WithDescription("Source transactions per replay group, the target transaction that commits them together; its count is the groups replayed."))
	in.groupDuration, errs[6] = m.Float64Histogram("rowlift.replay.group.duration", metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(durationBuckets...),
		metric.WithDescription("Time a replay group took to apply, from its first statement to COMMIT, waiting for its commit turn included."))
	in.conflicts, errs[7] = m.Int64Counter("rowlift.replay.conflicts", metric.WithUnit("{group}"),
		metric.WithDescription("Replay groups rolled back and run again: a lock wait timeout, a deadlock, "+
			"or an earlier group that did not commit in time (a possible commit-order deadlock)."))
	in.divergences, errs[8] = m.Int64Counter("rowlift.divergences", metric.WithUnit("{divergence}"),
		metric.WithDescription("Times the target was found not as the source's binlog says (no row for an update or delete, "+
			"a key already taken by an insert or a copy chunk); each stops the workflow with the key in its message."))
	in.retries, errs[9] = m.Int64Counter("rowlift.stream.retries", metric.WithUnit("{retry}"),
		metric.WithDescription("Times a stream failed and was opened again after a backoff; the stream's status message says why."))
	in.throttledTime, errs[10] = m.Float64Counter("rowlift.copy.throttled.time", metric.WithUnit("s"),
		metric.WithDescription("Time the stream's copy was held back by a throttle, as the streamer's heartbeats report it."))
	in.sentBytes, errs[11] = m.Int64Counter("rowlift.streamer.sent", metric.WithUnit("By"),
		metric.WithDescription("Bytes of stream messages the streamer sent to appliers (protobuf size, before gRPC framing)."))
	in.chunksSent, errs[12] = m.Int64Counter("rowlift.streamer.chunks.sent", metric.WithUnit("{chunk}"),
		metric.WithDescription("Copy chunk items the streamer sent to appliers: a chunk SELECT larger than a packet goes as several items, "+
			"each counted here and, once committed, in rowlift_copy_chunks_total."))
	in.lag, errs[13] = m.Float64ObservableGauge("rowlift.replay.lag", metric.WithUnit("s"),
		metric.WithDescription("Seconds between the source commit of the last item the target committed and that commit, as status shows it; "+
			"about 0 at idle, since heartbeats advance the position."))
	in.positionAge, errs[14] = m.Float64ObservableGauge("rowlift.binlog.position.age", metric.WithUnit("s"),
		metric.WithDescription("Seconds since the target last committed a new binlog position for the stream (or since the stream opened): "+
			"heartbeats move it about every second, so a growing age is a stuck stream even when lag cannot tell."))
	in.throttled, errs[15] = m.Int64ObservableGauge("rowlift.copy.throttled",
		metric.WithDescription("1 while the stream's copy is held back by a throttle, 0 otherwise; replay is never throttled."))
	in.workflows, errs[16] = m.Int64ObservableGauge("rowlift.workflows", metric.WithUnit("{workflow}"),
		metric.WithDescription("Workflows recorded in the applier's target, by state, as of its last poll."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	if _, err := m.RegisterCallback(in.observe, in.lag, in.positionAge, in.throttled, in.workflows); err != nil {
		return nil, err
	}
	return in, nil
}

// observe reports the observable instruments from what the live streams and
// workflow lists last recorded.
func (in *instruments) observe(_ context.Context, o metric.Observer) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	for s := range in.streams {
		s.observe(o)
	}
	for w := range in.lists {
		w.observe(o)
	}
	return nil
}
