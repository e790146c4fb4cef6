package streamer

import "time"

// DefaultChunkBytes is the copy chunk's byte budget when a workflow sets none.
// A chunk is read in one snapshot, and while its fence waits for the binlog
// reader it is held in memory (whole, in a reshard, plus the shared cache's
// copies): on 2 cores and 24 GB, 16 MiB keeps a stream's chunks at most
// parallel_tables × 2 × 16 MiB = 128 MiB at the default 4 tables, a chunk
// takes a fraction of a second to write on the target (so a kill loses that
// much), and rows narrower than 168 bytes still fill the 100,000-row chunks
// benchmarks/copy chose for narrow tables. Spirit's chunker aims at the same
// 16 MiB-ish target.
const DefaultChunkBytes = 16 << 20

// chunkOvershoot is how far past its budget a chunk's scan may go before it
// ends below its LIMIT: rows wider than the estimate (a run of large blobs
// after narrow rows) end the chunk there, while the usual spread of row
// widths around the estimate does not cut chunks short.
const chunkOvershoot = 2

// unknownWidthRows is the LIMIT of a table's first chunk when its average row
// length is unknown (statistics not gathered yet). A chunk that ends early by
// its bytes still reads the rest of its result to the LIMIT off the wire
// (the client protocol has no way to stop a SELECT), discarding it: a small
// first LIMIT keeps that cheap until the first chunk has measured the rows.
const unknownWidthRows = 100

// minPacedBytes is the smallest budget pacing gives a chunk of a live table:
// below it a chunk's fixed costs (its fence, snapshot, statement and commit)
// would outweigh its rows, and a target that slow is the lag gate's to handle.
const minPacedBytes = 1 << 20

// firstPacedBytes is the budget a paced copy's first chunk aims at: until a
// chunk has been timed nothing says whether the table is live or how fast the
// target loads, and a full chunk could hold transactions back for seconds.
// Chunks of a quiet table double from it to the ceiling in a few steps.
const firstPacedBytes = 2 << 20

// chunkSizer decides how many rows each chunk of one table asks for, so that
// a chunk holds about budget bytes whatever the rows' width, and when a chunk's
// scan must end early. It starts from the table's average row length and then
// follows the bytes per row of the chunks it read: rows in key order resemble
// their neighbours more than the table's average. While the table is written
// to, pace lowers the budget so a chunk is applied within a time (see
// copyGate.drain). It does no I/O.
type chunkSizer struct {
	// budget is the bytes a chunk aims at, at most ceiling (the workflow's
	// chunk_bytes); maxRows bounds its LIMIT.
	budget, ceiling, maxRows int64
	// rowBytes is the estimated bytes per row (0: unknown).
	rowBytes float64
	// lastBytes is what the last chunk read.
	lastBytes int64
}

// newChunkSizer sizes chunks of budget bytes, at most maxRows rows, for a
// table whose rows average avgRowBytes (0 or less: unknown; the first chunk
// then asks for unknownWidthRows).
func newChunkSizer(budget, maxRows, avgRowBytes int64) *chunkSizer {
	s := &chunkSizer{budget: max(budget, 1), ceiling: max(budget, 1), maxRows: max(maxRows, 1)}
	if avgRowBytes > 0 {
		s.rowBytes = float64(avgRowBytes)
	}
	return s
}

// limit is the LIMIT of the next chunk: budget divided by the bytes per row,
// at least 1 (a row wider than the budget is copied alone) and at most maxRows.
func (s *chunkSizer) limit() int64 {
	if s.rowBytes <= 0 {
		return min(unknownWidthRows, s.maxRows)
	}
	n := float64(s.budget) / s.rowBytes
	if n >= float64(s.maxRows) {
		return s.maxRows
	}
	return max(int64(n), 1)
}

// full reports whether a chunk that has read bytes must end now, below its
// LIMIT: past chunkOvershoot times the budget. A chunk always keeps the row
// that crossed it, so every chunk moves the copy by at least one row.
func (s *chunkSizer) full(bytes int64) bool {
	return bytes >= chunkOvershoot*s.budget
}

// observe learns from a chunk that read rows rows of bytes bytes in all;
// a chunk that read nothing teaches nothing.
func (s *chunkSizer) observe(rows, bytes int64) {
	if rows <= 0 {
		return
	}
	s.rowBytes = max(float64(bytes)/float64(rows), 1)
	s.lastBytes = bytes
}

// slowStart lowers the first chunk's budget to firstPacedBytes, for a copy
// that pace sizes from then on.
func (s *chunkSizer) slowStart() { s.budget = min(s.ceiling, firstPacedBytes) }

// paces reports whether the last chunk is worth pacing: one under half of
// minPacedBytes (a small table's, or one its chunk_rows or chunk_bytes keeps
// small) loads in a moment, so transactions behind two of them wait no longer
// than behind one large one, and waiting for each would only slow the copy.
// Chunks that pacing itself sizes hold about minPacedBytes or more.
func (s *chunkSizer) paces() bool { return 2*s.lastBytes >= minPacedBytes }

// pace sets the next chunk's budget from the last one, which took took from
// its request until the target had applied it and the transactions queued
// behind it. A live table's chunks (held is true: transactions waited behind
// the chunk) aim at target, so those transactions wait about that long
// however fast the target loads; the budget at most doubles per chunk, so one
// quick chunk does not undo it. A chunk that held nothing back lets the budget
// double back toward the ceiling: a quiet table copies in full-size chunks.
func (s *chunkSizer) pace(took, target time.Duration, held bool) {
	grown := min(2*s.budget, s.ceiling)
	if !held || took <= 0 || target <= 0 || s.lastBytes <= 0 {
		s.budget = grown
		return
	}
	want := float64(s.lastBytes) * float64(target) / float64(took)
	s.budget = max(min(int64(want), grown), min(minPacedBytes, s.ceiling))
}
