package main

import (
	"strings"
	"testing"
)

// TestMydumperMissing checks that (e) without mydumper fails and says what to run.
func TestMydumperMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := mydumperTool("mydumper")
	if err == nil || !strings.Contains(err.Error(), "make bench-setup") {
		t.Fatalf("mydumperTool with no mydumper on PATH = %v, want an error naming `make bench-setup`", err)
	}
	t.Log(err)
}
