package rowcodec

import (
	"encoding/binary"
	"fmt"
)

// StreamProtocol is the version of the stream's items both sides must agree
// on (StreamRequest.protocol, StreamResponse.protocol): 1 packs a chunk's rows
// into one byte string (AppendRow), where 0 sent a Row message per row; 2
// sends MySQL JSON as typed values (package mysqljson), which an applier of
// 1 would write as text, and verify chunks hash a row with one SHA-256; 3
// sums verify chunks up (Chunk.digest), which an applier of 2 would take
// for empty chunks.
const StreamProtocol = 3

// AppendRow appends a row of values (nil for NULL) to a block of packed rows:
// a uvarint count of values, then per value a uvarint of its length plus one
// (zero for NULL) and its bytes. A block of rows is one allocation for the
// sender and none per row for the receiver, which reads it with ReadRows.
func AppendRow(block []byte, values [][]byte) []byte {
	need := binary.MaxVarintLen64 * (len(values) + 1)
	for _, v := range values {
		need += len(v)
	}
	block = Grow(block, need)
	block = binary.AppendUvarint(block, uint64(len(values)))
	for _, v := range values {
		if v == nil {
			block = append(block, 0)
			continue
		}
		block = binary.AppendUvarint(block, uint64(len(v))+1)
		block = append(block, v...)
	}
	return block
}

// Grow makes room in block for n more bytes, doubling it when it must grow:
// append grows a large slice by a quarter at a time, which copied a filling
// copy part's bytes several times over (40% of the streamer's CPU in a copy
// of sysbench's sbtest1, all of it in runtime.memmove under growslice).
func Grow(block []byte, n int) []byte {
	if len(block)+n <= cap(block) {
		return block
	}
	grown := make([]byte, len(block), max(2*cap(block), len(block)+n))
	copy(grown, block)
	return grown
}

// Rows reads a block of packed rows one row at a time, in the manner of
// sql.Rows: Next, then Values (and Raw), then Err once Next is false.
type Rows struct {
	block      []byte
	off, start int
	n          int
	vals       [][]byte
	err        error
}

// ReadRows returns a reader of block, whose values alias block.
func ReadRows(block []byte) *Rows {
	r := &Rows{}
	r.Reset(block)
	return r
}

// Reset makes r read block from its start, keeping r's storage, so a reader
// reused for every chunk allocates nothing once warm.
func (r *Rows) Reset(block []byte) {
	*r = Rows{block: block, vals: r.vals[:0]}
}

// Next reads the next row; false at the end of the block or on a malformed
// row (Err says which).
func (r *Rows) Next() bool {
	if r.err != nil || r.off == len(r.block) {
		return false
	}
	r.start = r.off
	count, err := r.uvarint()
	if err != nil {
		r.err = err
		return false
	}
	if count > uint64(len(r.block)-r.off) {
		r.err = fmt.Errorf("packed row %d claims %d values in %d bytes", r.n, count, len(r.block)-r.off)
		return false
	}
	r.vals = r.vals[:0]
	for range count {
		size, err := r.uvarint()
		if err != nil {
			r.err = err
			return false
		}
		switch {
		case size == 0:
			r.vals = append(r.vals, nil)
			continue
		case size-1 > uint64(len(r.block)-r.off):
			r.err = fmt.Errorf("packed row %d is truncated: value of %d bytes at offset %d of %d", r.n, size-1, r.off, len(r.block))
			return false
		}
		// Capped, so appending to a value never writes over the next one; an
		// empty string is a non-nil empty slice, not NULL.
		end := r.off + int(size-1)
		r.vals = append(r.vals, r.block[r.off:end:end])
		r.off = end
	}
	r.n++
	return true
}

func (r *Rows) uvarint() (uint64, error) {
	v, n := binary.Uvarint(r.block[r.off:])
	if n <= 0 {
		return 0, fmt.Errorf("packed row %d is truncated or malformed at offset %d of %d", r.n, r.off, len(r.block))
	}
	r.off += n
	return v, nil
}

// Values is the current row's values (nil for NULL), valid until the next call
// of Next.
func (r *Rows) Values() [][]byte { return r.vals }

// Raw is the current row as packed, to append to another block as it is.
func (r *Rows) Raw() []byte { return r.block[r.start:r.off:r.off] }

// Count is the number of rows read so far.
func (r *Rows) Count() int { return r.n }

// Err is why Next stopped before the end of the block, if it did.
func (r *Rows) Err() error { return r.err }
