package streamer

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/keyrange"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/schema"
	"github.com/rowlift/rowlift/internal/vindex"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// sourceWithRows starts a server with d.t keyed by (region ci, id) holding n rows.
func sourceWithRows(t *testing.T, n int) (*sql.DB, *tablePlan) {
	srv := sandboxtest.Start(t, sandbox.Options{})
	admin := sandboxtest.Open(t, srv, "")
	sandboxtest.Exec(t, admin, "CREATE DATABASE d",
		"CREATE TABLE d.t (region VARCHAR(4) COLLATE utf8mb4_general_ci, id INT, v VARCHAR(20), PRIMARY KEY (region, id))",
		fmt.Sprintf("INSERT INTO d.t WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < %d) "+
			"SELECT ELT(1 + i %% 3, 'a', 'B', 'c'), i, CONCAT('v', i) FROM s", n))
	db, _, err := dbconn.Open(srv.DSN(""), dbconn.Source)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	tbl, err := schema.Load(context.Background(), db, "d", "t")
	require.NoError(t, err)
	p, err := newTablePlan(tbl, nil, false)
	require.NoError(t, err)
	return db, p
}

func TestChunkQueryUsesKeyRange(t *testing.T) {
	db, p := sourceWithRows(t, 2000)
	q, err := p.chunkQuery([][]byte{[]byte("B"), []byte("700")}, nil, 100)
	require.NoError(t, err)
	var id, selectType, table, typ, key, rows, extra sql.NullString
	var possible, keyLen, ref sql.NullString
	row := db.QueryRow("EXPLAIN " + q)
	require.NoError(t, row.Scan(&id, &selectType, &table, &typ, &possible, &key, &keyLen, &ref, &rows, &extra))
	require.Equal(t, "range", typ.String, "chunk query must range-scan the key: %s", extra.String)
	require.Equal(t, "PRIMARY", key.String)
	require.NotContains(t, extra.String, "filesort")
}

// streamAll runs a rowStreamer from lastPK and returns the chunk items it emits.
func streamAll(t *testing.T, db *sql.DB, p *tablePlan, lastPK [][]byte, chunkRows int64, packet int) []*rowliftv1.Chunk {
	parts, _ := streamSized(t, db, p, lastPK, newChunkSizer(1<<40, chunkRows, 1), packet)
	return parts
}

// testFencer is the MariaDB fence of a row streamer reading database d.
func testFencer(t *testing.T, db *sql.DB) fencer {
	f := newFencer(dbconn.MariaDB, db, "d", nil)
	t.Cleanup(f.close)
	return f
}

// streamSized runs a rowStreamer whose chunks sizer sizes from lastPK and
// returns the chunk items it emits and how many chunks it read.
func streamSized(t *testing.T, db *sql.DB, p *tablePlan, lastPK [][]byte, sizer *chunkSizer, packet int) ([]*rowliftv1.Chunk, int) {
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	sink := &recordingSink{t: t}
	r := &rowStreamer{plan: p, conn: conn, fence: testFencer(t, db), sizer: sizer, packetBytes: packet, lastPK: lastPK, sink: sink, log: zap.NewNop()}
	require.NoError(t, r.run(ctx))
	require.Zero(t, sink.shares, "a row streamer in no chunk group is offered no chunk")
	require.Equal(t, sink.requests, sink.fences, "every chunk requested is fenced")
	require.Equal(t, sink.requests, sink.lasts, "every chunk fenced ends with a last part")
	return sink.parts, sink.lasts
}

// recordingSink records what a row streamer sends, checking the protocol order:
// request, fence, parts, last part.
type recordingSink struct {
	t                               *testing.T
	requests, fences, lasts, shares int
	accept                          bool
	parts                           []*rowliftv1.Chunk
}

func (s *recordingSink) request(context.Context, string) error {
	require.Equal(s.t, s.requests, s.lasts, "a chunk is requested only after the previous one ended")
	s.requests++
	return nil
}

func (s *recordingSink) fence(_ context.Context, _ string, fence, _ position) error {
	require.NotNil(s.t, fence)
	s.fences++
	return nil
}

// share takes another stream's chunk when accept says so, as the merger
// would if the fence covers what the stream placed.
func (s *recordingSink) share(_ context.Context, _ string, fence, _ position) (bool, error) {
	require.NotNil(s.t, fence)
	s.shares++
	if s.accept {
		s.fences++
	}
	return s.accept, nil
}

func (s *recordingSink) part(_ context.Context, part *rowliftv1.Chunk, last bool) error {
	require.Equal(s.t, s.requests, s.fences, "parts come after the fence")
	if part.GetRowCount() > 0 || part.GetLastPk() != nil || part.GetTableDone() { // as the merger keeps them
		s.parts = append(s.parts, part)
	}
	if last {
		s.lasts++
	}
	return nil
}

// rowsOf unpacks a chunk's rows into Row messages, checking its row count.
func rowsOf(t testing.TB, c *rowliftv1.Chunk) []*rowliftv1.Row {
	var out []*rowliftv1.Row
	rows := rowcodec.ReadRows(c.GetPackedRows())
	for rows.Next() {
		r := &rowliftv1.Row{}
		rowcodec.Pack(r, rows.Values())
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	require.EqualValues(t, c.GetRowCount(), len(out), "the chunk's row count")
	return out
}

func keyString(t *testing.T, row *rowliftv1.Row) string {
	vals, err := rowcodec.Values(nil, row)
	require.NoError(t, err)
	return fmt.Sprintf("%s/%s", vals[0], vals[1])
}

func TestRowStreamerCopiesInKeyOrderAcrossChunksAndParts(t *testing.T) {
	db, p := sourceWithRows(t, 1000)
	parts := streamAll(t, db, p, nil, 128, 700)
	var keys []string
	for i, c := range parts {
		require.NotNil(t, c.GetFence(), "every part carries its chunk's fence")
		require.NotEmpty(t, c.GetFence().GetGtidSet())
		require.Equal(t, i == len(parts)-1, c.GetTableDone(), "only the last part ends the table")
		for _, r := range rowsOf(t, c) {
			vals, err := rowcodec.Values(nil, r)
			require.NoError(t, err)
			keys = append(keys, fmt.Sprintf("%s/%s", vals[0], vals[1]))
		}
		if c.GetRowCount() > 0 {
			require.Equal(t, keys[len(keys)-1], keyString(t, c.GetLastPk()), "last_pk is the part's last row")
		}
	}
	require.Len(t, keys, 1000, "every row exactly once")
	var want []string
	rows, err := db.Query("SELECT region, id FROM d.t ORDER BY region, id")
	require.NoError(t, err)
	for rows.Next() {
		var region, id string
		require.NoError(t, rows.Scan(&region, &id))
		want = append(want, region+"/"+id)
	}
	require.Equal(t, want, keys, "same order as the server's ORDER BY, case-insensitive collation included")
}

func TestRowStreamerResumesAfterLastPK(t *testing.T) {
	db, p := sourceWithRows(t, 300)
	parts := streamAll(t, db, p, [][]byte{[]byte("b"), []byte("200")}, 1000, 1<<20)
	var n int
	for _, c := range parts {
		n += int(c.GetRowCount())
	}
	var want int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM d.t WHERE region > 'b' OR (region = 'b' AND id > 200)").Scan(&want))
	require.Equal(t, want, n, "resume takes the rows after last_pk by the column's collation ('b' matches 'B')")
}

func TestRowStreamerEmptyTable(t *testing.T) {
	db, p := sourceWithRows(t, 1)
	_, err := db.Exec("DELETE FROM d.t")
	require.NoError(t, err)
	parts := streamAll(t, db, p, nil, 10, 100)
	require.Len(t, parts, 1)
	require.True(t, parts[0].GetTableDone())
	require.Zero(t, parts[0].GetRowCount())
	require.Empty(t, parts[0].GetPackedRows())
}

// TestRowStreamerKeyRangeKeepsTheScannedBoundary: with a key range the chunks
// send only the rows in range, but every chunk's LastPk is the last row it
// scanned, the same as without the filter, so chunks whose rows are all out
// of range still move the copy on.
func TestRowStreamerKeyRangeKeepsTheScannedBoundary(t *testing.T) {
	db, p := sourceWithRows(t, 300)
	all := streamAll(t, db, p, nil, 7, 1<<20)
	kr, err := keyrange.Parse("-40")
	require.NoError(t, err)
	filtered := *p
	require.NoError(t, filtered.shard("v", vindex.XXHash, kr))
	some := streamAll(t, db, &filtered, nil, 7, 1<<20)

	require.Equal(t, len(all), len(some), "one part per chunk either way")
	var want, got []*rowliftv1.Row
	empty := 0
	for i := range all {
		require.Equal(t, fmt.Sprint(all[i].GetLastPk()), fmt.Sprint(some[i].GetLastPk()), "chunk %d ends where it scanned to", i)
		for _, r := range rowsOf(t, all[i]) {
			keep, err := filtered.filter.keepRow(r)
			require.NoError(t, err)
			if keep {
				want = append(want, r)
			}
		}
		got = append(got, rowsOf(t, some[i])...)
		if some[i].GetRowCount() == 0 && some[i].GetLastPk() != nil {
			empty++
		}
	}
	require.Equal(t, fmt.Sprint(want), fmt.Sprint(got))
	require.Positive(t, empty, "a quarter of the keyspace leaves some chunks with no row to send")
}

// TestRowStreamersShareAChunkRead: of three row streamers in one chunk group,
// the first reads the chunk; the second is offered that read and, its merger
// taking the fence, emits it with the first one's fence; the third's merger
// refuses the fence (it placed a change after it), so it reads the chunk
// itself, in a new snapshot that sees the source's latest write.
func TestRowStreamersShareAChunkRead(t *testing.T) {
	db, p := sourceWithRows(t, 300)
	kr, err := keyrange.Parse("-80")
	require.NoError(t, err)
	filtered := *p
	require.NoError(t, filtered.shard("v", vindex.XXHash, kr))
	ctx := context.Background()
	cache := newChunkCache()
	run := func(accept bool, member *chunkMember) *recordingSink {
		conn, err := db.Conn(ctx)
		require.NoError(t, err)
		defer conn.Close()
		sink := &recordingSink{t: t, accept: accept}
		r := &rowStreamer{plan: &filtered, conn: conn, fence: testFencer(t, db), sizer: newChunkSizer(1<<40, 50, 1), packetBytes: 1 << 20, sink: sink, shared: member, log: zap.NewNop()}
		done, err := r.chunk(ctx)
		require.NoError(t, err)
		require.False(t, done)
		require.Equal(t, 1, sink.fences)
		require.Equal(t, 1, sink.lasts)
		return sink
	}
	a, b, c := cache.join("g", 1<<30), cache.join("g", 1<<30), cache.join("g", 1<<30)
	first := run(false, a)
	require.Zero(t, first.shares, "the first stream reads the chunk")
	_, err = db.Exec("UPDATE d.t SET v = 'changed' WHERE region = 'a' AND id = 3")
	require.NoError(t, err)

	second := run(true, b)
	require.Equal(t, 1, second.shares)
	require.Equal(t, fmt.Sprint(first.parts), fmt.Sprint(second.parts), "the same rows at the same fence")

	third := run(false, c)
	require.Equal(t, 1, third.shares)
	require.NotEqual(t, first.parts[0].GetFence().GetGtidSet(), third.parts[0].GetFence().GetGtidSet(), "a snapshot of its own")
	require.Equal(t, fmt.Sprint(first.parts[0].GetLastPk()), fmt.Sprint(third.parts[0].GetLastPk()), "the same chunk boundary")
	require.Empty(t, cache.groups["g"].chunks, "every stream took the chunk")
	for _, m := range []*chunkMember{a, b, c} {
		m.leave()
	}
}

// wideSource starts a server with d.w (id INT PRIMARY KEY, b LONGBLOB)
// holding n rows of width bytes each.
func wideSource(t *testing.T, n, width int) (*sql.DB, *tablePlan) {
	srv := sandboxtest.Start(t, sandbox.Options{})
	admin := sandboxtest.Open(t, srv, "")
	sandboxtest.Exec(t, admin, "CREATE DATABASE d", "CREATE TABLE d.w (id INT PRIMARY KEY, b LONGBLOB)",
		fmt.Sprintf("INSERT INTO d.w WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < %d) "+
			"SELECT i, REPEAT(CHAR(65 + i %% 26), %d) FROM s", n, width))
	db, _, err := dbconn.Open(srv.DSN(""), dbconn.Source)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	tbl, err := schema.Load(context.Background(), db, "d", "w")
	require.NoError(t, err)
	p, err := newTablePlan(tbl, nil, false)
	require.NoError(t, err)
	return db, p
}

// TestRowStreamerEndsAChunkAtItsBytes: statistics that say the rows are
// narrow give the first chunk a LIMIT of the whole table; its scan ends once
// it has read twice the budget, at the last row read, and the chunks after it
// are sized from the rows it measured. Every row arrives once, in order, and
// only the last chunk ends the table; a key range's shared reads end the same
// way.
func TestRowStreamerEndsAChunkAtItsBytes(t *testing.T) {
	const rows, width, budget = 40, 20 << 10, 50 << 10
	db, p := wideSource(t, rows, width)
	// filtered: a part's last key is the last row scanned, past the last
	// row kept when the range dropped the rest.
	check := func(t *testing.T, parts []*rowliftv1.Chunk, chunks int, want []string, filtered bool) {
		var keys []string
		for i, c := range parts {
			require.Equal(t, i == len(parts)-1, c.GetTableDone(), "only the last part ends the table")
			require.Less(t, len(c.GetPackedRows()), chunkOvershoot*budget+width+64, "part %d", i)
			for _, r := range rowsOf(t, c) {
				vals, err := rowcodec.Values(nil, r)
				require.NoError(t, err)
				require.Len(t, vals[1], width)
				keys = append(keys, string(vals[0]))
			}
			if c.GetRowCount() > 0 && !filtered {
				vals, err := rowcodec.Values(nil, c.GetLastPk())
				require.NoError(t, err)
				require.Equal(t, keys[len(keys)-1], string(vals[0]), "the chunk ends at its last row read")
			}
		}
		require.Equal(t, want, keys, "every row once, in key order")
		// The first chunk ends by its bytes after 5 rows (100 KiB); the others
		// ask for 2 (50 KiB); the last one finds the table's end.
		require.Equal(t, 1+(rows-5)/2+1, chunks, "chunks read")
	}
	var all []string
	for i := 1; i <= rows; i++ {
		all = append(all, fmt.Sprint(i))
	}
	t.Run("streamed", func(t *testing.T) {
		parts, chunks := streamSized(t, db, p, nil, newChunkSizer(budget, 1000, 1), 1<<20)
		check(t, parts, chunks, all, false)
	})
	t.Run("shared read in a key range", func(t *testing.T) {
		kr, err := keyrange.Parse("-80")
		require.NoError(t, err)
		filtered := *p
		require.NoError(t, filtered.shard("id", vindex.XXHash, kr))
		cache := newChunkCache()
		ctx := context.Background()
		conn, err := db.Conn(ctx)
		require.NoError(t, err)
		defer conn.Close()
		sink := &recordingSink{t: t}
		member := cache.join("g", sharedChunkBytes(budget))
		defer member.leave()
		r := &rowStreamer{plan: &filtered, conn: conn, fence: testFencer(t, db), sizer: newChunkSizer(budget, 1000, 1), packetBytes: 1 << 20,
			sink: sink, shared: member, log: zap.NewNop()}
		require.NoError(t, r.run(ctx))
		var want []string
		for _, id := range all {
			keep, err := filtered.filter.keep([][]byte{[]byte(id), nil})
			require.NoError(t, err)
			if keep {
				want = append(want, id)
			}
		}
		check(t, sink.parts, sink.lasts, want, true)
	})
}
