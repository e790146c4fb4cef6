// Package streamertest runs a real streamer in the test's process, for tests of
// the parts that talk to one (the applier, the coordinator).
package streamertest

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/rowlift/rowlift/internal/grpcopt"
	"github.com/rowlift/rowlift/internal/sandbox"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/streamer"
)

// Serve runs a streamer for the source server on a loopback port until the
// test ends, and returns its address.
func Serve(t testing.TB, src *sandbox.Server) string {
	t.Helper()
	srv, err := streamer.New(streamer.Config{SourceDSN: src.DSN("")})
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer(grpcopt.ServerOptions(nil)...)
	rowliftv1.RegisterStreamerServer(gs, srv)
	go gs.Serve(lis) //nolint:errcheck // ends with Stop
	t.Cleanup(func() {
		gs.Stop()
		srv.Close()
	})
	return lis.Addr().String()
}
