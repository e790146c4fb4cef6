package console

import (
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/rowlift/rowlift/internal/gtid"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

const (
	// DefaultHistoryBytes bounds the charts' memory when Config leaves it 0:
	// an hour of samples every sampleSpacing for about 14 workflows.
	DefaultHistoryBytes = 1 << 20
	// window is how far back the charts look.
	window = time.Hour
	// sampleSpacing is the least time between two kept samples of a workflow:
	// a page polling faster adds nothing.
	sampleSpacing = 2 * time.Second
)

// Sample is one point of a workflow's charts: what a status read saw.
type Sample struct {
	AtMs          int64   `json:"at_ms"`
	LagMs         int64   `json:"lag_ms"`
	RowsPerSecond float64 `json:"rows_per_second"`
	// BytesPerSecond and TransactionsPerSecond are measured since the
	// previous sample: the bytes the copy wrote, and the source transactions
	// the streams' positions went past (gtid.Count), which status has no rate of.
	BytesPerSecond        float64 `json:"bytes_per_second"`
	TransactionsPerSecond float64 `json:"transactions_per_second"`
}

// sampleBytes is what one kept sample costs.
const sampleBytes = int(unsafe.Sizeof(Sample{}))

// streamCount is how many transactions a stream's position held at the last
// sample, to measure the next one's rate against.
type streamCount struct {
	source, stream string
	count          uint64
}

// countsBytes is what a series' counts cost: the slice's array and the names.
func countsBytes(counts []streamCount) int {
	n := cap(counts) * int(unsafe.Sizeof(streamCount{}))
	for _, c := range counts {
		n += len(c.source) + len(c.stream)
	}
	return n
}

// History is what a workflow's page charts: the samples of the last hour,
// oldest first. The cutover's timeline is not kept here: its journal keeps
// every step on the target (CutoverStatus.steps).
type History struct {
	Samples []Sample `json:"samples"`
}

// series is one workflow's history.
type series struct {
	History
	bytes int
	last  time.Time
	// copied and counts are what the last sample saw, for the next one's rates.
	copied int64
	counts []streamCount
}

// history keeps, in memory and within a byte budget, what the console's status
// reads saw of each workflow. It is lost on restart: the targets record no
// history, and the charts are an aid, not a record.
type history struct {
	mu     sync.Mutex
	budget int
	used   int
	byName map[string]*series
}

func newHistory(budget int) *history {
	if budget <= 0 {
		budget = DefaultHistoryBytes
	}
	return &history{budget: budget, byName: map[string]*series{}}
}

// record adds what w's status shows at now, unless a sample is younger than
// sampleSpacing, then drops what is older than the window and, while over the
// budget, the oldest samples of the workflow least recently seen.
func (h *history) record(w *rowliftv1.Workflow, now time.Time) {
	name, st := w.GetSpec().GetName(), w.GetStatus()
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.byName[name]
	if s == nil {
		s = &series{}
		h.byName[name] = s
	}
	s.last = now
	if n := len(s.Samples); n == 0 || now.Sub(time.UnixMilli(s.Samples[n-1].AtMs)) >= sampleSpacing {
		sample := Sample{AtMs: now.UnixMilli(), LagMs: st.GetLagMs(), RowsPerSecond: st.GetRowsPerSecond()}
		counts := streamCounts(st.GetStreams())
		if n > 0 {
			secs := now.Sub(time.UnixMilli(s.Samples[n-1].AtMs)).Seconds()
			sample.BytesPerSecond = float64(max(st.GetBytesCopied()-s.copied, 0)) / secs
			sample.TransactionsPerSecond = float64(wentThrough(s.counts, counts)) / secs
		}
		h.add(s, countsBytes(counts)-countsBytes(s.counts))
		s.copied, s.counts = st.GetBytesCopied(), counts
		s.Samples = append(s.Samples, sample)
		h.add(s, sampleBytes)
	}
	cut := now.Add(-window).UnixMilli()
	for len(s.Samples) > 0 && s.Samples[0].AtMs < cut {
		s.Samples = s.Samples[1:]
		h.add(s, -sampleBytes)
	}
	if cap(s.Samples) > 2*len(s.Samples)+64 {
		s.Samples = slices.Clone(s.Samples) // frees the trimmed front
	}
	for other, o := range h.byName {
		if now.Sub(o.last) > window {
			h.used -= o.bytes
			delete(h.byName, other)
		}
	}
	for h.used > h.budget && h.trimOldest() {
	}
}

// streamCounts is how many transactions each stream's position holds; a
// stream with no position yet, or one that does not parse, has none.
func streamCounts(streams []*rowliftv1.StreamStatus) []streamCount {
	out := make([]streamCount, 0, len(streams))
	for _, st := range streams {
		pos, err := gtid.Parse(st.GetPosition().GetGtidSet())
		if err != nil || pos.IsEmpty() {
			continue
		}
		out = append(out, streamCount{source: st.GetSource(), stream: st.GetSource() + "→" + st.GetTarget(), count: pos.Count()})
	}
	return out
}

// wentThrough is how many source transactions the streams went past from
// then to now: a stream counts only when both have its position (a new
// stream's first position is where it starts, not progress), and a rewound
// one none. The streams of one source (a split's) read the same transactions,
// which count once: as far as the furthest of them went.
func wentThrough(then, now []streamCount) uint64 {
	before := make(map[string]uint64, len(then))
	for _, c := range then {
		before[c.stream] = c.count
	}
	bySource := map[string]uint64{}
	for _, c := range now {
		if p, ok := before[c.stream]; ok && c.count > p {
			bySource[c.source] = max(bySource[c.source], c.count-p)
		}
	}
	var n uint64
	for _, d := range bySource {
		n += d
	}
	return n
}

func (h *history) add(s *series, n int) {
	s.bytes += n
	h.used += n
}

// trimOldest drops the oldest sample of the workflow least recently seen (the
// whole workflow once it has none), and reports whether it dropped anything.
func (h *history) trimOldest() bool {
	var oldest string
	for name, s := range h.byName {
		if oldest == "" || s.last.Before(h.byName[oldest].last) {
			oldest = name
		}
	}
	if oldest == "" {
		return false
	}
	s := h.byName[oldest]
	if len(s.Samples) == 0 {
		h.used -= s.bytes
		delete(h.byName, oldest)
		return true
	}
	s.Samples = s.Samples[1:]
	h.add(s, -sampleBytes)
	return true
}

// get returns a copy of name's history.
func (h *history) get(name string) History {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.byName[name]
	if s == nil {
		return History{Samples: []Sample{}}
	}
	return History{Samples: append([]Sample{}, s.Samples...)}
}

// usedBytes is what the kept history costs, for tests of the budget.
func (h *history) usedBytes() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.used
}
