package applier

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/rowlift/rowlift/internal/rowcodec"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// fakeStream yields its responses in turn.
type fakeStream struct {
	grpc.ClientStream
	responses []*rowliftv1.StreamResponse
}

func (f *fakeStream) Recv() (*rowliftv1.StreamResponse, error) {
	r := f.responses[0]
	f.responses = f.responses[1:]
	return r, nil
}

// TestRecvRefusesAnotherProtocol: a response of another stream protocol (a
// streamer of another rowlift version, whose chunks this applier would read
// as empty) fails the stream, which is retried, instead of being applied.
func TestRecvRefusesAnotherProtocol(t *testing.T) {
	c := &controller{source: &rowliftv1.SourceShard{Name: "main", StreamerAddress: "streamer:7000"}}
	chunk := &rowliftv1.StreamItem{Item: &rowliftv1.StreamItem_Chunk{Chunk: &rowliftv1.Chunk{Table: "t"}}}
	for _, protocol := range []int32{0, rowcodec.StreamProtocol + 1} {
		_, err := c.recv(&fakeStream{responses: []*rowliftv1.StreamResponse{{Protocol: protocol, Items: []*rowliftv1.StreamItem{chunk}}}})
		require.ErrorContains(t, err, "streamer streamer:7000 (source main) speaks stream protocol")
		require.ErrorContains(t, err, "run the same rowlift version on both")
		require.False(t, IsPermanent(err), "retried until both sides are upgraded")
	}
	msg, err := c.recv(&fakeStream{responses: []*rowliftv1.StreamResponse{{Protocol: rowcodec.StreamProtocol, Items: []*rowliftv1.StreamItem{chunk}}}})
	require.NoError(t, err)
	require.Len(t, msg.GetItems(), 1)
}

// TestRecheckStarted: rows another stream of the workflow committed, with
// its copy state, after the started copies were read pass on a second
// reading; rows no stream started stop the stream.
func TestRecheckStarted(t *testing.T) {
	hasRows := permanent("target table d.t %w", errTargetHasRows)
	check := func(started map[string]state.TableCopy) (string, error) {
		if _, ok := started["t"]; !ok {
			return "", hasRows
		}
		return "ok", nil
	}
	reads := 0
	late := func() (map[string]state.TableCopy, error) {
		reads++
		if reads == 1 {
			return map[string]state.TableCopy{}, nil
		}
		return map[string]state.TableCopy{"t": {RowsCopied: 10}}, nil
	}
	got, err := recheckStarted(late, check)
	require.NoError(t, err)
	require.Equal(t, "ok", got)
	require.Equal(t, 2, reads)

	never := func() (map[string]state.TableCopy, error) {
		return map[string]state.TableCopy{"other": {Done: true}}, nil
	}
	_, err = recheckStarted(never, check)
	require.ErrorIs(t, err, errTargetHasRows)
	require.True(t, IsPermanent(err), "rows nobody copied stop the workflow")

	broken := errors.New("state unreadable")
	failing := func() (map[string]state.TableCopy, error) { return nil, broken }
	_, err = recheckStarted(failing, check)
	require.ErrorIs(t, err, broken)
}
