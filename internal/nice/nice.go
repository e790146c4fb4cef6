// Package nice lowers the CPU priority of a process, so that rowlift's roles
// yield the CPU to a database server on the same host.
package nice

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// Max is the lowest priority: an unprivileged process may only raise its
// nice value, up to this.
const Max = 19

// Check refuses a value Set cannot give, saying which it can.
func Check(n int) error {
	if n < 0 || n > Max {
		return fmt.Errorf("%d is out of range: 0 (normal priority) to %d (lowest)", n, Max)
	}
	return nil
}

// maxPasses bounds the listings of a process's threads: a process that keeps
// starting threads (a server's pool) would never leave a pass with none new,
// though every thread that a set one starts is set already.
const maxPasses = 8

// Set gives every thread of process pid the nice value n (0 to Max). Linux
// keeps a nice value per thread, and a thread starts with its creator's, so
// the threads are listed again until a pass finds none it has not set: a
// thread started meanwhile by one not yet set would keep the old value.
func Set(pid, n int) error {
	if err := Check(n); err != nil {
		return fmt.Errorf("nice value %w", err)
	}
	done := map[int]bool{}
	for range maxPasses {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return fmt.Errorf("set nice value of process %d: %w", pid, err)
		}
		fresh := false
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil || done[tid] {
				continue
			}
			if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, n); err != nil {
				if errors.Is(err, syscall.ESRCH) {
					continue // the thread has exited
				}
				return fmt.Errorf("set nice value of thread %d of process %d to %d: %w", tid, pid, n, err)
			}
			done[tid], fresh = true, true
		}
		if !fresh {
			return nil
		}
	}
	return nil
}
