package benchkit

import "testing"

func TestRank(t *testing.T) {
	values := make([]int, 200)
	for i := range values {
		values[i] = i + 1
	}
	for _, c := range []struct {
		sorted []int
		p      float64
		want   int
	}{
		{[]int{7}, 0.5, 7},
		{[]int{1, 2, 3, 4}, 0.5, 2},
		{[]int{1, 2, 3, 4, 5}, 0.5, 3},
		{values[:20], 0.99, 20}, // too few values for a p99 below the maximum
		{values, 0.99, 198},
		{values, 1, 200},
	} {
		if got := Rank(c.sorted, c.p); got != c.want {
			t.Errorf("Rank(%d values, %g) = %d, want %d", len(c.sorted), c.p, got, c.want)
		}
	}
}
