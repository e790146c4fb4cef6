package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The demo says how long its fill will take once the first batch has
// measured the machine's rate, then each quarter, and nothing for a fill of
// one batch.
func TestFillProgress(t *testing.T) {
	var out strings.Builder
	d := &demo{out: &out}
	p := d.fillProgress()
	p(fillBatch, 1_000_000, 2*time.Second)
	p(2*fillBatch, 1_000_000, 4*time.Second)
	p(5*fillBatch, 1_000_000, 10*time.Second)
	p(6*fillBatch, 1_000_000, 12*time.Second)
	p(1_000_000, 1_000_000, 40*time.Second)
	require.Equal(t, "  about 40s for all 1,000,000 rows at the 25,000/s this machine writes them\n"+
		"  250,000 of 1,000,000 rows, about 30s left\n", out.String())

	out.Reset()
	small := d.fillProgress()
	small(30_000, 30_000, time.Second)
	require.Empty(t, out.String(), "a fill of one batch is over before an estimate could help")
}
