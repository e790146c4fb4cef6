package mysqljson

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
)

// TestDoubleMatchesServer requires AppendDouble to print doubles of
// every magnitude and digit count exactly as MySQL prints them in JSON.
func TestDoubleMatchesServer(t *testing.T) {
	db := sandboxtest.Open(t, sandboxtest.Start(t, sandbox.Options{Flavor: sandbox.MySQL}), "")
	values := []float64{0, math.Copysign(0, -1), 1, -1, 0.1, 1.5, 3, 1e14, 1e15, 1.5e15, 1e16, 1e-14, 1e-15, 1e-16, 1.5e-15,
		1.2345678901234567e15, 1.2345678901234567e16, 1.2345678901234567e-15, 1.2345678901234567e-16, 12345678.9,
		math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64, 2.2250738585072014e-308, 1 << 53, 1<<53 + 2,
		math.MaxInt64, math.MaxUint64, 123456789012345678901234}
	for e := -30; e <= 30; e++ {
		for _, m := range []float64{1, 1.5, 9.999999999999998, 1.2345678901234567, 7.000000000000001} {
			values = append(values, m*math.Pow(10, float64(e)), -m*math.Pow(10, float64(e)))
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		if f := math.Float64frombits(r.Uint64()); !math.IsNaN(f) && !math.IsInf(f, 0) {
			values = append(values, f)
		}
	}
	sandboxtest.Exec(t, db, "CREATE DATABASE j", "CREATE TABLE j.d (id INT PRIMARY KEY, d DOUBLE NOT NULL)")
	var rows []string
	for i, f := range values {
		// In 'e' notation, which MySQL reads as a double (-0 would be an integer).
		rows = append(rows, fmt.Sprintf("(%d, %s)", i, strconv.FormatFloat(f, 'e', -1, 64)))
	}
	sandboxtest.Exec(t, db, "INSERT INTO j.d VALUES "+strings.Join(rows, ", "))
	got, err := db.Query("SELECT id, CAST(d AS JSON) FROM j.d ORDER BY id")
	require.NoError(t, err)
	defer got.Close()
	var diffs []string
	n := 0
	for got.Next() {
		var id int
		var text string
		require.NoError(t, got.Scan(&id, &text))
		if mine := string(AppendDouble(nil, values[id])); mine != text {
			diffs = append(diffs, fmt.Sprintf("%v: mine %s, MySQL %s", values[id], mine, text))
		}
		n++
	}
	require.NoError(t, got.Err())
	require.Equal(t, len(values), n)
	require.Empty(t, diffs)
}
