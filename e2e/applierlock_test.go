package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/state"
)

// TestSecondApplierStandsBy: two appliers on one target never both apply; the
// second waits on the target's applier lock and takes over when the first dies.
func TestSecondApplierStandsBy(t *testing.T) {
	e := newEnv(t)
	e.sourceExec("CREATE DATABASE two", "CREATE TABLE two.a (id INT PRIMARY KEY)", "INSERT INTO two.a VALUES (1), (2)",
		"CREATE TABLE two.b (id INT PRIMARY KEY)", "INSERT INTO two.b VALUES (3)")
	e.startStreamer()
	first := e.startApplier()
	e.waitFor("the first applier to take the lock", 30*time.Second, func() (bool, string) {
		return strings.Contains(first.logText(), "holding the applier lock"), "no lock message yet"
	})
	second := startProc(t, "applier-2", nil, "applier", "--target-dsn", e.dst.DSN(""), "--poll-interval", "50ms")
	e.waitFor("the second applier to stand by", 30*time.Second, func() (bool, string) {
		return strings.Contains(second.logText(), "standing by"), second.logText()
	})

	e.start(e.workflow("one", "two", "a"))
	e.waitState("one", state.Running, 30*time.Second)
	require.NotContains(t, second.logText(), "stream open", "the stand-by applier must not apply")

	first.kill()
	e.start(e.workflow("other", "two", "b"))
	e.waitState("other", state.Running, 30*time.Second)
	require.Contains(t, second.logText(), "holding the applier lock")
	require.Equal(t, 2, count(t, e.dstDB, "two.a"))
	require.Equal(t, 1, count(t, e.dstDB, "two.b"))
}
