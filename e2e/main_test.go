// Package e2e runs the rowlift binary as a user would, against real servers.
package e2e

import (
	"testing"

	"github.com/rowlift/rowlift/internal/testbin"
)

// rowliftBin is the binary under test, built once by TestMain.
var rowliftBin string

func TestMain(m *testing.M) { testbin.Main(m, &rowliftBin, "../cmd/rowlift") }
