package keyrange

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

func mustParse(t *testing.T, krs ...string) []Range {
	t.Helper()
	var out []Range
	for _, kr := range krs {
		r, err := Parse(kr)
		require.NoError(t, err, kr)
		out = append(out, r)
	}
	return out
}

func TestParse(t *testing.T) {
	for _, ok := range []string{"-", "-80", "80-", "40-80", "4000-8000", "0102030405060708-"} {
		r, err := Parse(ok)
		require.NoError(t, err, ok)
		require.Equal(t, ok, r.String())
	}
	for kr, msg := range map[string]string{
		"80":                  "want START-END",
		"-8":                  `end "8" is not an even number`,
		"zz-":                 `start "zz" is not an even number`,
		"80-40":               "start is not below end",
		"80-80":               "start is not below end",
		"8000-80":             "start is not below end",
		"010203040506070809-": "up to 16 hexadecimal digits",
		"-80-c0":              "want START-END",
	} {
		_, err := Parse(kr)
		require.ErrorContains(t, err, msg, kr)
	}
}

func TestContainsAndOverlaps(t *testing.T) {
	rs := mustParse(t, "-80", "80-c0", "c0-")
	for _, c := range []struct {
		id    uint64
		owner int
	}{{0, 0}, {0x7fffffffffffffff, 0}, {0x8000000000000000, 1}, {0xbfffffffffffffff, 1}, {0xc000000000000000, 2}, {math.MaxUint64, 2}} {
		for i, r := range rs {
			require.Equal(t, i == c.owner, r.Contains(c.id), "%x in %s", c.id, r)
		}
	}
	// 2 -> 3 streams only where ranges meet.
	src := mustParse(t, "-80", "80-")
	dst := mustParse(t, "-55", "55-aa", "aa-")
	var pairs []string
	for _, s := range src {
		for _, d := range dst {
			if s.Overlaps(d) {
				pairs = append(pairs, s.String()+">"+d.String())
			}
		}
	}
	require.Equal(t, []string{"-80>-55", "-80>55-aa", "80->55-aa", "80->aa-"}, pairs)
	require.False(t, mustParse(t, "-80")[0].Overlaps(mustParse(t, "80-")[0]), "ends are exclusive")
}

func TestTileNamesGapsAndOverlaps(t *testing.T) {
	require.NoError(t, Tile(mustParse(t, "-")))
	require.NoError(t, Tile(mustParse(t, "c0-", "-80", "80-c0")), "in any order")
	for msg, krs := range map[string][]string{
		"key ranges leave 80-c0 uncovered":        {"-80", "c0-"},
		"key ranges leave -40 uncovered":          {"40-"},
		"key ranges leave c0- uncovered":          {"-80", "80-c0"},
		"key ranges -80 and 40-c0 overlap":        {"-80", "40-c0", "c0-"},
		"key ranges 80- and c0- overlap":          {"-80", "80-", "c0-"},
		"key ranges - and 80- overlap":            {"-", "80-"},
		"no key ranges":                           nil,
		"key ranges leave 8000-8001 uncovered":    {"-8000", "8001-"},
		"key ranges -80 and -80 overlap":          {"-80", "-80", "80-"},
		"key ranges 40-80 and 40-80 overlap":      {"-40", "40-80", "40-80", "80-"},
		"key ranges leave 0000000000000001- unco": {"-0000000000000001"},
	} {
		require.ErrorContains(t, Tile(mustParse(t, krs...)), msg, krs)
	}
}

// TestTileProperty cuts the keyspace at random points: the pieces tile and
// every keyspace ID lands in exactly one; dropping or doubling a piece is
// caught.
func TestTileProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		cuts := map[uint16]bool{}
		for range rng.IntN(8) {
			cuts[uint16(1+rng.IntN(math.MaxUint16))] = true
		}
		var points []uint16
		for c := range cuts {
			points = append(points, c)
		}
		sort.Slice(points, func(i, j int) bool { return points[i] < points[j] })
		var rs []Range
		var start []byte
		for _, p := range points {
			end := []byte{byte(p >> 8), byte(p)}
			rs = append(rs, Range{Start: start, End: end})
			start = end
		}
		rs = append(rs, Range{Start: start})
		rng.Shuffle(len(rs), func(i, j int) { rs[i], rs[j] = rs[j], rs[i] })
		require.NoError(t, Tile(rs), "%v", rs)
		for range 50 {
			id := rng.Uint64()
			n := 0
			for _, r := range rs {
				if r.Contains(id) {
					n++
				}
			}
			require.Equal(t, 1, n, "%x lands in one shard of %v", id, rs)
		}
		if len(rs) > 1 {
			i := rng.IntN(len(rs))
			require.Error(t, Tile(append(append([]Range(nil), rs[:i]...), rs[i+1:]...)), "a piece dropped from %v", rs)
		}
		require.Error(t, Tile(append(append([]Range(nil), rs...), rs[rng.IntN(len(rs))])), "a piece doubled in %v", rs)
	}
}

func TestEven(t *testing.T) {
	for n, want := range map[int][]string{1: {"-"}, 2: {"-80", "80-"}, 4: {"-40", "40-80", "80-c0", "c0-"}} {
		rs, err := Even(n)
		require.NoError(t, err)
		var got []string
		for _, r := range rs {
			got = append(got, r.String())
		}
		require.Equal(t, want, got)
		require.NoError(t, Tile(rs))
	}
	for _, n := range []int{0, 3, 512} {
		_, err := Even(n)
		require.ErrorContains(t, err, "splits evenly into 1, 2, 4, ... 256 shards")
	}
	rs, err := Even(256)
	require.NoError(t, err)
	require.NoError(t, Tile(rs))
}

func TestIntersect(t *testing.T) {
	for _, c := range []struct{ a, b, want string }{
		{"-", "-", "-"},
		{"-", "40-80", "40-80"},
		{"-80", "55-aa", "55-80"},
		{"80-", "55-aa", "80-aa"},
		{"80-", "aa-", "aa-"},
		{"-80", "-55", "-55"},
		{"40-80", "40-80", "40-80"},
		{"4000-", "41-8000", "41-8000"},
		{"-80", "80-", ""},
		{"-55", "aa-", ""},
	} {
		rs := mustParse(t, c.a, c.b)
		for _, order := range [][2]Range{{rs[0], rs[1]}, {rs[1], rs[0]}} {
			got, ok := order[0].Intersect(order[1])
			if c.want == "" {
				require.False(t, ok, "%s and %s", c.a, c.b)
				continue
			}
			require.True(t, ok, "%s and %s", c.a, c.b)
			require.Equal(t, c.want, got.String(), "%s and %s", c.a, c.b)
		}
	}
	require.True(t, mustParse(t, "-")[0].Whole())
	require.True(t, Range{Start: []byte{0, 0}}.Whole())
	require.False(t, mustParse(t, "-80")[0].Whole())
	require.False(t, mustParse(t, "01-")[0].Whole())
}

// TestIntersectProperty: an ID is in the intersection exactly when it is in
// both ranges.
func TestIntersectProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	randRange := func() Range {
		a, b := uint8(rng.IntN(256)), uint8(rng.IntN(256))
		if a > b {
			a, b = b, a
		}
		r := Range{}
		if a > 0 {
			r.Start = []byte{a}
		}
		if b > a && b < 255 {
			r.End = []byte{b}
		}
		return r
	}
	for range 2000 {
		x, y := randRange(), randRange()
		in, ok := x.Intersect(y)
		for range 20 {
			id := rng.Uint64()
			both := x.Contains(id) && y.Contains(id)
			require.Equal(t, both, ok && in.Contains(id), "%x in %s and %s (got %s, %v)", id, x, y, in, ok)
		}
	}
}

func TestFraction(t *testing.T) {
	for kr, want := range map[string]float64{"-": 1, "-80": 0.5, "80-": 0.5, "40-80": 0.25, "c0-": 0.25, "55-aa": 85.0 / 256} {
		require.InDelta(t, want, mustParse(t, kr)[0].Fraction(), 1e-9, kr)
	}
	var sum float64
	for _, r := range mustParse(t, "-15", "15-7f01", "7f01-e0", "e0-") {
		sum += r.Fraction()
	}
	require.InDelta(t, 1, sum, 1e-9, "a tiling covers the keyspace once")
}
