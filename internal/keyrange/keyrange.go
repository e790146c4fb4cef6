// Package keyrange is the keyspace arithmetic of resharding: key ranges in the
// Vitess syntax ("-80", "80-c0", "c0-"), whether a keyspace ID falls in one,
// and whether a set of ranges tiles the keyspace exactly once. It does no I/O.
package keyrange

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
)

// Range is a half-open interval of keyspace IDs, [Start, End), compared as
// 8-byte big-endian values; an empty Start is the keyspace's beginning, an
// empty End its end.
type Range struct {
	Start, End []byte
}

// Parse reads a Vitess-style key range ("-80", "80-", "40-80", "-"):
// hexadecimal keyspace ID prefixes, start below end.
func Parse(kr string) (Range, error) {
	lo, hi, ok := strings.Cut(kr, "-")
	if !ok || strings.Contains(hi, "-") {
		return Range{}, fmt.Errorf("key range %q: want START-END in hexadecimal, either side empty (\"-80\", \"80-\", \"40-80\")", kr)
	}
	var r Range
	var err error
	if r.Start, err = hex.DecodeString(lo); err != nil || len(r.Start) > 8 {
		return Range{}, fmt.Errorf("key range %q: start %q is not an even number of up to 16 hexadecimal digits", kr, lo)
	}
	if r.End, err = hex.DecodeString(hi); err != nil || len(r.End) > 8 {
		return Range{}, fmt.Errorf("key range %q: end %q is not an even number of up to 16 hexadecimal digits", kr, hi)
	}
	if len(r.End) > 0 && bytes.Compare(padded(r.Start), padded(r.End)) >= 0 {
		return Range{}, fmt.Errorf("key range %q: start is not below end", kr)
	}
	return r, nil
}

// String is the range in the syntax Parse reads, trailing zero bytes kept as
// written.
func (r Range) String() string {
	return hex.EncodeToString(r.Start) + "-" + hex.EncodeToString(r.End)
}

// Contains reports whether keyspace ID id is in the range.
func (r Range) Contains(id uint64) bool {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], id)
	return bytes.Compare(b[:], padded(r.Start)) >= 0 && (len(r.End) == 0 || bytes.Compare(b[:], padded(r.End)) < 0)
}

// Overlaps reports whether two ranges share a keyspace ID: a stream runs
// between a source shard and a target shard only where they do.
func (r Range) Overlaps(o Range) bool {
	return below(r.Start, o.End) && below(o.Start, r.End)
}

// Intersect is the keyspace IDs two ranges share: what a stream from a source
// shard to a target shard carries. ok is false when they share none.
func (r Range) Intersect(o Range) (out Range, ok bool) {
	if !r.Overlaps(o) {
		return Range{}, false
	}
	out.Start = r.Start
	if bytes.Compare(padded(o.Start), padded(r.Start)) > 0 {
		out.Start = o.Start
	}
	out.End = r.End
	if len(o.End) > 0 && (len(r.End) == 0 || bytes.Compare(padded(o.End), padded(r.End)) < 0) {
		out.End = o.End
	}
	return out, true
}

// Whole reports whether the range is the entire keyspace, which needs no
// filter.
func (r Range) Whole() bool {
	return len(r.End) == 0 && bytes.Equal(padded(r.Start), padded(nil))
}

// Bounds are the range's ends as keyspace IDs: start, and end (exclusive)
// unless the range runs to the keyspace's end (hasEnd false).
func (r Range) Bounds() (start, end uint64, hasEnd bool) {
	start = binary.BigEndian.Uint64(padded(r.Start))
	if len(r.End) > 0 {
		end, hasEnd = binary.BigEndian.Uint64(padded(r.End)), true
	}
	return start, end, hasEnd
}

// Fraction is the share of the keyspace the range covers, from 0 to 1: the
// share of a table's rows it holds when keyspace IDs are spread evenly (as
// hashed ones are).
func (r Range) Fraction() float64 {
	start, end, hasEnd := r.Bounds()
	to := 1.0
	if hasEnd {
		to = float64(end) / (1 << 64)
	}
	return to - float64(start)/(1<<64)
}

// below reports whether start is below end; an empty end is the keyspace's.
func below(start, end []byte) bool {
	return len(end) == 0 || bytes.Compare(padded(start), padded(end)) < 0
}

// Tile checks that ranges cover the whole keyspace with no gap and no
// overlap, so every keyspace ID has exactly one home, and names the first
// gap or overlap it finds.
func Tile(ranges []Range) error {
	if len(ranges) == 0 {
		return fmt.Errorf("no key ranges: they must cover the keyspace (\"-\" for one shard)")
	}
	sorted := append([]Range(nil), ranges...)
	sort.SliceStable(sorted, func(i, j int) bool {
		return bytes.Compare(padded(sorted[i].Start), padded(sorted[j].Start)) < 0
	})
	at := []byte{} // the keyspace is covered up to here
	for i, r := range sorted {
		switch c := bytes.Compare(padded(r.Start), padded(at)); {
		case c > 0:
			return fmt.Errorf("key ranges leave %s uncovered: no shard owns those keyspace IDs", Range{Start: at, End: r.Start})
		case c < 0:
			return fmt.Errorf("key ranges %s and %s overlap: a keyspace ID must have one home", sorted[i-1], r)
		}
		if len(r.End) == 0 {
			if i+1 < len(sorted) {
				return fmt.Errorf("key ranges %s and %s overlap: a keyspace ID must have one home", r, sorted[i+1])
			}
			return nil
		}
		at = r.End
	}
	return fmt.Errorf("key ranges leave %s uncovered: no shard owns those keyspace IDs", Range{Start: at})
}

// Even splits the keyspace into n ranges of equal width (n a power of two up
// to 256), as `--shards N` asks.
func Even(n int) ([]Range, error) {
	if n < 1 || n > 256 || n&(n-1) != 0 {
		return nil, fmt.Errorf("%d shards: the keyspace splits evenly into 1, 2, 4, ... 256 shards", n)
	}
	out := make([]Range, n)
	step := 256 / n
	for i := range out {
		if i > 0 {
			out[i].Start = []byte{byte(i * step)}
		}
		if i+1 < n {
			out[i].End = []byte{byte((i + 1) * step)}
		}
	}
	return out, nil
}

// padded extends a keyspace ID prefix to 8 bytes, the width it compares at.
func padded(b []byte) []byte {
	out := make([]byte, 8)
	copy(out, b)
	return out
}
