package streamer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/keyrange"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/vindex"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

func TestChunkCacheKeepsAChunkUntilEveryStreamTookIt(t *testing.T) {
	c := newChunkCache()
	a, b := c.join("g", 1<<30), c.join("g", 1<<30)
	ch, lead := a.acquire(nil)
	require.True(t, lead)
	again, lead := b.acquire(nil)
	require.False(t, lead, "the second stream waits for the first one's read")
	require.Same(t, ch, again)
	a.finish(ch, nil)
	require.NoError(t, again.wait(context.Background()))
	a.took(ch)
	require.Len(t, c.groups["g"].chunks, 1, "b has yet to take it")
	other, lead := a.acquire(nil)
	require.True(t, lead, "a stream that took a chunk is not handed it again")
	require.NotSame(t, ch, other)
	b.took(ch)
	require.Equal(t, []*sharedChunk{other}, c.groups["g"].chunks, "taken by both, dropped")
	a.finish(other, nil)
	a.took(other)
	b.leave()
	require.Empty(t, c.groups["g"].chunks, "the only stream left took it")
	a.leave()
	require.Empty(t, c.groups)
}

// readChunk is a chunk a leader read, of size bytes of rows.
func readChunk(t *testing.T, m *chunkMember, start string, size int) *sharedChunk {
	ch, lead := m.acquire([][]byte{[]byte(start)})
	require.True(t, lead, "chunk %s", start)
	ch.rows = make([]byte, size)
	m.finish(ch, nil)
	return ch
}

func TestChunkCacheHoldsAtMostItsBytes(t *testing.T) {
	c := newChunkCache()
	a, b := c.join("g", 100), c.join("g", 1<<30)
	var chunks []*sharedChunk
	for i, size := range []int{40, 40, 20, 30} {
		ch := readChunk(t, a, strconv.Itoa(i), size)
		a.took(ch)
		chunks = append(chunks, ch)
	}
	g := c.groups["g"]
	require.Equal(t, chunks[1:], g.chunks, "the oldest went once the group passed its 100 bytes, though b never took it")
	require.EqualValues(t, 90, g.bytes)
	_, lead := b.acquire([][]byte{[]byte("0")})
	require.True(t, lead, "a stream that fell behind reads for itself")
	ch, lead := b.acquire([][]byte{[]byte("2")})
	require.False(t, lead)
	require.Same(t, chunks[2], ch)

	wide := readChunk(t, a, "wide", 500)
	require.Equal(t, []*sharedChunk{g.chunks[0], wide}, g.chunks, "a chunk above the limit stays alone with the one b reads")
	require.Zero(t, g.chunks[0].size, "b's chunk is still being read: it counts nothing and stays")
	require.EqualValues(t, 500, g.bytes)
	b.took(wide)
	a.took(wide)
	require.Zero(t, g.bytes, "taken by both, dropped")
}

func TestChunkCacheCountsBytesThroughEveryExit(t *testing.T) {
	c := newChunkCache()
	a, b := c.join("g", 1000), c.join("g", 1000)
	g := c.groups["g"]
	x := readChunk(t, a, "x", 10)
	y := readChunk(t, a, "y", 20)
	failed, _ := a.acquire([][]byte{[]byte("z")})
	a.finish(failed, context.Canceled)
	require.EqualValues(t, 30, g.bytes, "a failed read counts nothing")
	a.took(x)
	b.took(x)
	require.EqualValues(t, 20, g.bytes, "taken by all")
	b.took(y)
	a.leave()
	require.EqualValues(t, 0, g.bytes, "taken by the only member left")
	require.Empty(t, g.chunks)
}

func TestChunkCacheFailedReadLeavesTheGroup(t *testing.T) {
	c := newChunkCache()
	a, b := c.join("g", 1<<30), c.join("g", 1<<30)
	ch, _ := a.acquire(nil)
	waiter, lead := b.acquire(nil)
	require.False(t, lead)
	a.finish(ch, context.Canceled)
	a.took(ch)
	a.leave()
	require.ErrorIs(t, waiter.wait(context.Background()), context.Canceled)
	_, lead = b.acquire(nil)
	require.True(t, lead, "the next stream asking reads the chunk")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	pending, _ := c.join("h", 1<<30).acquire(nil)
	require.ErrorIs(t, pending.wait(ctx), context.Canceled, "a waiter cancelled does not wait for the read")
}

func TestEncodeKeyTellsValuesApart(t *testing.T) {
	keys := [][][]byte{nil, {nil}, {{}}, {[]byte("a")}, {[]byte("a"), nil}, {[]byte("a"), {}}, {[]byte("1:a")}, {[]byte("1"), []byte("a")}}
	seen := map[string]int{}
	for i, k := range keys {
		e := encodeKey(k)
		j, dup := seen[e]
		require.False(t, dup, "keys %d and %d encode alike: %q", i, j, e)
		seen[e] = i
	}
}

// quarters are the key ranges of a split into four.
var quarters = []string{"-40", "40-80", "80-c0", "c0-"}

// reshardSource starts a server with d.t (id INT PRIMARY KEY, v) holding rows
// 1..n and serves a streamer of it.
func reshardSource(t *testing.T, n int) (*sql.DB, *Server, rowliftv1.StreamerClient) {
	srv := sandboxtest.Start(t, sandbox.Options{})
	admin := sandboxtest.Open(t, srv, "")
	sandboxtest.Exec(t, admin, "CREATE DATABASE d",
		"CREATE TABLE d.t (id INT PRIMARY KEY, v VARCHAR(40))",
		fmt.Sprintf("INSERT INTO d.t WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < %d) "+
			"SELECT i, CONCAT('v', i) FROM s", n))
	s, client := serveStreamer(t, srv)
	return admin, s, client
}

// shard is one target of the split, as the items of its stream build it: it
// fails on anything a target would count as divergence.
type shard struct {
	kr     keyrange.Range
	stream grpc.ServerStreamingClient[rowliftv1.StreamResponse]
	rows   map[string]string
	// copied: the table's copy is done; throttled: the copy waits at its gate.
	copied, throttled bool
	pos               *gtid.Set
}

func (s *shard) in(id []byte) bool {
	ksid, err := vindex.Hash.ID(id)
	return err == nil && s.kr.Contains(ksid)
}

// recv receives one message and applies its items.
func (s *shard) recv() error {
	resp, err := s.stream.Recv()
	if err != nil {
		return err
	}
	for _, item := range resp.GetItems() {
		if err := s.apply(item); err != nil {
			return fmt.Errorf("shard %s: %w", s.kr, err)
		}
	}
	return nil
}

func (s *shard) apply(item *rowliftv1.StreamItem) error {
	values := func(r *rowliftv1.Row) (string, string, error) {
		vals, err := rowcodec.Values(nil, r)
		if err != nil {
			return "", "", err
		}
		if !s.in(vals[0]) {
			return "", "", fmt.Errorf("row %s is out of range", vals[0])
		}
		return string(vals[0]), string(vals[1]), nil
	}
	setPos := func(text string) error {
		if text == "" {
			return nil
		}
		set, err := gtid.Parse(text)
		if err == nil {
			s.pos = set
		}
		return err
	}
	switch {
	case item.GetChunk() != nil:
		rows := rowcodec.ReadRows(item.GetChunk().GetPackedRows())
		for rows.Next() {
			vals := rows.Values()
			if !s.in(vals[0]) {
				return fmt.Errorf("row %s is out of range", vals[0])
			}
			id := string(vals[0])
			if _, dup := s.rows[id]; dup {
				return fmt.Errorf("chunk copies row %s, which the shard has", id)
			}
			s.rows[id] = string(vals[1])
		}
		if err := rows.Err(); err != nil {
			return err
		}
		s.copied = s.copied || item.GetChunk().GetTableDone()
	case item.GetTransaction() != nil:
		trx := item.GetTransaction()
		for _, ev := range trx.GetEvents() {
			for _, ch := range ev.GetChanges() {
				if ch.GetBefore() != nil {
					id, v, err := values(ch.GetBefore())
					if err != nil {
						return err
					}
					if got, ok := s.rows[id]; !ok || got != v {
						return fmt.Errorf("trx %s: row %s is %q on the shard, the source had %q", trx.GetGtid(), id, got, v)
					}
					delete(s.rows, id)
				}
				if ch.GetAfter() != nil {
					id, v, err := values(ch.GetAfter())
					if err != nil {
						return err
					}
					if _, dup := s.rows[id]; dup {
						return fmt.Errorf("trx %s: inserts row %s, which the shard has", trx.GetGtid(), id)
					}
					s.rows[id] = v
				}
			}
		}
		return setPos(trx.GetPosition().GetGtidSet())
	case item.GetHeartbeat() != nil:
		s.throttled = item.GetHeartbeat().GetThrottled() != ""
		return setPos(item.GetHeartbeat().GetPosition().GetGtidSet())
	}
	return nil
}

// openShards opens the four streams of a split, the first one under first
// and the others under ctx, with their copies held at the throttle gate, then
// lets them go at once, as a reshard's streams start together.
func openShards(ctx, first context.Context, t *testing.T, s *Server, client rowliftv1.StreamerClient, chunkRows int64) []*shard {
	hold := func(reason string) {
		_, err := s.Throttle(ctx, &rowliftv1.ThrottleRequest{Workflow: "split", Reason: reason, TtlMs: 600000})
		require.NoError(t, err)
	}
	hold("the test starts the streams together")
	var shards []*shard
	for i, q := range quarters {
		kr, err := keyrange.Parse(q)
		require.NoError(t, err)
		streamCtx := ctx
		if i == 0 {
			streamCtx = first
		}
		stream, err := client.Stream(streamCtx, &rowliftv1.StreamRequest{Protocol: rowcodec.StreamProtocol,
			Workflow: "split", Database: "d", KeyRange: &rowliftv1.KeyRange{Start: kr.Start, End: kr.End},
			Tables:  []*rowliftv1.TableRequest{{Name: "t", ShardingColumn: "id"}},
			Options: &rowliftv1.StreamOptions{ChunkRows: chunkRows, PacketBytes: 512, HeartbeatMs: 20, ThrottleCheckMs: 1},
		})
		require.NoError(t, err)
		sh := &shard{kr: kr, stream: stream, rows: map[string]string{}}
		for !sh.throttled {
			require.NoError(t, sh.recv())
		}
		shards = append(shards, sh)
	}
	hold("")
	return shards
}

// inRange is the source's rows in a shard's range.
func inRange(t *testing.T, db *sql.DB, sh *shard) map[string]string {
	rows, err := db.Query("SELECT id, v FROM d.t")
	require.NoError(t, err)
	defer rows.Close()
	want := map[string]string{}
	for rows.Next() {
		var id, v string
		require.NoError(t, rows.Scan(&id, &v))
		if sh.in([]byte(id)) {
			want[id] = v
		}
	}
	require.NoError(t, rows.Err())
	return want
}

// rowsRead is the source's count of rows read (MariaDB's Rows_read: every
// row any statement read, temporary tables aside).
func rowsRead(t *testing.T, db *sql.DB) int64 {
	var name string
	var n int64
	require.NoError(t, db.QueryRow("SHOW GLOBAL STATUS LIKE 'Rows_read'").Scan(&name, &n))
	return n
}

// TestSplitReadsEachSourceRowAboutOnce splits a table four ways through four
// streams of one workflow on one streamer: every row reaches exactly the
// shard whose range holds it, and the source reads at most 1.5 rows per row
// moved (four without shared chunk reads).
func TestSplitReadsEachSourceRowAboutOnce(t *testing.T) {
	const n = 4000
	db, s, client := reshardSource(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before := rowsRead(t, db)
	shards := openShards(ctx, ctx, t, s, client, 100)
	var g errgroup.Group
	for _, sh := range shards {
		g.Go(func() error {
			for !sh.copied {
				if err := sh.recv(); err != nil {
					return err
				}
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	read := rowsRead(t, db) - before
	t.Logf("source rows read for %d rows moved to 4 shards: %d (%.2f per row)", n, read, float64(read)/n)

	owner := map[string]string{}
	for _, sh := range shards {
		require.Equal(t, inRange(t, db, sh), sh.rows, "shard %s", sh.kr)
		require.NotEmpty(t, sh.rows)
		for id := range sh.rows {
			require.Empty(t, owner[id], "row %s is in two shards", id)
			owner[id] = sh.kr.String()
		}
	}
	require.Len(t, owner, n, "every row is in a shard")
	require.LessOrEqual(t, read, int64(n*3/2), "read amplification above 1.5")
	require.Empty(t, s.chunks.groups, "the streams still hold shared chunks after their copy")
}

// TestSplitUnderWritesMatchesTheSource splits a table four ways while a
// writer inserts, updates, deletes and moves rows across ranges (changing
// their key), with the streams opened at different source positions: each
// shard, built from its stream's chunks and transactions with every divergence
// an error, ends equal to the source's rows in its range.
func TestSplitUnderWritesMatchesTheSource(t *testing.T) {
	const n = 3000
	db, s, client := reshardSource(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	stop := make(chan struct{})
	var writes errgroup.Group
	writes.Go(func() error {
		rng := rand.New(rand.NewPCG(11, 7))
		for i := 0; ; i++ {
			select {
			case <-stop:
				return nil
			default:
			}
			id, other := 1+rng.IntN(2*n), 1+rng.IntN(2*n)
			var q string
			switch rng.IntN(4) {
			case 0:
				q = fmt.Sprintf("INSERT IGNORE INTO d.t VALUES (%d, 'ins%d')", id, i)
			case 1:
				q = fmt.Sprintf("UPDATE d.t SET v = 'upd%d' WHERE id BETWEEN %d AND %d", i, id, id+2)
			case 2:
				q = fmt.Sprintf("DELETE FROM d.t WHERE id = %d", id)
			default:
				q = fmt.Sprintf("UPDATE IGNORE d.t SET id = %d, v = 'mov%d' WHERE id = %d", other, i, id)
			}
			if _, err := db.ExecContext(ctx, q); err != nil {
				return err
			}
		}
	})
	shards := openShards(ctx, ctx, t, s, client, 50)

	// Copy under writes, then stop writing and drain each stream to the
	// source's final position.
	var g errgroup.Group
	for _, sh := range shards {
		g.Go(func() error {
			for !sh.copied {
				if err := sh.recv(); err != nil {
					return err
				}
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	close(stop)
	require.NoError(t, writes.Wait())
	final, err := dbconn.Position(context.Background(), db)
	require.NoError(t, err)
	want := gtidSet(t, final)
	for _, sh := range shards {
		g.Go(func() error {
			for sh.pos == nil || !sh.pos.Contains(want) {
				if err := sh.recv(); err != nil {
					return err
				}
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	total := 0
	for _, sh := range shards {
		require.Equal(t, inRange(t, db, sh), sh.rows, "shard %s", sh.kr)
		total += len(sh.rows)
	}
	var count int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM d.t").Scan(&count))
	require.Equal(t, count, total)
}

// TestSplitGoesOnWhenAStreamIsCancelled cancels one of the four streams in
// the middle of its copy: the other three still copy their ranges exactly.
func TestSplitGoesOnWhenAStreamIsCancelled(t *testing.T) {
	const n = 4000
	db, s, client := reshardSource(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	quitter, quit := context.WithCancel(ctx)
	defer quit()
	shards := openShards(ctx, quitter, t, s, client, 100)
	var g errgroup.Group
	for i, sh := range shards {
		g.Go(func() error {
			for !sh.copied {
				if err := sh.recv(); err != nil {
					if i == 0 && errors.Is(quitter.Err(), context.Canceled) {
						return nil
					}
					return err
				}
				if i == 0 && len(sh.rows) > 0 {
					quit() // the first stream goes away with its copy begun
				}
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	require.False(t, shards[0].copied, "the cancelled stream did not finish its copy")
	for _, sh := range shards[1:] {
		require.Equal(t, inRange(t, db, sh), sh.rows, "shard %s", sh.kr)
	}
}
