package streamer

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"

	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// maxSharedChunks bounds the chunks a chunk group keeps for its streams. A
// chunk is held whole, so a group holds at most maxSharedChunks × chunk_rows
// rows (40 MB at the default 100000 rows of 100 bytes; tables of wide rows
// want a smaller chunk_rows), plus the one chunk each of its streams is
// emitting, which may have been evicted meanwhile.
const maxSharedChunks = 4

// chunkCache lets the streams of one workflow on this streamer share their
// chunk reads: a reshard from one source to M target shards runs M streams
// that read the same chunks and differ only in the key range they keep.
// A group is the streams that copy one table with the same SELECT and chunk
// size; its chunks are keyed by the key they start after, so one stream reads
// a chunk (the leader) and the others wait for it and filter it to their own
// range. Whether a stream may place a chunk another stream read is the
// merger's decision (merger.canFence); when it may not, or the leader failed,
// the stream reads the chunk itself. A chunk is dropped once every stream of
// the group took it, or when the group holds maxSharedChunks newer ones: a
// stream that falls that far behind reads for itself.
type chunkCache struct {
	mu     sync.Mutex
	groups map[string]*chunkGroup
	nextID int
}

type chunkGroup struct {
	members map[int]bool
	chunks  []*sharedChunk // oldest first
}

// sharedChunk is one chunk read in one snapshot, with every row it scanned
// (no key range applied). It is immutable once done is closed.
type sharedChunk struct {
	start string // the encoded key it starts after
	done  chan struct{}
	err   error // why the read failed; the chunk then holds nothing
	// fence is the snapshot's position, as sent and as the merger compares it;
	// fenceTime is when the snapshot was requested.
	fence     *rowliftv1.Position
	fencePos  position
	fenceTime int64
	// rows are every row scanned, packed (rowcodec.AppendRow).
	rows []byte
	// lastPK is the key of the last row scanned (nil: none); more says the
	// chunk was full, so rows may follow it.
	lastPK   *rowliftv1.Row
	more     bool
	consumed map[int]bool
}

func newChunkCache() *chunkCache { return &chunkCache{groups: map[string]*chunkGroup{}} }

// chunkMember is one stream's membership in a chunk group.
type chunkMember struct {
	cache *chunkCache
	group string
	id    int
}

// chunkGroupKey names the group of streams that read the same chunks: same
// workflow, same SELECT (database, table, columns) and same chunk size.
func chunkGroupKey(workflow string, plan *tablePlan, chunkRows int64) string {
	return workflow + "\x00" + plan.selectFrom + "\x00" + strconv.FormatInt(chunkRows, 10)
}

// join registers a stream in a group until leave: the group keeps each chunk
// until every registered stream took it.
func (c *chunkCache) join(group string) *chunkMember {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[group]
	if g == nil {
		g = &chunkGroup{members: map[int]bool{}}
		c.groups[group] = g
	}
	c.nextID++
	g.members[c.nextID] = true
	return &chunkMember{cache: c, group: group, id: c.nextID}
}

// leave ends the membership; chunks only this stream had yet to take go.
func (m *chunkMember) leave() {
	c := m.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[m.group]
	delete(g.members, m.id)
	if len(g.members) == 0 {
		delete(c.groups, m.group)
		return
	}
	g.chunks = slices.DeleteFunc(g.chunks, g.takenByAll)
}

func (g *chunkGroup) takenByAll(ch *sharedChunk) bool {
	for id := range g.members {
		if !ch.consumed[id] {
			return false
		}
	}
	return true
}

// acquire returns the group's chunk that starts after lastPK; lead says there
// was none, so the caller must read it and call finish, while other streams
// asking for it wait.
func (m *chunkMember) acquire(lastPK [][]byte) (ch *sharedChunk, lead bool) {
	start := encodeKey(lastPK)
	c := m.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[m.group]
	for _, ch := range g.chunks {
		if ch.start == start && !ch.consumed[m.id] {
			return ch, false
		}
	}
	ch = &sharedChunk{start: start, done: make(chan struct{}), consumed: map[int]bool{}}
	if len(g.chunks) == maxSharedChunks {
		g.chunks = slices.Delete(g.chunks, 0, 1)
	}
	g.chunks = append(g.chunks, ch)
	return ch, true
}

// finish ends the leader's read of ch; a failed read leaves the group, so the
// next stream asking for the chunk reads it.
func (m *chunkMember) finish(ch *sharedChunk, err error) {
	if err != nil {
		ch.err = err
		m.cache.mu.Lock()
		m.cache.groups[m.group].remove(ch)
		m.cache.mu.Unlock()
	}
	close(ch.done)
}

// wait waits until ch is read; its error is the read's.
func (ch *sharedChunk) wait(ctx context.Context) error {
	select {
	case <-ch.done:
		return ch.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// took records that the stream emitted ch (or read it for itself instead).
func (m *chunkMember) took(ch *sharedChunk) {
	c := m.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[m.group]
	ch.consumed[m.id] = true
	if g.takenByAll(ch) {
		g.remove(ch)
	}
}

func (g *chunkGroup) remove(ch *sharedChunk) {
	if i := slices.Index(g.chunks, ch); i >= 0 {
		g.chunks = slices.Delete(g.chunks, i, i+1)
	}
}

// encodeKey makes a key's values a map key: each value with its length, -1
// for NULL.
func encodeKey(key [][]byte) string {
	if key == nil {
		return ""
	}
	var b strings.Builder
	for _, v := range key {
		if v == nil {
			b.WriteString("-1:")
			continue
		}
		b.WriteString(strconv.Itoa(len(v)))
		b.WriteByte(':')
		b.Write(v)
	}
	return b.String()
}
