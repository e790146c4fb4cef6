package benchkit

import (
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
