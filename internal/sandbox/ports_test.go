package sandbox

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFreePortHandsOutEachPortOnce: a thousand ports in one process, each
// free when handed out, none twice and none where the kernel picks ports
// itself. A listen on port 0 repeats a port within a few hundred calls.
func TestFreePortHandsOutEachPortOnce(t *testing.T) {
	lo, hi := ephemeralRange()
	seen := map[int]bool{}
	for range 1000 {
		port, err := FreePort()
		require.NoError(t, err)
		require.False(t, seen[port], "port %d handed out twice", port)
		seen[port] = true
		require.True(t, port < lo || port > hi, "port %d is in the ephemeral range %d-%d", port, lo, hi)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		require.NoError(t, err, "port %d was handed out as free", port)
		l.Close()
	}
}

// TestFreePortSkipsPortsInUse: a port something listens on is not handed out.
func TestFreePortSkipsPortsInUse(t *testing.T) {
	// Start where the rest of this process's block has room for the test.
	port := 0
	for range 2 * portBlockSize {
		p, err := FreePort()
		require.NoError(t, err)
		ports.mu.Lock()
		room := ports.end - ports.next
		ports.mu.Unlock()
		if room >= 14 {
			port = p
			break
		}
	}
	require.NotZero(t, port, "FreePort hands out ports from blocks")
	// The next ports of this process's block, taken by someone else.
	var held []net.Listener
	for p := port + 1; p < port+4; p++ {
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
			held = append(held, l)
		}
	}
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	require.Len(t, held, 3)
	for range 10 {
		p, err := FreePort()
		require.NoError(t, err)
		for _, l := range held {
			require.NotEqual(t, l.Addr().(*net.TCPAddr).Port, p, "a port in use was handed out")
		}
	}
}

// TestFreePortAcrossProcesses: processes that take ports at the same time
// (the packages of a go test run, the runs of a stress) never get the same
// one.
func TestFreePortAcrossProcesses(t *testing.T) {
	const n = 300
	mine := map[int]bool{}
	for range n {
		port, err := FreePort()
		require.NoError(t, err)
		mine[port] = true
	}
	var children []*exec.Cmd
	var stdins []io.WriteCloser
	owner := map[int]string{}
	for c := range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFreePortChildProcess$")
		cmd.Env = append(os.Environ(), portsChildEnv+"="+strconv.Itoa(n))
		stdin, err := cmd.StdinPipe()
		require.NoError(t, err)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		children, stdins = append(children, cmd), append(stdins, stdin)
		// A child keeps its ports (its blocks' locks) until its stdin closes,
		// so both children hold theirs at once.
		sc := bufio.NewScanner(stdout)
		for range n {
			require.True(t, sc.Scan(), "child %d printed fewer than %d ports: %v", c, n, sc.Err())
			port, err := strconv.Atoi(sc.Text())
			require.NoError(t, err, "child %d printed %q", c, sc.Text())
			require.False(t, mine[port], "child %d got port %d, which this process has", c, port)
			if o, ok := owner[port]; ok {
				t.Fatalf("child %d got port %d, which %s has", c, port, o)
			}
			owner[port] = fmt.Sprintf("child %d", c)
		}
	}
	for i, cmd := range children {
		stdins[i].Close()
		require.NoError(t, cmd.Wait())
	}
}

// portsChildEnv makes TestFreePortChildProcess the child of
// TestFreePortAcrossProcesses: the number of ports to print.
const portsChildEnv = "ROWLIFT_PORTS_CHILD"

// TestFreePortChildProcess runs only as TestFreePortAcrossProcesses's child:
// it prints the ports it is handed, one per line, and holds them until its
// stdin closes.
func TestFreePortChildProcess(t *testing.T) {
	v := os.Getenv(portsChildEnv)
	if v == "" {
		return
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err)
	for range n {
		port, err := FreePort()
		require.NoError(t, err)
		fmt.Println(port)
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// TestPortSpace: the blocks come from below the ephemeral range when it leaves
// room, from above it when only that side does, and from nowhere (the
// kernel's ports, never twice) when neither does.
func TestPortSpace(t *testing.T) {
	for _, c := range []struct {
		ephLo, ephHi int
		lo, hi       int
		ok           bool
	}{
		{32768, 60999, 10000, 32767, true},
		{11000, 60999, 10000, 10999, true},
		{10999, 60999, 61000, 65535, true},
		{1024, 50000, 50001, 65535, true},
		{1024, 64535, 64536, 65535, true},
		{1024, 64536, 0, 0, false},
		{1024, 65535, 0, 0, false},
		{10500, 65000, 0, 0, false},
	} {
		lo, hi, ok := portSpace(c.ephLo, c.ephHi)
		require.Equal(t, []any{c.lo, c.hi, c.ok}, []any{lo, hi, ok}, "ephemeral range %d-%d", c.ephLo, c.ephHi)
	}
}

// TestKernelPortNeverRepeats: on a machine with no room outside the ephemeral
// range, the kernel's ports, each handed out once.
func TestKernelPortNeverRepeats(t *testing.T) {
	ports.mu.Lock()
	defer ports.mu.Unlock()
	seen := map[int]bool{}
	for range 1000 {
		port, err := kernelPort()
		require.NoError(t, err)
		require.False(t, seen[port], "port %d handed out twice", port)
		seen[port] = true
	}
}
