// Package nicetest reads the nice values tests expect nice.Set to leave.
package nicetest

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Threads returns the nice value of every thread of process pid, by thread
// id, as /proc shows them: Linux keeps one per thread.
func Threads(t testing.TB, pid int) map[int]int {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	require.NoError(t, err)
	out := map[int]int{}
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		require.NoError(t, err)
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
		if os.IsNotExist(err) {
			continue // the thread has exited
		}
		require.NoError(t, err)
		// The fields after the command's closing parenthesis start at the
		// 3rd (state); nice is the 19th.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
		n, err := strconv.Atoi(fields[19-3])
		require.NoError(t, err)
		out[tid] = n
	}
	return out
}
