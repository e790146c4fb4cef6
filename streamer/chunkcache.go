package streamer

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"

	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// sharedChunkBudgets is how many chunk budgets (chunk_bytes) of read chunks a
// chunk group keeps for its streams: enough for streams a chunk or two apart
// to share every read. A chunk is held whole, so a group holds at most
// sharedChunkBudgets × chunk_bytes of kept chunks (64 MiB at the default),
// plus the chunk each of its streams is emitting, which may have been evicted
// meanwhile, and the one its leader is reading (each at most chunkOvershoot
// budgets and a row).
const sharedChunkBudgets = 4

// sharedChunkBytes is the byte limit of a group's kept chunks for a chunk
// budget.
func sharedChunkBytes(chunkBytes int64) int64 { return sharedChunkBudgets * chunkBytes }

// chunkCache lets the streams of one workflow on this streamer share their
// chunk reads: a reshard from one source to M target shards runs M streams
// that read the same chunks and differ only in the key range they keep.
// A group is the streams that copy one table with the same SELECT and chunk
// size; its chunks are keyed by the key they start after, so one stream reads
// a chunk (the leader) and the others wait for it and filter it to their own
// range. Whether a stream may place a chunk another stream read is the
// merger's decision (merger.canFence); when it may not, or the leader failed,
// the stream reads the chunk itself. A chunk is dropped once every stream of
// the group took it, or, oldest first, when the group's read chunks pass its
// byte limit: a stream that falls that far behind reads for itself.
type chunkCache struct {
	mu     sync.Mutex
	groups map[string]*chunkGroup
	nextID int
}

type chunkGroup struct {
	members map[int]bool
	chunks  []*sharedChunk // oldest first
	// bytes counts the rows of the read chunks in chunks, at most limit but
	// for the newest one.
	bytes, limit int64
}

// sharedChunk is one chunk read in one snapshot, with every row it scanned
// (no key range applied). It is immutable once done is closed.
type sharedChunk struct {
	start string // the encoded key it starts after
	done  chan struct{}
	err   error // why the read failed; the chunk then holds nothing
	// fence is the snapshot's position, as sent and as the merger compares it;
	// held is the position once the snapshot held the table (fencer.hold);
	// fenceTime is when the snapshot was requested.
	fence     *rowliftv1.Position
	fencePos  position
	held      position
	fenceTime int64
	// rows are every row scanned, packed (rowcodec.AppendRow).
	rows []byte
	// lastPK is the key of the last row scanned (nil: none); more says the
	// chunk was full, so rows may follow it.
	lastPK   *rowliftv1.Row
	more     bool
	consumed map[int]bool
	// size is what the chunk counts in its group's bytes (0 until read).
	size int64
}

func newChunkCache() *chunkCache { return &chunkCache{groups: map[string]*chunkGroup{}} }

// chunkMember is one stream's membership in a chunk group.
type chunkMember struct {
	cache *chunkCache
	group string
	id    int
}

// chunkGroupKey names the group of streams that read the same chunks: same
// workflow, same SELECT (database, table, columns) and same chunk sizes.
func chunkGroupKey(workflow string, plan *tablePlan, opts *rowliftv1.StreamOptions) string {
	return workflow + "\x00" + plan.selectFrom + "\x00" + strconv.FormatInt(opts.GetChunkRows(), 10) +
		"\x00" + strconv.FormatInt(opts.GetChunkBytes(), 10)
}

// join registers a stream in a group until leave: the group keeps each chunk
// until every registered stream took it, or until its read chunks pass limit
// bytes (the first member's limit holds for the group).
func (c *chunkCache) join(group string, limit int64) *chunkMember {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[group]
	if g == nil {
		g = &chunkGroup{members: map[int]bool{}, limit: limit}
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
	for _, ch := range slices.Clone(g.chunks) {
		if g.takenByAll(ch) {
			g.remove(ch)
		}
	}
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
	g.chunks = append(g.chunks, ch)
	return ch, true
}

// finish ends the leader's read of ch; a failed read leaves the group, so the
// next stream asking for the chunk reads it. A read chunk counts its rows in
// the group's bytes, and the oldest other read chunks go while the group is
// over its limit.
func (m *chunkMember) finish(ch *sharedChunk, err error) {
	m.cache.mu.Lock()
	g := m.cache.groups[m.group]
	if err != nil {
		ch.err = err
		g.remove(ch)
	} else {
		ch.size = int64(len(ch.rows))
		g.bytes += ch.size
		g.evict(ch)
	}
	m.cache.mu.Unlock()
	close(ch.done)
}

// evict drops the oldest read chunks but keep while the group holds more
// than its limit.
func (g *chunkGroup) evict(keep *sharedChunk) {
	for i := 0; g.bytes > g.limit && i < len(g.chunks); {
		if ch := g.chunks[i]; ch != keep && ch.size > 0 {
			g.remove(ch)
			continue
		}
		i++
	}
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
		g.bytes -= ch.size
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
