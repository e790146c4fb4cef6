package streamer

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestChunkSizerLimit(t *testing.T) {
	for _, tc := range []struct {
		budget, maxRows, avg int64
		want                 int64
	}{
		{budget: 16 << 20, maxRows: 100000, avg: 0, want: unknownWidthRows},       // no statistics: a small first chunk
		{budget: 16 << 20, maxRows: 10, avg: 0, want: 10},                         // ... within chunk_rows
		{budget: 16 << 20, maxRows: 100000, avg: 100, want: 100000},               // narrow rows: chunk_rows bounds
		{budget: 16 << 20, maxRows: 100000, avg: 200 << 10, want: 81},             // 200 KiB rows
		{budget: 16 << 20, maxRows: 100000, avg: 1 << 20, want: 16},               // 1 MiB rows
		{budget: 16 << 20, maxRows: 100000, avg: 64 << 20, want: 1},               // a row above the budget goes alone
		{budget: 1000, maxRows: 100000, avg: 1000, want: 1},                       // exactly the budget
		{budget: 1000, maxRows: 100000, avg: 999, want: 1},                        // just under: rounds down
		{budget: 0, maxRows: 0, avg: 5, want: 1},                                  // degenerate options still move
		{budget: 16 << 20, maxRows: 100000, avg: 16 << 20 / 100000, want: 100000}, // exactly at chunk_rows
	} {
		t.Run(fmt.Sprintf("%d/%d/%d", tc.budget, tc.maxRows, tc.avg), func(t *testing.T) {
			require.Equal(t, tc.want, newChunkSizer(tc.budget, tc.maxRows, tc.avg).limit())
		})
	}
}

func TestChunkSizerFull(t *testing.T) {
	s := newChunkSizer(1000, 100, 10)
	require.False(t, s.full(0))
	require.False(t, s.full(1999))
	require.True(t, s.full(2000))
	require.True(t, s.full(1<<40), "one row far above the budget ends its chunk")
}

func TestChunkSizerObserve(t *testing.T) {
	s := newChunkSizer(1<<20, 100000, 100)
	require.EqualValues(t, 10485, s.limit())
	s.observe(0, 0) // an empty chunk (the table's end) teaches nothing
	require.EqualValues(t, 10485, s.limit())
	s.observe(4, 4<<20) // the rows turned wide: the next chunk follows at once
	require.EqualValues(t, 1, s.limit())
	s.observe(10, 10) // and narrow again
	require.EqualValues(t, 100000, s.limit())
	s.observe(1, 0) // empty rows of an all-NULL table still cost a byte each
	require.EqualValues(t, 100000, s.limit())
}

// chunkRun is one chunk of a simulated copy.
type chunkRun struct {
	limit, rows, bytes int64
	drained            int64 // rows the LIMIT asked for that the chunk read off the wire and dropped
	endedByBytes       bool
}

// simulateCopy copies a table of rows of the given widths in chunks as the
// rowStreamer does: LIMIT from the sizer, the scan ends at the LIMIT or once
// the sizer says full, and the chunk's rows and bytes are observed.
func simulateCopy(s *chunkSizer, widths []int64) []chunkRun {
	var runs []chunkRun
	for at := 0; ; {
		r := chunkRun{limit: s.limit()}
		for r.rows < r.limit && at < len(widths) {
			r.bytes += widths[at]
			r.rows++
			at++
			if s.full(r.bytes) {
				r.endedByBytes = true
				break
			}
		}
		if r.endedByBytes {
			r.drained = min(r.limit-r.rows, int64(len(widths)-at))
		}
		s.observe(r.rows, r.bytes)
		runs = append(runs, r)
		if !r.endedByBytes && r.rows < r.limit {
			return runs // fewer rows than asked: the table's end
		}
	}
}

// TestChunkSizerSimulated copies tables of every shape of row width and checks
// the invariants the streamer's memory bound rests on: every chunk moves the
// copy, no chunk holds more than twice the budget plus the one row that
// crossed it, no LIMIT exceeds chunk_rows, and once the rows' width is known
// the chunks sit near the budget.
func TestChunkSizerSimulated(t *testing.T) {
	const budget = 1 << 20
	rng := rand.New(rand.NewPCG(24, 1))
	constant := func(n int, w int64) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = w
		}
		return out
	}
	uniform := func(n int, lo, hi int64) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = lo + rng.Int64N(hi-lo+1)
		}
		return out
	}
	tables := map[string]struct {
		widths []int64
		avg    int64
		// steady: every chunk but the first and the last holds at least
		// budget/steady bytes and drains nothing (0: not checked).
		steady int64
	}{
		"narrow":                 {widths: constant(300000, 40), avg: 40}, // chunk_rows bounds: 40 B × 5000 rows
		"narrow, no statistics":  {widths: constant(300000, 40), avg: 0},
		"200 KiB":                {widths: constant(400, 200<<10), avg: 200 << 10, steady: 2},
		"1 MiB":                  {widths: constant(40, 1<<20), avg: 1 << 20, steady: 1},
		"4 MiB, above budget":    {widths: constant(10, 4<<20), avg: 4 << 20},
		"10-200 KiB":             {widths: uniform(2000, 10<<10, 200<<10), avg: 105 << 10, steady: 4},
		"stale statistics":       {widths: constant(500, 300<<10), avg: 100},
		"narrow then wide":       {widths: append(constant(20000, 50), constant(200, 500<<10)...), avg: 60},
		"wide then narrow":       {widths: append(constant(200, 500<<10), constant(20000, 50)...), avg: 500 << 10},
		"one huge row in narrow": {widths: append(append(constant(5000, 50), 8<<20), constant(5000, 50)...), avg: 50},
		"empty":                  {widths: nil, avg: 0},
	}
	for name, tc := range tables {
		t.Run(name, func(t *testing.T) {
			const maxRows = 5000
			runs := simulateCopy(newChunkSizer(budget, maxRows, tc.avg), tc.widths)
			var rows int64
			widest := int64(0)
			for _, w := range tc.widths {
				widest = max(widest, w)
			}
			for i, r := range runs {
				rows += r.rows
				require.LessOrEqual(t, r.limit, int64(maxRows), "chunk %d asks for more than chunk_rows", i)
				require.GreaterOrEqual(t, r.limit, int64(1), "chunk %d", i)
				if i < len(runs)-1 {
					require.Positive(t, r.rows, "chunk %d before the end moved nothing", i)
				}
				require.Less(t, r.bytes, chunkOvershoot*budget+widest, "chunk %d holds %d bytes", i, r.bytes)
				if tc.steady > 0 && i > 0 && i < len(runs)-1 {
					require.GreaterOrEqual(t, r.bytes, budget/tc.steady, "chunk %d", i)
					require.Zero(t, r.drained, "chunk %d", i)
				}
			}
			require.EqualValues(t, len(tc.widths), rows, "every row copied once")
		})
	}
}

// TestChunkSizerBrokenVariantCaught checks that the simulation would catch a
// sizer that trusts its first estimate: with stale statistics its chunks
// grow far past the budget.
func TestChunkSizerBrokenVariantCaught(t *testing.T) {
	widths := make([]int64, 500)
	for i := range widths {
		widths[i] = 300 << 10
	}
	stale := &chunkSizer{budget: 1 << 20, maxRows: 5000, rowBytes: 100}
	var worst int64
	for at := 0; at < len(widths); {
		limit, bytes := stale.limit(), int64(0)
		for n := int64(0); n < limit && at < len(widths); n++ {
			bytes += widths[at]
			at++
		}
		worst = max(worst, bytes)
	}
	require.Greater(t, worst, int64(chunkOvershoot<<20)+300<<10, "without the early end and observe, a chunk takes the whole table")
}

func TestChunkSizerPace(t *testing.T) {
	const target = 500 * time.Millisecond
	s := newChunkSizer(16<<20, 1<<30, 100)
	s.observe(1, 16<<20)
	s.pace(2*time.Second, target, true) // 16 MiB took 2 s: a quarter of it takes 500 ms
	require.EqualValues(t, 4<<20, s.budget)
	s.observe(1, 4<<20)
	s.pace(100*time.Millisecond, target, true) // fast now, but the budget at most doubles
	require.EqualValues(t, 8<<20, s.budget)
	s.observe(1, 8<<20)
	s.pace(10*time.Millisecond, target, true) // and never passes chunk_bytes
	require.EqualValues(t, 16<<20, s.budget)
	s.observe(1, 16<<20)
	s.pace(time.Minute, target, true) // a very slow target: the floor
	require.EqualValues(t, minPacedBytes, s.budget)
	s.observe(1, minPacedBytes)
	s.pace(time.Minute, target, false) // nothing held back: the table is quiet again
	require.EqualValues(t, 2*minPacedBytes, s.budget)
	s.pace(0, target, true) // an unknown time counts as quiet
	require.EqualValues(t, 4*minPacedBytes, s.budget)
	s.pace(time.Second, 0, true) // no target: no pacing
	require.EqualValues(t, 8*minPacedBytes, s.budget)

	require.True(t, s.paces())
	s.observe(1, minPacedBytes*3/4)
	require.True(t, s.paces(), "a paced chunk that read a little under its budget")
	s.observe(1, minPacedBytes/2-1)
	require.False(t, s.paces(), "a small chunk is not paced")

	small := newChunkSizer(64<<10, 1<<30, 100) // chunk_bytes below the floor stays the ceiling
	small.observe(1, 64<<10)
	small.pace(time.Minute, target, true)
	require.EqualValues(t, 64<<10, small.budget)

	fresh := newChunkSizer(16<<20, 1<<30, 0) // no chunk read yet: nothing to go by
	fresh.pace(time.Minute, target, true)
	require.EqualValues(t, 16<<20, fresh.budget)
}

// TestChunkSizerPaceConverges runs a paced copy against targets that apply
// chunks at a rate after a fixed cost each: the chunks settle within a third
// of the target time and stay there, whatever the rate.
func TestChunkSizerPaceConverges(t *testing.T) {
	const target = 500 * time.Millisecond
	for _, rate := range []float64{2 << 20, 9 << 20, 30 << 20, 200 << 20} { // bytes/s
		for _, overhead := range []time.Duration{0, 20 * time.Millisecond, 80 * time.Millisecond} {
			s := newChunkSizer(16<<20, 1<<30, 200)
			var took time.Duration
			for i := 0; i < 12; i++ {
				bytes := s.budget
				s.observe(bytes/200, bytes)
				took = overhead + time.Duration(float64(bytes)/rate*float64(time.Second))
				if i >= 4 && s.budget > minPacedBytes && s.budget < s.ceiling {
					require.InDelta(t, target.Seconds(), took.Seconds(), target.Seconds()/3, "rate %.0f MiB/s, overhead %s, chunk %d", rate/(1<<20), overhead, i)
				}
				s.pace(took, target, true)
			}
			fullSpeed := overhead + time.Duration(float64(16<<20)/rate*float64(time.Second))
			if fullSpeed <= target {
				require.EqualValues(t, 16<<20, s.budget, "a target that applies full chunks in time keeps them")
			}
		}
	}
}

func TestChunkSizerSlowStart(t *testing.T) {
	s := newChunkSizer(16<<20, 1<<30, 100)
	s.slowStart()
	var budgets []int64
	for range 5 {
		budgets = append(budgets, s.budget)
		s.observe(1, s.budget)
		s.pace(time.Millisecond, 500*time.Millisecond, false) // a quiet table
	}
	require.Equal(t, []int64{2 << 20, 4 << 20, 8 << 20, 16 << 20, 16 << 20}, budgets)

	small := newChunkSizer(1<<20, 1<<30, 100)
	small.slowStart()
	require.EqualValues(t, 1<<20, small.budget, "chunk_bytes below the first budget")
}
