// Package reloadfile keeps a value parsed from files current while the files
// change under a running process, as Kubernetes rotates a mounted Secret: it
// swaps a symlink to a new directory, so the paths stay and what they name
// changes. Every Get stats the files (a few syscalls, cheap enough for each TLS
// handshake or RPC) and parses them again only when one changed. A parse that
// fails keeps the last good value and logs one error per change, so a half
// written rotation never takes a working process down.
package reloadfile

import (
	"os"
	"sync"

	"go.uber.org/zap"
)

// Value is a T parsed from a set of files, parsed again when they change.
type Value[T any] struct {
	what  string
	paths []string
	parse func() (T, error)
	log   *zap.Logger

	mu sync.Mutex
	// seen are the files as they were when last parsed, well or not: a failed
	// parse is not tried again until the files change once more.
	seen []os.FileInfo
	cur  T
}

// New parses the files once; that first parse must succeed. what names the
// value in log lines (e.g. "TLS files"); paths are the files parse reads.
func New[T any](what string, log *zap.Logger, parse func() (T, error), paths ...string) (*Value[T], error) {
	v := &Value[T]{what: what, paths: paths, parse: parse, log: log, seen: stat(paths)}
	cur, err := parse()
	if err != nil {
		return nil, err
	}
	v.cur = cur
	return v, nil
}

// Get returns the value of the files as they are now, or the last good one
// when they changed into something that does not parse.
func (v *Value[T]) Get() T {
	v.mu.Lock()
	defer v.mu.Unlock()
	now := stat(v.paths)
	if same(now, v.seen) {
		return v.cur
	}
	// Stamped before the parse: a change while it reads is seen on the next Get.
	v.seen = now
	next, err := v.parse()
	if err != nil {
		v.log.Error(v.what+" changed but cannot be loaded; keeping the previous ones until they are fixed",
			zap.Strings("files", v.paths), zap.Error(err))
		return v.cur
	}
	v.cur = next
	v.log.Info(v.what+" reloaded", zap.Strings("files", v.paths))
	return v.cur
}

// stat returns the files' stats, nil for one that cannot be read.
func stat(paths []string) []os.FileInfo {
	out := make([]os.FileInfo, len(paths))
	for i, p := range paths {
		out[i], _ = os.Stat(p) // a missing file is a change like any other; parse says what is wrong
	}
	return out
}

// same reports whether two stats of the files show the same contents: the
// same inode (a swapped symlink names a new one), mtime and size.
func same(a, b []os.FileInfo) bool {
	for i := range a {
		switch {
		case a[i] == nil || b[i] == nil:
			if a[i] != b[i] {
				return false
			}
		case !os.SameFile(a[i], b[i]) || !a[i].ModTime().Equal(b[i].ModTime()) || a[i].Size() != b[i].Size():
			return false
		}
	}
	return true
}
