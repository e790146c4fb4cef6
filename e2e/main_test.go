// Package e2e runs the rowlift binary as a user would, against real servers.
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// rowliftBin is the binary under test, built once by TestMain.
var rowliftBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rowlift-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rowliftBin = filepath.Join(dir, "rowlift")
	build := exec.Command("go", "build", "-o", rowliftBin, "../cmd/rowlift")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build rowlift:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
