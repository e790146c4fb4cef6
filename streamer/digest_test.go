package streamer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDigestChunkSizing: a verify's digest chunks start small, grow at
// most 4 times per chunk toward digestChunkTime's worth of rows, shrink at
// once after a slow chunk (not below digestMinRows), stay within the
// stream's chunk_rows, and learn nothing from the table's short last chunk.
func TestDigestChunkSizing(t *testing.T) {
	d := &digestPlan{rows: min(digestFirstRows, 1_000_000), maxRows: 1_000_000}
	require.EqualValues(t, digestFirstRows, d.rows)
	d.observe(d.rows, time.Millisecond) // very fast: grows, by 4 at most
	require.EqualValues(t, 4*digestFirstRows, d.rows)
	d.observe(d.rows, digestChunkTime/2) // twice the rate needed: doubles
	require.EqualValues(t, 8*digestFirstRows, d.rows)
	d.observe(d.rows, 4*digestChunkTime) // slow: a quarter
	require.EqualValues(t, 2*digestFirstRows, d.rows)
	d.observe(10, time.Hour) // the last chunk, shorter than asked: no change
	require.EqualValues(t, 2*digestFirstRows, d.rows)
	d.observe(d.rows, time.Hour) // very slow: the floor
	require.EqualValues(t, digestMinRows, d.rows)
	for range 20 {
		d.observe(d.rows, time.Microsecond)
	}
	require.EqualValues(t, 1_000_000, d.rows, "capped by chunk_rows")

	small := &digestPlan{rows: min(digestFirstRows, 500), maxRows: 500}
	small.observe(small.rows, time.Hour)
	require.EqualValues(t, 500, small.rows, "chunk_rows below the floor wins")
}
