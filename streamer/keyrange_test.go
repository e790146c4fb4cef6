package streamer

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/grpcopt"
	"github.com/rowlift/rowlift/internal/keyrange"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/vindex"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// TestStreamKeyRange streams d.t under key range -80 (hash of k) through the
// Stream RPC of a real server: the copy sends exactly the source's rows in
// range, in chunks small enough that some are filtered out entirely; an
// UPDATE moving k out of the range arrives as a delete, one moving k into it
// as an insert, changes out of range not at all; a NULL k stops the stream
// with FailedPrecondition naming table, column and value.
func TestStreamKeyRange(t *testing.T) {
	srv := sandboxtest.Start(t, sandbox.Options{})
	admin := sandboxtest.Open(t, srv, "")
	sandboxtest.Exec(t, admin, "CREATE DATABASE d",
		"CREATE TABLE d.t (id INT PRIMARY KEY, k BIGINT NULL, v VARCHAR(20))",
		"INSERT INTO d.t WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 200) SELECT i, i, CONCAT('v', i) FROM s")
	_, client := serveStreamer(t, srv)

	half, err := keyrange.Parse("-80")
	require.NoError(t, err)
	inRange := func(k int64) bool {
		id, err := vindex.Hash.ID([]byte(strconv.FormatInt(k, 10)))
		require.NoError(t, err)
		return half.Contains(id)
	}
	want := map[string]bool{}
	for k := int64(1); k <= 200; k++ {
		if inRange(k) {
			want[strconv.FormatInt(k, 10)] = true
		}
	}
	require.NotEmpty(t, want)
	require.Less(t, len(want), 200)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stream, err := client.Stream(ctx, &rowliftv1.StreamRequest{Protocol: rowcodec.StreamProtocol,
		Workflow: "wf", Database: "d", KeyRange: &rowliftv1.KeyRange{End: []byte{0x80}},
		Tables:  []*rowliftv1.TableRequest{{Name: "t", ShardingColumn: "k"}},
		Options: &rowliftv1.StreamOptions{ChunkRows: 3, PacketBytes: 1, HeartbeatMs: 50},
	})
	require.NoError(t, err)

	// The copy: every row in range once, none out of range, the table done.
	copied := map[string]bool{}
	emptyParts := 0
	for done := false; !done; {
		resp, err := stream.Recv()
		require.NoError(t, err)
		for _, item := range resp.GetItems() {
			c := item.GetChunk()
			if c == nil {
				continue
			}
			if c.GetRowCount() == 0 && c.GetLastPk() != nil {
				emptyParts++
			}
			for _, r := range rowsOf(t, c) {
				vals, err := rowcodec.Values(nil, r)
				require.NoError(t, err)
				require.False(t, copied[string(vals[0])], "row %s copied twice", vals[0])
				copied[string(vals[0])] = true
			}
			done = done || c.GetTableDone()
		}
	}
	require.Equal(t, want, copied)
	require.Positive(t, emptyParts, "some parts had every row filtered out, and still moved the copy on")

	// Pick a row in range, one out of it, and sharding values on either side.
	var idIn, idOut, kIn, kOut int64
	for k := int64(1); idIn == 0 || idOut == 0; k++ {
		if inRange(k) && idIn == 0 {
			idIn = k
		} else if !inRange(k) && idOut == 0 {
			idOut = k
		}
	}
	for k := int64(1000); kIn == 0 || kOut == 0; k++ {
		if inRange(k) && kIn == 0 {
			kIn = k
		} else if !inRange(k) && kOut == 0 {
			kOut = k
		}
	}
	sandboxtest.Exec(t, admin,
		"UPDATE d.t SET v = 'quiet' WHERE id = "+strconv.FormatInt(idOut, 10),  // out of range, stays out: not sent
		"INSERT INTO d.t VALUES (500, "+strconv.FormatInt(kOut, 10)+", 'out')", // out of range: not sent
		"UPDATE d.t SET k = "+strconv.FormatInt(kOut, 10)+" WHERE id = "+strconv.FormatInt(idIn, 10),
		"UPDATE d.t SET k = "+strconv.FormatInt(kIn, 10)+" WHERE id = "+strconv.FormatInt(idOut, 10))
	var changes []string
	for len(changes) < 2 {
		resp, err := stream.Recv()
		require.NoError(t, err)
		for _, item := range resp.GetItems() {
			for _, ev := range item.GetTransaction().GetEvents() {
				require.Equal(t, "t", ev.GetTable())
				for _, ch := range ev.GetChanges() {
					changes = append(changes, describeChange(t, ch))
				}
			}
		}
	}
	require.Equal(t, []string{
		"delete " + strconv.FormatInt(idIn, 10),
		"insert " + strconv.FormatInt(idOut, 10) + " k=" + strconv.FormatInt(kIn, 10),
	}, changes)

	// The NULL sharding key stops the stream. Written only now: the stream's
	// error would overtake changes still queued to be sent.
	sandboxtest.Exec(t, admin, "INSERT INTO d.t VALUES (501, NULL, 'no shard')")
	for {
		_, err := stream.Recv()
		if err == nil {
			continue
		}
		require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
		require.ErrorContains(t, err, "table t: sharding column k has value NULL, which has no keyspace ID")
		break
	}
}

// serveStreamer serves a streamer of srv's server over gRPC on a local port
// until the test ends.
func serveStreamer(t *testing.T, srv *sandbox.Server) (*Server, rowliftv1.StreamerClient) {
	s, err := New(Config{SourceDSN: srv.DSN(""), Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer(grpcopt.ServerOptions(nil)...)
	rowliftv1.RegisterStreamerServer(gs, s)
	go gs.Serve(lis) //nolint:errcheck // ends with Stop
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpcopt.DialOptions(nil)...)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return s, rowliftv1.NewStreamerClient(conn)
}

func describeChange(t *testing.T, ch *rowliftv1.RowChange) string {
	row := func(r *rowliftv1.Row) [][]byte {
		vals, err := rowcodec.Values(nil, r)
		require.NoError(t, err)
		return vals
	}
	switch {
	case ch.GetBefore() != nil && ch.GetAfter() != nil:
		return "update " + string(row(ch.GetBefore())[0])
	case ch.GetBefore() != nil:
		return "delete " + string(row(ch.GetBefore())[0])
	}
	after := row(ch.GetAfter())
	return "insert " + string(after[0]) + " k=" + string(after[1])
}

// TestStreamNumericRangeInSelect: under numeric the key range goes into the
// chunk SELECT as a condition on the sharding column (here the whole key,
// signed, with negative values, whose keyspace IDs are from 0x80… up): each
// of four streams copies exactly the rows of its range, and the four
// together every row once.
func TestStreamNumericRangeInSelect(t *testing.T) {
	srv := sandboxtest.Start(t, sandbox.Options{})
	admin := sandboxtest.Open(t, srv, "")
	sandboxtest.Exec(t, admin, "CREATE DATABASE d", "CREATE TABLE d.n (k BIGINT PRIMARY KEY, v VARCHAR(20))",
		"INSERT INTO d.n WITH RECURSIVE s(i) AS (SELECT -300 UNION ALL SELECT i + 1 FROM s WHERE i < 300) SELECT i * 7, 'v' FROM s",
		"INSERT INTO d.n VALUES (-9223372036854775808, 'min'), (9223372036854775807, 'max'), (4611686018427387904, '0x40'), "+
			"(-4611686018427387904, '0xc0'), (4611686018427387903, 'below 0x40')")
	_, client := serveStreamer(t, srv)
	rowsRead := func() int64 {
		var name string
		var v int64
		require.NoError(t, admin.QueryRow("SHOW GLOBAL STATUS LIKE 'Rows_read'").Scan(&name, &v))
		return v
	}
	var n int
	require.NoError(t, admin.QueryRow("SELECT COUNT(*) FROM d.n").Scan(&n))
	before := rowsRead()
	seen := map[string]int{}
	for _, kr := range []string{"-40", "40-80", "80-c0", "c0-"} {
		r, err := keyrange.Parse(kr)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		stream, err := client.Stream(ctx, &rowliftv1.StreamRequest{Protocol: rowcodec.StreamProtocol,
			Workflow: "num", Database: "d", KeyRange: &rowliftv1.KeyRange{Start: r.Start, End: r.End},
			Tables:  []*rowliftv1.TableRequest{{Name: "n", ShardingColumn: "k", ShardingFunction: "numeric"}},
			Options: &rowliftv1.StreamOptions{ChunkRows: 50, HeartbeatMs: 50},
		})
		require.NoError(t, err)
		for done := false; !done; {
			resp, err := stream.Recv()
			require.NoError(t, err)
			for _, item := range resp.GetItems() {
				c := item.GetChunk()
				for _, row := range rowsOf(t, c) {
					vals, err := rowcodec.Values(nil, row)
					require.NoError(t, err)
					id, err := vindex.Numeric.ID(vals[0])
					require.NoError(t, err)
					require.True(t, r.Contains(id), "stream %s copied k=%s", kr, vals[0])
					seen[string(vals[0])]++
				}
				done = done || c.GetTableDone()
			}
		}
		cancel()
	}
	require.Len(t, seen, n, "every row reached a stream")
	// One after another, the streams share no read: filtering would read the
	// table four times, the condition on the key reads each row about once.
	require.Less(t, rowsRead()-before, int64(2*n), "source rows read for %d rows", n)
	for k, times := range seen {
		require.Equal(t, 1, times, "k=%s", k)
	}
}
