package main

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMetricsListenTaken: every role refuses to start when its metrics address
// cannot be bound, and says which flag to change.
func TestMetricsListenTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	addr := taken.Addr().String()
	for role, args := range map[string][]string{
		"streamer":    {"--source-dsn", "root@tcp(127.0.0.1:1)/", "--listen", "127.0.0.1:0"},
		"applier":     {"--target-dsn", "root@tcp(127.0.0.1:1)/"},
		"coordinator": {"--target", "main=root@tcp(127.0.0.1:1)/", "--listen", "127.0.0.1:0"},
	} {
		_, err := runCLI(t, append([]string{role, "--metrics-listen", addr}, args...)...)
		require.ErrorContains(t, err, "--metrics-listen "+addr+": listen tcp "+addr+": bind: address already in use", role)
	}
}
