package benchkit

import (
	"strconv"
	"strings"
	"testing"
)

// TestStressRows checks the generated rows against SHA1 as the server computes
// it (SELECT SHA1(1) on MariaDB), so rows loaded and rows written agree.
func TestStressRows(t *testing.T) {
	const sig1 = "356a192b7913b04c54574d18c28d46e6395428ab"
	if got := StressSig(1); got != sig1 {
		t.Errorf("StressSig(1) = %s, want %s", got, sig1)
	}
	if got, want := string(appendRow(nil, 1)), strings.Join([]string{"1", sig1, sig1[:8]}, "\t")+"\n"; got != want {
		t.Errorf("appendRow(1) = %q, want %q", got, want)
	}
}

// TestSbtestRows checks sbtest1's rows against oltp_common's shape and
// RowBytes against the rows it counts.
func TestSbtestRows(t *testing.T) {
	const rows = 1000
	s := Sbtest(rows)
	var total int64
	for id := int64(1); id <= rows; id++ {
		line := string(s.Row(nil, id))
		if line != string(s.Row(nil, id)) {
			t.Fatalf("row %d differs between two generations", id)
		}
		f := strings.Split(strings.TrimSuffix(line, "\n"), "\t")
		if len(f) != 4 || f[0] != strconv.FormatInt(id, 10) || len(f[2]) != 119 || len(f[3]) != 59 {
			t.Fatalf("row %d = %q, want id, k, 119 chars of c, 59 of pad", id, line)
		}
		if k, err := strconv.ParseInt(f[1], 10, 64); err != nil || k < 1 || k > rows {
			t.Fatalf("row %d: k %q not in [1, %d]", id, f[1], rows)
		}
		total += int64(len(f[0]) + len(f[1]) + len(f[2]) + len(f[3]))
	}
	if got := s.RowBytes(rows); got != total {
		t.Errorf("RowBytes(%d) = %d, rows hold %d", rows, got, total)
	}
}

// TestSbtestGen checks the values the load's transactions write against
// oltp_common's shape.
func TestSbtestGen(t *testing.T) {
	const rows = 50
	g := NewSbtestGen(1, 2, rows)
	for range 1000 {
		if id := g.ID(); id < 1 || id > rows {
			t.Fatalf("ID() = %d, want 1..%d", id, rows)
		}
		c, pad := g.C(), g.Pad()
		if len(c) != 119 || len(pad) != 59 || strings.Count(c, "-") != 9 || strings.Count(pad, "-") != 4 {
			t.Fatalf("C() = %q, Pad() = %q, want 10 and 5 groups of 11 digits joined by '-'", c, pad)
		}
	}
}
