package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

const (
	// ownerFile holds the pid of the process that created an instance or build dir.
	ownerFile = "owner.pid"
	// serverPidFile holds the pid of the instance's server process.
	serverPidFile = "server.pid"
)

// reapOrphans removes instance and template-build directories whose owning process
// has died without cleaning up (a test binary killed on timeout, a crashed demo),
// killing their servers first. It never touches a live owner's directories.
func reapOrphans(root string) {
	for _, pattern := range []string{"inst-*", "build-*"} {
		dirs, _ := filepath.Glob(filepath.Join(root, pattern))
		for _, dir := range dirs {
			owner, ok := readPid(filepath.Join(dir, ownerFile))
			if !ok || alive(owner) {
				continue
			}
			if pid, ok := readPid(filepath.Join(dir, serverPidFile)); ok && alive(pid) && servesDir(pid, dir) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			_ = os.RemoveAll(dir)
		}
	}
}

func readPid(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid, err == nil && pid > 0
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// servesDir guards against pid reuse: the process must be a server whose command
// line names the directory.
func servesDir(pid int, dir string) bool {
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	return err == nil && strings.Contains(string(cmdline), dir)
}
