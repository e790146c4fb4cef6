package benchkit

import (
	"cmp"
	"math"
)

// Rank is the nearest-rank p-quantile of sorted (0 < p <= 1; p 0.5 is the
// median): the smallest value with at least p of the values at or below it,
// always a value that was measured. sorted must not be empty.
func Rank[T cmp.Ordered](sorted []T, p float64) T {
	return sorted[max(int(math.Ceil(p*float64(len(sorted))))-1, 0)]
}
