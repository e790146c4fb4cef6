package rowcodec

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// blockRows are rows with every kind of value a packed row distinguishes:
// NULL, empty, one byte, and lengths on both sides of a uvarint's byte steps.
func blockRows() [][][]byte {
	var rows [][][]byte
	for _, n := range []int{0, 1, 126, 127, 128, 16382, 16383, 16384, 70000} {
		rows = append(rows, [][]byte{[]byte(fmt.Sprint(n)), bytes.Repeat([]byte{'x'}, n), nil, {}})
	}
	rows = append(rows, [][]byte{}, [][]byte{nil}, [][]byte{{0}, {'\t', '\n', '\\'}})
	return rows
}

func TestPackedRowsRoundTrip(t *testing.T) {
	var block []byte
	for _, r := range blockRows() {
		block = AppendRow(block, r)
	}
	rows := ReadRows(block)
	var got [][][]byte
	for rows.Next() {
		var vals [][]byte
		for _, v := range rows.Values() {
			if v == nil {
				vals = append(vals, nil)
				continue
			}
			vals = append(vals, append([]byte{}, v...))
		}
		got = append(got, vals)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, len(blockRows()), rows.Count())
	for i, want := range blockRows() {
		require.Len(t, got[i], len(want), "row %d", i)
		for j := range want {
			require.Equal(t, want[j] == nil, got[i][j] == nil, "row %d value %d: NULL stays NULL and empty stays empty", i, j)
			require.Equal(t, string(want[j]), string(got[i][j]), "row %d value %d", i, j)
		}
	}
}

func TestPackedRowsRawCopiesARow(t *testing.T) {
	var block, evens []byte
	for _, r := range blockRows() {
		block = AppendRow(block, r)
	}
	rows := ReadRows(block)
	for rows.Next() {
		if rows.Count()%2 == 1 {
			evens = append(evens, rows.Raw()...)
		}
	}
	require.NoError(t, rows.Err())
	var want []byte
	for i, r := range blockRows() {
		if i%2 == 0 {
			want = AppendRow(want, r)
		}
	}
	require.Equal(t, want, evens, "the raw rows of a block make a block of those rows")
}

func TestPackedRowValuesDoNotOverlap(t *testing.T) {
	block := AppendRow(nil, [][]byte{[]byte("ab"), []byte("cd")})
	rows := ReadRows(block)
	require.True(t, rows.Next())
	first := rows.Values()[0]
	_ = append(first, 'X')
	require.Equal(t, "cd", string(rows.Values()[1]), "appending to a value leaves the next one alone")
}

func TestPackedRowsRejectMalformedBlocks(t *testing.T) {
	good := AppendRow(nil, [][]byte{[]byte("abc"), nil})
	for name, block := range map[string][]byte{
		"value longer than the block": good[:len(good)-2],
		"count without values":        {5},
		"count beyond the block":      {0xff, 0xff, 0xff, 0xff, 0x0f},
		"truncated uvarint":           {1, 0x80},
		"overlong uvarint":            append([]byte{1}, bytes.Repeat([]byte{0xff}, 11)...),
	} {
		rows := ReadRows(block)
		for rows.Next() {
		}
		require.Error(t, rows.Err(), name)
	}
}

func TestPackedRowsReadWithoutAllocating(t *testing.T) {
	var block []byte
	for i := range 1000 {
		block = AppendRow(block, [][]byte{[]byte(fmt.Sprint(i)), []byte("some value"), nil})
	}
	var rows Rows
	read := func() {
		rows.Reset(block)
		for rows.Next() {
		}
	}
	read()
	require.Zero(t, testing.AllocsPerRun(10, read), "a warm reader reads 1000 rows without allocating")
	buf := make([]byte, 0, len(block))
	require.Zero(t, testing.AllocsPerRun(10, func() {
		buf = buf[:0]
		for range 1000 {
			buf = AppendRow(buf, [][]byte{[]byte("1"), []byte("some value"), nil})
		}
	}), "packing into a block with room allocates nothing")
}

// TestGrowDoubles: a block with room is returned as it is; one without
// doubles (or takes what it needs), keeping its bytes, so filling a copy
// part copies its bytes about once rather than once per quarter it grows.
func TestGrowDoubles(t *testing.T) {
	block := make([]byte, 90, 100)
	block[89] = 7
	if got := Grow(block, 10); &got[0] != &block[0] || cap(got) != 100 {
		t.Fatalf("Grow with room reallocated: cap %d", cap(got))
	}
	got := Grow(block, 11)
	if len(got) != 90 || cap(got) != 200 || got[89] != 7 {
		t.Fatalf("Grow(90/100, 11) = len %d cap %d, want 90/200 with the bytes kept", len(got), cap(got))
	}
	if got := Grow(block, 500); cap(got) != 590 {
		t.Fatalf("Grow(90/100, 500) cap %d, want 590", cap(got))
	}
	copies, b := 0, []byte(nil)
	for range 100_000 {
		before := cap(b)
		b = AppendRow(b, [][]byte{[]byte("a row of some forty bytes, give or take.")})
		if cap(b) != before {
			copies++
		}
	}
	if copies > 25 {
		t.Fatalf("a 4 MB block grew %d times, want about log2 of its size", copies)
	}
}
