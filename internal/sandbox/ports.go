package sandbox

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// The ports FreePort hands out. A port the kernel picks (a listen on port 0)
// is free only until it is closed: the kernel may pick it again, for the next
// caller of this process or another, or as the local port of a client's
// connection, before the server it was meant for binds it. The servers and
// rowlift processes of one test then fight for one port, and the loser's
// clients reach the winner (issue 29: a CLI got "unknown service
// rowlift.v1.Control" from a streamer). So FreePort takes its ports from
// outside the kernel's ephemeral range, where the kernel never picks one,
// in blocks that a process claims for its lifetime with a lock file, and it
// hands each port out once.
const (
	// portBlockSize is how many ports one claim gives a process.
	portBlockSize = 100
	// portFloor keeps the blocks above the ports well-known services use.
	portFloor = 10000
	// portCeiling is the last TCP port.
	portCeiling = 65535
)

var ports struct {
	mu sync.Mutex
	// next and end bound what is left of the block claimed last.
	next, end int
	// locks are the claimed blocks' lock files, held open (and so locked)
	// until the process exits.
	locks []*os.File
	// picked are the ports handed out when no block could be claimed.
	picked map[int]bool
}

// FreePort returns a TCP port on 127.0.0.1 that nothing listens on right now
// and that no other caller, in this process or another one, is handed, for
// servers and rowlift processes started by tests, benchmarks and the demo.
func FreePort() (int, error) {
	ports.mu.Lock()
	defer ports.mu.Unlock()
	for {
		if ports.next == ports.end {
			ok, err := claimPortBlock()
			if err != nil {
				return 0, err
			}
			if !ok {
				return kernelPort()
			}
		}
		port := ports.next
		ports.next++
		if listenable(port) {
			return port, nil
		}
	}
}

// claimPortBlock claims a block of ports no other process holds, outside the
// ephemeral range; it returns false when there is no room for one there.
func claimPortBlock() (bool, error) {
	lo, hi, ok := portSpace(ephemeralRange())
	if !ok {
		return false, nil
	}
	// One directory per user: another user's would not let us create files.
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("rowlift-ports-%d", os.Getuid()))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("find a free port: %w", err)
	}
	blocks := (hi - lo + 1) / portBlockSize
	first := rand.IntN(blocks)
	for i := range blocks {
		start := lo + (first+i)%blocks*portBlockSize
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(start)), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return false, fmt.Errorf("find a free port: %w", err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		ports.locks = append(ports.locks, f)
		ports.next, ports.end = start, start+portBlockSize
		return true, nil
	}
	return false, fmt.Errorf("find a free port: all %d blocks of %d ports in %d-%d are held by other processes (lock files in %s)",
		blocks, portBlockSize, lo, hi, dir)
}

// portSpace is the stretch of ports FreePort's blocks come from, given the
// kernel's ephemeral range: below it if that leaves room for ten blocks above
// portFloor, else above it; ok is false when neither side has room.
func portSpace(ephemeralLo, ephemeralHi int) (lo, hi int, ok bool) {
	const room = 10 * portBlockSize
	if ephemeralLo-portFloor >= room {
		return portFloor, ephemeralLo - 1, true
	}
	if portCeiling-ephemeralHi >= room {
		return max(ephemeralHi+1, portFloor), portCeiling, true
	}
	return 0, 0, false
}

// ephemeralRange is the kernel's range of ports it picks itself, or Linux's
// default when it cannot be read.
func ephemeralRange() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			l, errL := strconv.Atoi(f[0])
			h, errH := strconv.Atoi(f[1])
			if errL == nil && errH == nil && l <= h {
				return l, h
			}
		}
	}
	return 32768, 60999
}

// kernelPort is FreePort on a machine whose ephemeral range leaves no room:
// a port the kernel picks, never one this process handed out before.
func kernelPort() (int, error) {
	if ports.picked == nil {
		ports.picked = map[int]bool{}
	}
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !ports.picked[port] {
			ports.picked[port] = true
			return port, nil
		}
	}
}

// listenable reports whether nothing listens on 127.0.0.1:port (or on every
// address at port) right now.
func listenable(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
