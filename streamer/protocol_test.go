package streamer

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// TestStreamProtocol: a stream request of another protocol (an applier of
// another rowlift version) is refused before anything is sent, with
// Unavailable so the applier retries until both sides match; one of this
// protocol gets every response marked with it, the first one included.
func TestStreamProtocol(t *testing.T) {
	srv := sandboxtest.Start(t, sandbox.Options{})
	admin := sandboxtest.Open(t, srv, "")
	sandboxtest.Exec(t, admin, "CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY)", "INSERT INTO d.t VALUES (1), (2), (3)")
	_, client := serveStreamer(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := func(protocol int32) *rowliftv1.StreamRequest {
		return &rowliftv1.StreamRequest{Protocol: protocol, Workflow: "wf", Database: "d",
			Tables: []*rowliftv1.TableRequest{{Name: "t"}}, Options: &rowliftv1.StreamOptions{HeartbeatMs: 50}}
	}

	for _, protocol := range []int32{0, rowcodec.StreamProtocol + 1} {
		stream, err := client.Stream(ctx, req(protocol))
		require.NoError(t, err)
		_, err = stream.Recv()
		require.Equal(t, codes.Unavailable, status.Code(err), "protocol %d", protocol)
		require.ErrorContains(t, err, "run the same rowlift version on both")
	}

	stream, err := client.Stream(ctx, req(rowcodec.StreamProtocol))
	require.NoError(t, err)
	rows := 0
	for rows < 3 {
		resp, err := stream.Recv()
		require.NoError(t, err)
		require.EqualValues(t, rowcodec.StreamProtocol, resp.GetProtocol())
		for _, item := range resp.GetItems() {
			rows += int(item.GetChunk().GetRowCount())
		}
	}
}
