package sandbox

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// RootEnv names the environment variable that sets DefaultRoot.
const RootEnv = "ROWLIFT_SANDBOX_ROOT"

// memoryRoot is the tmpfs DefaultRoot prefers, and minMemoryFree the room it
// must have: a test run holds up to a dozen servers of 100-200 MB at once,
// and their templates.
const (
	memoryRoot    = "/dev/shm"
	minMemoryFree = 8 << 30
)

// DefaultRoot is where instances go when Options.Root is empty: $ROWLIFT_SANDBOX_ROOT;
// else under /dev/shm when it is a tmpfs with room, where the servers' fsyncs cost
// nothing, so tests measure rowlift rather than the disk (a kill -9 of a server still
// loses only what it had not written); else under the system temp dir.
func DefaultRoot() string {
	if root := os.Getenv(RootEnv); root != "" {
		return root
	}
	var fs unix.Statfs_t
	if unix.Statfs(memoryRoot, &fs) == nil && fs.Type == unix.TMPFS_MAGIC && fs.Bavail*uint64(fs.Bsize) >= minMemoryFree &&
		unix.Access(memoryRoot, unix.W_OK) == nil {
		return filepath.Join(memoryRoot, "rowlift-sandbox")
	}
	return DiskRoot()
}

// DiskRoot is the root under the system temp dir, for a server whose files
// must be on a block device (a test that throttles the disk's reads).
func DiskRoot() string { return filepath.Join(os.TempDir(), "rowlift-sandbox") }
