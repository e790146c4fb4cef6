package streamer

import (
	"fmt"
	"slices"

	"github.com/rowlift/rowlift/internal/ddlscope"
	"github.com/rowlift/rowlift/internal/gtid"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// position is a point in the source's history. Production positions are GTID
// sets: a fence is the set of transactions its snapshot contains, the reader's
// position the set it has read, a transaction's position its own GTID. GTIDs
// make the comparisons exact even when the source is idle and no event arrives
// to show how far the reader has got.
type position interface {
	// covers reports whether every transaction in o is also in p.
	covers(o position) bool
}

// gtidPos is a position as a GTID set (MariaDB or MySQL flavor).
type gtidPos struct{ set *gtid.Set }

func (p gtidPos) covers(o position) bool { return p.set.Contains(o.(gtidPos).set) }

func (p gtidPos) String() string { return p.set.String() }

// mergeTable is what the merger needs to filter one table's binlog changes.
type mergeTable struct {
	// keyOf extracts the key values of a row.
	keyOf func(*rowliftv1.Row) [][]byte
	// compare orders keys as the source's ORDER BY does.
	compare func(a, b [][]byte) (int, error)
	// copying is true until the chunk that ends the table's copy is emitted.
	copying bool
	// verifying is true until the chunk that ends the table's verify is
	// emitted. A verify chunk is compared with a target that has applied
	// everything placed before it, so like a copy chunk its fence must cover
	// every change of the table the stream has emitted: those changes wait
	// until a snapshot shows them visible, and are placed.
	verifying bool
	// lastPK is the key of the last row the emitted chunks scanned (nil: none
	// yet). While the table copies, only changes to rows at or below it are
	// forwarded.
	lastPK [][]byte
	// chunks are the table's chunks in flight, oldest first. A table reads them
	// one after another, so their fences only grow, and only the oldest decides
	// what may be emitted.
	chunks []*mergeChunk
	// placed are the positions every later chunk's fence must cover: the
	// stream's start, the fences of the table's chunks, and every transaction
	// touching the table emitted while it takes chunks (even one whose changes
	// were all dropped above the copied boundary). A chunk fenced before one
	// of them would lack changes the stream has already placed ahead of it. No
	// entry covers another, so there is about one per GTID domain.
	placed []position
}

// place records a position later chunks of the table must cover.
func (t *mergeTable) place(pos position) {
	kept := t.placed[:0]
	for _, p := range t.placed {
		if p.covers(pos) {
			return
		}
		if !pos.covers(p) {
			kept = append(kept, p)
		}
	}
	t.placed = append(kept, pos)
}

// coveredBy reports whether fence covers every position placed for the table.
func (t *mergeTable) coveredBy(fence position) bool {
	for _, p := range t.placed {
		if !fence.covers(p) {
			return false
		}
	}
	return true
}

// newest is the chunk being read, or nil.
func (t *mergeTable) newest() *mergeChunk {
	if len(t.chunks) == 0 {
		return nil
	}
	return t.chunks[len(t.chunks)-1]
}

// mergeChunk is a chunk from the moment its snapshot is requested: its fence is
// unknown until the snapshot returns, and its parts arrive as they are read.
type mergeChunk struct {
	fenced bool
	fence  position
	// held is the source's position once the snapshot held the table
	// (fencer.hold). The chunk is due only once the reader has passed it, and
	// void when a schema change of the table lies after the fence and in it.
	held     position
	parts    []*rowliftv1.Chunk
	complete bool
	// due is set once the chunk's parts may go out (or, void, be dropped).
	due, void bool
}

// mergeTx is one source transaction as read from the binlog.
type mergeTx struct {
	// pos is the transaction's own GTID (a DDL's too).
	pos  position
	item *rowliftv1.StreamItem // a Transaction or a DDL
	// tables lists the streamed tables it touches; a DDL touches its tables.
	tables []string
	// bytes is about what its row images hold in memory.
	bytes int
}

// merger puts copy chunks and binlog transactions into one stream order, so that
// each chunk sits exactly at its fence: after every transaction at or before the
// fence that touches its table, and before every later one. It also decides
// which row changes of tables still copying reach the target. It does no I/O:
// the binlog reader and the row streamers feed it, and it is the one component
// that knows every pending fence, so every drop decision is made at emission.
type merger struct {
	tables map[string]*mergeTable
	// start is the stream's start position, which every chunk's fence covers.
	start position
	// queue holds transactions read but not emitted, in binlog order;
	// queueBytes counts their bytes.
	queue      []*mergeTx
	queueBytes int
	// readerAt is how far the binlog reader has read: nothing at or before it
	// will arrive any more.
	readerAt position
	// visible is the highest position a snapshot has shown to be visible. A
	// transaction is in the binlog (and readable) before its commit makes it
	// visible, so a snapshot taken after reading it may still miss it: only a
	// transaction at or before visible is certain to be in every later snapshot.
	visible position
	out     []*rowliftv1.StreamItem
	// voided lists the tables whose chunks voids dropped, for the log; the
	// merge loop empties it.
	voided []string
}

func newMerger(start position) *merger {
	return &merger{tables: map[string]*mergeTable{}, start: start, readerAt: start, visible: start}
}

func (m *merger) addTable(name string, t *mergeTable) {
	t.placed = []position{m.start}
	m.tables[name] = t
}

// requestChunk records that a chunk of table is about to take its snapshot. It
// must be called before the snapshot starts: until the fence is known, no
// transaction touching the table can be placed.
func (m *merger) requestChunk(table string) error {
	t := m.tables[table]
	if c := t.newest(); c != nil && !c.complete {
		return fmt.Errorf("merge: chunk of %s requested while the previous one is still being read", table)
	}
	t.chunks = append(t.chunks, &mergeChunk{})
	return nil
}

// fenceChunk gives the requested chunk of table its fence, which must cover
// every position placed for the table: a snapshot begun after the request
// always does (what the stream placed was visible before, and a previous
// chunk's snapshot began earlier), so a fence that does not is a bug that
// would lose changes, and stops the stream.
//
// held is the position once the snapshot held the table (nil: the fence).
func (m *merger) fenceChunk(table string, fence, held position) error {
	t := m.tables[table]
	c := t.newest()
	if c == nil || c.fenced {
		return fmt.Errorf("merge: fence for %s without a requested chunk", table)
	}
	if !t.coveredBy(fence) {
		return fmt.Errorf("merge: fence %v of %s is before a position the stream has already placed for it (%v)", fence, table, t.placed)
	}
	if held == nil {
		held = fence
	}
	c.fenced, c.fence, c.held = true, fence, held
	t.place(fence)
	m.observeVisible(fence)
	return nil
}

// canFence reports whether the requested chunk of table may take fence, the
// fence of a chunk another stream read (see chunkCache): only when it covers
// this stream's start and everything this stream has placed for the table.
// Otherwise the chunk would lack changes this stream has already emitted past
// it (filtered by the old copied boundary, so dropped for the chunk's rows),
// and the stream must read the chunk itself.
func (m *merger) canFence(table string, fence position) bool {
	t := m.tables[table]
	c := t.newest()
	return c != nil && !c.fenced && t.coveredBy(fence)
}

// observeVisible records a snapshot's position (a chunk's fence, or a probe
// snapshot the streamer takes while transactions wait for one).
func (m *merger) observeVisible(pos position) {
	if pos.covers(m.visible) {
		m.visible = pos
	}
}

// waitsForVisibility reports whether queued transactions wait for a snapshot
// to prove them visible, so the streamer knows to take a probe snapshot.
func (m *merger) waitsForVisibility() bool {
	return len(m.queue) > 0 && !m.visible.covers(m.queue[0].pos) && m.touchesChunked(m.queue[0])
}

// chunked reports whether the table takes more chunks: it copies, or a
// verify runs on it.
func (t *mergeTable) chunked() bool { return t.copying || t.verifying }

func (m *merger) touchesChunked(tx *mergeTx) bool {
	for _, name := range tx.tables {
		if t := m.tables[name]; t != nil && t.chunked() {
			return true
		}
	}
	return false
}

// addPart adds one part of a table's chunk; last means the chunk is complete.
func (m *merger) addPart(part *rowliftv1.Chunk, last bool) error {
	c := m.tables[part.GetTable()].newest()
	if c == nil || !c.fenced || c.complete {
		return fmt.Errorf("merge: part of %s without a fenced chunk", part.GetTable())
	}
	c.parts = append(c.parts, part)
	c.complete = last
	return nil
}

// addTx queues a transaction the reader has read; readerAt is the reader's
// position after it.
func (m *merger) addTx(tx *mergeTx, readerAt position) {
	m.queue = append(m.queue, tx)
	m.queueBytes += tx.bytes
	m.readerAt = readerAt
}

// holdsReader reports whether the binlog reader must wait before it hands
// over another transaction: the queue holds limit bytes or more, and no
// chunk waits for the reader to pass its fence (and where its snapshot held
// the table), so what the queue waits for
// (a chunk's fence or rows, a snapshot that shows it visible) comes without
// reading further. A chunk whose fence the reader has not reached needs
// more of the binlog, and gets it: the queue then grows past limit by the
// transactions between the reader and that fence.
func (m *merger) holdsReader(limit int) bool {
	if m.queueBytes < limit {
		return false
	}
	for _, t := range m.tables {
		// held covers the fence: the chunk is due only once the reader is past both.
		if len(t.chunks) > 0 && t.chunks[0].fenced && !m.readerAt.covers(t.chunks[0].held) {
			return false
		}
	}
	return true
}

// readTo records the reader's position after a transaction the target does not
// need.
func (m *merger) readTo(pos position) {
	m.readerAt = pos
}

// idle reports whether everything read has been emitted and no chunk is in
// flight: the stream's position is then the reader's.
func (m *merger) idle() bool {
	if len(m.queue) > 0 {
		return false
	}
	for _, t := range m.tables {
		if len(t.chunks) > 0 {
			return false
		}
	}
	return true
}

// drain emits everything that can be placed now and returns it in stream order.
func (m *merger) drain() ([]*rowliftv1.StreamItem, error) {
	m.out = m.out[:0]
	for {
		progressed, err := m.emitDueChunks()
		if err != nil {
			return nil, err
		}
		sent, err := m.emitTxs()
		if err != nil {
			return nil, err
		}
		if !progressed && !sent {
			return m.out, nil
		}
	}
}

// emitDueChunks emits the parts of every chunk that is due: the reader is past
// its fence and the position at which its snapshot held the table, and no
// queued transaction at or before the fence remains. A void chunk's parts are
// dropped instead (voids).
func (m *merger) emitDueChunks() (bool, error) {
	progressed := false
	for name, t := range m.tables {
		if len(t.chunks) == 0 {
			continue
		}
		c := t.chunks[0]
		if !c.due {
			if !c.fenced || !m.readerAt.covers(c.fence) || !m.readerAt.covers(c.held) {
				continue
			}
			if len(m.queue) > 0 && c.fence.covers(m.queue[0].pos) {
				continue // a transaction at or before the fence still waits
			}
			c.due, c.void = true, m.voids(name, c)
			if c.void {
				m.voided = append(m.voided, name)
			}
		}
		for _, part := range c.parts {
			if c.void {
				break
			}
			if part.GetRowCount() == 0 && part.GetLastPk() == nil && !part.GetTableDone() {
				continue // a chunk that ended exactly at a part boundary
			}
			m.out = append(m.out, &rowliftv1.StreamItem{Item: &rowliftv1.StreamItem_Chunk{Chunk: part}})
			progressed = true
			if part.GetVerify() {
				if part.GetTableDone() {
					t.verifying = false
				}
				continue // a verify's rows are hashes of a copied table: nothing to filter by
			}
			// The copied boundary is the last row scanned (LastPk), which is
			// past the last row sent when a key range filtered the rest out. A
			// part with rows and no boundary would leave later changes to its
			// rows behind as not yet copied: fail closed.
			switch {
			case part.GetLastPk() != nil:
				t.lastPK = rowKey(part.GetLastPk())
			case part.GetRowCount() > 0:
				return progressed, fmt.Errorf("copy of %s: a part of %d rows carries no last key", part.GetTable(), part.GetRowCount())
			}
			if part.GetTableDone() {
				t.copying = false
			}
		}
		clear(c.parts)
		c.parts = c.parts[:0]
		if c.complete {
			t.chunks = t.chunks[1:]
			progressed = true
		}
	}
	return progressed, nil
}

// voids reports whether a schema change of the table lies after the chunk's
// fence and at or before the position at which its snapshot held the table.
// The snapshot then read the table as the change left it, as of the fence:
// after a rename swapped another table in (an online schema change's
// cut-over), that table's rows at the fence, not the rows the fence stands
// for. Every transaction after the fence is queued behind the chunk, the
// change among them. A void chunk's rows never go out: the change ends the
// stream (ddlscope.ReopensStream), and the next stream reads them again from
// the copy's last committed key.
func (m *merger) voids(table string, c *mergeChunk) bool {
	for _, tx := range m.queue {
		if ddlscope.ReopensStream(tx.item.GetDdl()) && c.held.covers(tx.pos) && !c.fence.covers(tx.pos) && slices.Contains(tx.tables, table) {
			return true
		}
	}
	return false
}

// emitTxs emits queued transactions in order until one must wait: for a
// snapshot to show it visible, or for a chunk of a table it touches whose fence
// is unknown or before the transaction.
func (m *merger) emitTxs() (bool, error) {
	n := 0
	for _, tx := range m.queue {
		if m.blocked(tx) {
			break
		}
		if err := m.emitTx(tx); err != nil {
			return false, err
		}
		m.queueBytes -= tx.bytes
		n++
	}
	clear(m.queue[:n]) // the emitted transactions' memory goes with their items
	m.queue = m.queue[n:]
	return n > 0, nil
}

func (m *merger) blocked(tx *mergeTx) bool {
	// Whether a change of a copying table is already copied, or will be by the
	// next chunk, and whether the next verify chunk of a table compares rows
	// with or without it, is only known once the transaction is visible to
	// snapshots.
	if !m.visible.covers(tx.pos) && m.touchesChunked(tx) {
		return true
	}
	for _, name := range tx.tables {
		t := m.tables[name]
		if t == nil || len(t.chunks) == 0 {
			continue
		}
		if c := t.chunks[0]; !c.fenced || !c.fence.covers(tx.pos) {
			return true
		}
	}
	return false
}

// emitTx filters a transaction's changes to what the target needs and emits it
// if anything is left (a DDL always goes out); one the target needs whole goes
// out as the reader made it.
func (m *merger) emitTx(tx *mergeTx) error {
	for _, name := range tx.tables {
		if t := m.tables[name]; t != nil && t.chunked() {
			t.place(tx.pos)
		}
	}
	trx := tx.item.GetTransaction()
	if trx == nil {
		m.out = append(m.out, tx.item)
		return nil
	}
	// events stays nil while every event goes out whole, and the transaction
	// with it.
	var events []*rowliftv1.RowEvent
	all := trx.GetEvents()
	for i, ev := range all {
		kept, err := m.keep(ev)
		if err != nil {
			return err
		}
		if kept != ev && events == nil {
			events = append(make([]*rowliftv1.RowEvent, 0, len(all)), all[:i]...)
		}
		if events != nil && kept != nil {
			events = append(events, kept)
		}
	}
	switch {
	case events == nil:
		m.out = append(m.out, tx.item)
	case len(events) > 0:
		m.out = append(m.out, &rowliftv1.StreamItem{Item: &rowliftv1.StreamItem_Transaction{Transaction: &rowliftv1.Transaction{
			Gtid: trx.GetGtid(), Position: trx.GetPosition(), CommitTimeUs: trx.GetCommitTimeUs(), Events: events}}})
	}
	return nil
}

// keep returns what of a transaction's event the target needs: the event
// itself when it needs all of it, else its changes to rows already copied in
// an event of their own, or nil when there are none.
func (m *merger) keep(ev *rowliftv1.RowEvent) (*rowliftv1.RowEvent, error) {
	t := m.tables[ev.GetTable()]
	if t == nil {
		return nil, nil
	}
	if !t.copying {
		return ev, nil
	}
	// kept stays nil while every change goes as it is.
	var kept []*rowliftv1.RowChange
	changes := ev.GetChanges()
	for i, ch := range changes {
		c, err := t.filter(ch)
		if err != nil {
			return nil, fmt.Errorf("filter change of %s: %w", ev.GetTable(), err)
		}
		if c != ch && kept == nil {
			kept = append(make([]*rowliftv1.RowChange, 0, len(changes)), changes[:i]...)
		}
		if kept != nil && c != nil {
			kept = append(kept, c)
		}
	}
	switch {
	case kept == nil:
		return ev, nil
	case len(kept) == 0:
		return nil, nil
	}
	return &rowliftv1.RowEvent{Table: ev.GetTable(), Changes: kept}, nil
}

// filter keeps a change of a copying table only where it touches rows already
// copied. An update that moves a row across the copied boundary becomes a delete
// (moved out: the chunk that copies its new key will bring it) or an insert
// (moved in: no chunk will bring it again).
func (t *mergeTable) filter(ch *rowliftv1.RowChange) (*rowliftv1.RowChange, error) {
	return restrict(ch, func(row *rowliftv1.Row) (bool, error) {
		if t.lastPK == nil {
			return false, nil
		}
		c, err := t.compare(t.keyOf(row), t.lastPK)
		return c <= 0, err
	})
}

// restrict keeps the part of a change that concerns rows for which keep
// holds: all of it when both images do (or the one image of an insert or a
// delete), a delete when only the before image does (the row leaves), an
// insert when only the after image does (the row enters), nil when neither.
// The copied boundary and a key range both decide this way.
func restrict(ch *rowliftv1.RowChange, keep func(*rowliftv1.Row) (bool, error)) (*rowliftv1.RowChange, error) {
	in := func(row *rowliftv1.Row) (bool, error) {
		if row == nil {
			return false, nil
		}
		return keep(row)
	}
	before, err := in(ch.GetBefore())
	if err != nil {
		return nil, err
	}
	after, err := in(ch.GetAfter())
	if err != nil {
		return nil, err
	}
	switch {
	case before && after, before && ch.GetAfter() == nil, after && ch.GetBefore() == nil:
		return ch, nil
	case before:
		return &rowliftv1.RowChange{Before: ch.GetBefore()}, nil
	case after:
		return &rowliftv1.RowChange{After: ch.GetAfter()}, nil
	}
	return nil, nil
}
