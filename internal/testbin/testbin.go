// Package testbin builds the rowlift binary for the test packages that run it
// as an operator would (e2e, deploy), once per test binary.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Main is a TestMain: it builds the command at pkg (a path relative to the
// test package, e.g. "../cmd/rowlift") into a temporary directory, sets *bin
// to it, runs the tests and exits with their status.
func Main(m *testing.M, bin *string, pkg string) {
	dir, err := os.MkdirTemp("", "rowlift-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*bin = filepath.Join(dir, "rowlift")
	build := exec.Command("go", "build", "-o", *bin, pkg)
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build rowlift:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
