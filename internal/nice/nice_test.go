package nice

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/nice/nicetest"
)

// TestSetEveryThread: every thread of a running process takes the value,
// and the threads it starts later inherit it.
func TestSetEveryThread(t *testing.T) {
	// The test binary itself, in a child that starts an OS thread every few
	// milliseconds (see TestMain).
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "ROWLIFT_NICE_TEST_CHILD=1")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	require.NoError(t, Set(pid, 7))
	set := nicetest.Threads(t, pid)
	time.Sleep(100 * time.Millisecond)
	later := nicetest.Threads(t, pid)
	require.Greater(t, len(later), len(set), "the child started threads after the value was set")
	for tid, n := range later {
		require.Equal(t, 7, n, "thread %d", tid)
	}
	require.NoError(t, Set(pid, 12), "raising it again is allowed")
	for tid, n := range nicetest.Threads(t, pid) {
		require.Equal(t, 12, n, "thread %d", tid)
	}
}

// TestSetOutOfRange: a value that would ask for more priority, or none that
// exists, is refused with what is allowed.
func TestSetOutOfRange(t *testing.T) {
	for _, n := range []int{-1, 20} {
		err := Set(os.Getpid(), n)
		require.ErrorContains(t, err, fmt.Sprintf("nice value %d is out of range: 0 (normal priority) to 19 (lowest)", n))
	}
}

func TestMain(m *testing.M) {
	if os.Getenv("ROWLIFT_NICE_TEST_CHILD") != "" {
		// Each goroutine holds an OS thread of its own, so the runtime
		// starts a new one for the next: until the test kills the child.
		for {
			go func() {
				runtime.LockOSThread()
				time.Sleep(time.Hour)
			}()
			time.Sleep(5 * time.Millisecond)
		}
	}
	os.Exit(m.Run())
}
