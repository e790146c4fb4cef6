package streamer

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.uber.org/zap"

	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/grants"
	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/mysqljson"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/testhook"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// rowStreamer copies one table: continuous PK-ordered LIMITed chunks, each read in
// its own short consistent snapshot whose binlog position is the chunk's fence.
// Rows are packed into Chunk items of about packetBytes as they are read.
type rowStreamer struct {
	plan  *tablePlan
	conn  *sql.Conn
	fence fencer
	// sizer sets each chunk's LIMIT from a byte budget and ends a chunk's
	// scan that reads past it: a chunk is then its fence and the rows it read.
	sizer       *chunkSizer
	packetBytes int
	// partBytes is where the part being filled ends: it starts at
	// firstPartBytes and doubles with each part up to packetBytes.
	partBytes int
	sink      chunkSink
	// start is the stream's start position: a fence must cover it, or the
	// chunk would miss transactions the binlog reader skips.
	start position
	// lastPK is where the copy resumes (nil: from the start).
	lastPK [][]byte
	// gate pauses the copy between chunks while a throttle holds (nil: never).
	gate *copyGate
	// verify marks the chunks as a verify's (plan is then the verifying one).
	verify bool
	// digest, in a verify, sums each chunk up on the source instead of
	// sending its rows (nil: the chunks send row hashes).
	digest *digestPlan
	// rechecking, in a verify, sends the rows (row hashes) of the chunks up to
	// recheckTo (nil: to the table's end), whose digests differed.
	rechecking bool
	recheckTo  [][]byte
	// shared is the stream's chunk group when the plan has a key range (nil:
	// the chunks are read and streamed by this stream alone).
	shared *chunkMember
	// attrs name the stream on its chunks' spans; span is the current chunk's.
	attrs []attribute.KeyValue
	span  chunkSpan
	// log gets a debug line for each chunk placed in the stream (how it was
	// read, its fence, its keys), from which a copy can be retraced.
	log *zap.Logger
}

// chunkSink receives a table's chunks: request before the snapshot starts (it
// returns once the merger knows a chunk is pending), the fence once known (or
// share, which offers the fence of a chunk another stream read and reports
// whether the merger took it), then the parts, the last one marked.
type chunkSink interface {
	request(ctx context.Context, table string) error
	fence(ctx context.Context, table string, fence, held position) error
	share(ctx context.Context, table string, fence, held position) (bool, error)
	part(ctx context.Context, part *rowliftv1.Chunk, last bool) error
}

func (r *rowStreamer) run(ctx context.Context) error {
	what := "copy "
	if r.verify {
		what = "verify "
	}
	// A chunk's reader can stall while the applier is slow (readerWriteTimeout).
	for _, q := range []string{
		"SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
		fmt.Sprintf("SET SESSION net_write_timeout = %d", readerWriteTimeout),
	} {
		if _, err := r.conn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s%s: %w", what, r.plan.table.Name, err)
		}
	}
	// A copy is paced (copyGate.drain, chunkSizer.pace); a verify is not, as
	// its target does not report what it has applied.
	paced := !r.verify && r.gate.paceTarget() > 0
	if paced {
		r.sizer.slowStart()
	}
	for {
		// Before the chunk is requested, so a paused copy holds no snapshot and
		// no pending chunk that would hold back its table's binlog changes.
		if err := r.gate.wait(ctx); err != nil {
			return fmt.Errorf("%s%s: %w", what, r.plan.table.Name, err)
		}
		requested := time.Now()
		done, err := r.chunk(ctx)
		if err != nil {
			return fmt.Errorf("%s%s: %w", what, r.plan.table.Name, err)
		}
		if done {
			return nil
		}
		if paced && r.sizer.paces() {
			held, err := r.gate.drain(ctx, r.gate.mark())
			if err != nil {
				return fmt.Errorf("%s%s: %w", what, r.plan.table.Name, err)
			}
			took := time.Since(requested)
			r.sizer.pace(took, r.gate.paceTarget(), held)
			r.log.Debug("chunk paced", zap.Duration("took", took), zap.Bool("held", held), zap.Int64("next_budget", r.sizer.budget))
		}
	}
}

// chunk reads and emits one chunk; done means the table has no rows after it.
// Without a key range, or with one the SELECT carries (numeric), the rows go
// out in parts as they are read; with another the chunk is read whole (a copy
// chunk shared with the workflow's other streams, see chunkCache), and each
// stream filters it to its own range.
func (r *rowStreamer) chunk(ctx context.Context) (done bool, err error) {
	ctx, r.span = startChunkSpan(ctx, r.attrs, r.plan.table.Name, r.verify)
	defer func() { r.span.end(err) }()
	if r.partBytes == 0 {
		r.partBytes = min(firstPartBytes, r.packetBytes)
	}
	if err := r.sink.request(ctx, r.plan.table.Name); err != nil {
		return false, err
	}
	if r.digest != nil && !r.rechecking {
		return r.digestChunk(ctx)
	}
	if r.plan.filter == nil || r.plan.rangeCond != "" {
		return r.stream(ctx) // every row the SELECT returns is in range
	}
	read := r.sharedChunk
	if r.verify {
		read = r.readOwn // a verify's chunks hash the rows: not the copy's
	}
	c, err := read(ctx)
	if err != nil {
		return false, err
	}
	return r.emit(ctx, c)
}

// stream reads the chunk in its snapshot and sends its rows in parts of about
// packetBytes as they are read.
func (r *rowStreamer) stream(ctx context.Context) (done bool, err error) {
	fence, fenceTime, err := r.begin(ctx)
	if err != nil {
		return false, err
	}
	defer r.endSnapshot(ctx, &err)
	r.logChunk("streamed", fence, nil)
	part := r.newPart(fence, fenceTime)
	last := 0 // where the part's last row starts
	_, more, err := r.scan(ctx, func(values [][]byte) (int, error) {
		last = len(part.PackedRows)
		part.PackedRows = rowcodec.AppendRow(part.PackedRows, values)
		part.RowCount++
		size := len(part.PackedRows) - last
		if len(part.PackedRows) < r.partBytes {
			return size, nil
		}
		part.LastPk = r.plan.keyOf(values) // still valid: the next Scan has not run
		testhook.Delay(ctx, testhook.ChunkEmit)
		if err := r.sendPart(ctx, part, false); err != nil {
			return 0, err
		}
		r.lastPK = rowKey(part.LastPk)
		part = r.newPart(fence, fenceTime)
		return size, nil
	})
	if r.defChanged(err) {
		part, err, more = r.newPart(fence, fenceTime), nil, true
	}
	if err != nil {
		return false, err
	}
	done = !more
	if part.RowCount > 0 {
		// The last row's RawBytes died with the scan; take the key from its copy.
		part.LastPk = r.plan.keyOf(lastRow(part.PackedRows[last:]))
		r.lastPK = rowKey(part.LastPk)
	}
	if r.rechecking && done {
		// The rows whose digests differed are sent: the verify goes on with
		// digests after them.
		r.rechecking = false
		if r.recheckTo != nil {
			part.LastPk = packKey(r.recheckTo)
			r.lastPK, done = r.recheckTo, false
		}
	}
	part.TableDone = done
	testhook.Delay(ctx, testhook.ChunkEmit)
	return done, r.sendPart(ctx, part, true)
}

// scan runs the chunk's SELECT in the open snapshot and calls row for each row
// (values in streamed column order, valid until row returns), which returns
// the bytes the row took. The scan ends at the chunk's LIMIT or, below it,
// once the rows read reach the sizer's bound; n is the number of rows
// scanned and more says rows may follow them (the LIMIT was reached or the
// scan ended early). The sizer learns the rows' width from it.
func (r *rowStreamer) scan(ctx context.Context, row func(values [][]byte) (int, error)) (n int64, more bool, err error) {
	limit := r.sizer.limit()
	var upTo [][]byte
	if r.rechecking {
		upTo = r.recheckTo
	}
	q, err := r.plan.chunkQuery(r.lastPK, upTo, limit)
	if err != nil {
		return 0, false, err
	}
	rows, err := r.conn.QueryContext(ctx, q)
	if err != nil {
		return 0, false, fmt.Errorf("select chunk: %w", grants.Refused(ctx, r.conn, "source", err, selectGrant(r.plan.table.Database, r.plan.table.Name)))
	}
	// Closing the rows of a chunk that ended early reads the rest of its
	// result off the wire and drops it: memory holds only what was kept.
	defer rows.Close()
	raw := make([]sql.RawBytes, r.plan.width+len(r.plan.typeMaps))
	dest := make([]any, len(raw))
	for i := range raw {
		dest[i] = &raw[i]
	}
	values := make([][]byte, r.plan.width)
	typed := make([][]byte, len(r.plan.typeMaps))
	var typer mysqljson.TypeMapper
	var bytes int64
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return 0, false, fmt.Errorf("read chunk row: %w", err)
		}
		for i, v := range raw[:r.plan.width] {
			values[i] = v
		}
		for j := range typed {
			i := r.plan.jsonIdx[j]
			if typeMap := raw[r.plan.width+j]; typeMap != nil {
				if typed[j], err = typer.AppendTypeMap(typed[j][:0], values[i], typeMap); err != nil {
					return 0, false, fmt.Errorf("read chunk row: column %s: %w", r.plan.jsonNames[j], err)
				}
				values[i] = typed[j]
			}
		}
		n++
		size, err := row(values)
		if err != nil {
			return 0, false, err
		}
		bytes += int64(size)
		if n < limit && r.sizer.full(bytes) {
			more = true
			break
		}
	}
	if err := rows.Err(); err != nil {
		return 0, false, fmt.Errorf("read chunk: %w", err)
	}
	r.sizer.observe(n, bytes)
	return n, more || n == limit, nil
}

// sharedChunk returns the chunk after r.lastPK, fenced in the stream's merger:
// another stream's read of it when there is one and the merger can place it
// at its fence (merger.canFence), else one this stream reads, shared with the
// group when no other stream was reading it.
func (r *rowStreamer) sharedChunk(ctx context.Context) (*sharedChunk, error) {
	if r.shared == nil {
		return r.readOwn(ctx)
	}
	c, lead := r.shared.acquire(r.lastPK)
	defer r.shared.took(c)
	if lead {
		err := r.read(ctx, c)
		r.shared.finish(c, err)
		if err != nil {
			return nil, err
		}
		return c, r.placeRead(ctx, c, "read for the group")
	}
	switch err := c.wait(ctx); {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case err == nil:
		ok, err := r.sink.share(ctx, r.plan.table.Name, c.fencePos, c.held)
		if err != nil {
			return nil, err
		}
		if ok {
			r.logChunk("another stream's read", c.fence, c)
			return c, nil
		}
		r.log.Debug("chunk not shared: the stream placed changes its fence lacks", zap.String("fence", c.fence.GetGtidSet()))
	}
	// The leader failed, or this stream has placed changes after its fence.
	return r.readOwn(ctx)
}

// readOwn reads the chunk after r.lastPK for this stream alone.
func (r *rowStreamer) readOwn(ctx context.Context) (*sharedChunk, error) {
	c := &sharedChunk{}
	if err := r.read(ctx, c); err != nil {
		return nil, err
	}
	return c, r.placeRead(ctx, c, "read alone")
}

// placeRead gives the merger the fence of a chunk this stream read.
func (r *rowStreamer) placeRead(ctx context.Context, c *sharedChunk, how string) error {
	if err := r.sink.fence(ctx, r.plan.table.Name, c.fencePos, c.held); err != nil {
		return err
	}
	r.logChunk(how, c.fence, c)
	return nil
}

// logChunk writes the debug line of a chunk placed at fence, with what is
// known of its rows (nothing yet for a chunk streamed as it is read).
func (r *rowStreamer) logChunk(how string, fence *rowliftv1.Position, c *sharedChunk) {
	ce := r.log.Check(zap.DebugLevel, "chunk placed")
	if ce == nil {
		return
	}
	fields := []zap.Field{zap.String("how", how), zap.String("fence", fence.GetGtidSet()), zap.String("after", keyText(r.lastPK))}
	if c != nil {
		var last [][]byte
		if c.lastPK != nil {
			last = rowKey(c.lastPK)
		}
		fields = append(fields, zap.String("last", keyText(last)), zap.Bool("more", c.more), zap.Int("bytes", len(c.rows)))
	}
	ce.Write(fields...)
}

// keyText shows a key's values for the debug log ("" for none).
func keyText(key [][]byte) string {
	vals := make([]string, len(key))
	for i, v := range key {
		if v == nil {
			vals[i] = "NULL"
			continue
		}
		vals[i] = strconv.Quote(string(v))
	}
	return strings.Join(vals, ",")
}

// read reads the chunk after r.lastPK into c, every row scanned, in its own
// snapshot, which ends before the rows are emitted. It does not touch the
// sink, so a stream whose target is slow never holds up the others waiting
// for the chunk.
func (r *rowStreamer) read(ctx context.Context, c *sharedChunk) (err error) {
	c.fenceTime = time.Now().UnixMicro() // the snapshot sees at least every commit before now
	c.fence, c.fencePos, c.held, err = r.snapshot(ctx)
	if err != nil {
		return err
	}
	defer r.endSnapshot(ctx, &err)
	last := 0
	_, more, err := r.scan(ctx, func(values [][]byte) (int, error) {
		last = len(c.rows)
		c.rows = rowcodec.AppendRow(c.rows, values)
		return len(c.rows) - last, nil
	})
	if r.defChanged(err) {
		more, err = true, nil
	}
	if err != nil {
		return err
	}
	c.more = more
	if len(c.rows) > 0 {
		c.lastPK = r.plan.keyOf(lastRow(c.rows[last:]))
	}
	return nil
}

// defChanged reports a chunk read that failed because a DDL rebuilt its table
// after the snapshot began (error 1412). The DDL committed before the snapshot
// held the table, so the merger drops the chunk (merger.voids); it ends
// without an error, and the stream goes on to the DDL and ends after it.
func (r *rowStreamer) defChanged(err error) bool {
	if !isMySQLError(err, tableDefChanged) {
		return false
	}
	r.log.Info("the table changed before its chunk's snapshot held it; the chunk is dropped and read again after the change", zap.Error(err))
	return true
}

// emit sends the rows of a read chunk that are in the stream's key range, in
// parts of about packetBytes. The last part carries the last key scanned, past
// the last row sent when the range filtered the rest out, so the copy moves on
// by the rows scanned, the same in every stream.
func (r *rowStreamer) emit(ctx context.Context, c *sharedChunk) (done bool, err error) {
	part := r.newPart(c.fence, c.fenceTime)
	rows := rowcodec.ReadRows(c.rows)
	for rows.Next() {
		keep, err := r.plan.filter.keep(rows.Values())
		if err != nil {
			return false, err
		}
		if !keep {
			continue
		}
		raw := rows.Raw()
		part.PackedRows = append(rowcodec.Grow(part.PackedRows, len(raw)), raw...)
		part.RowCount++
		if len(part.PackedRows) >= r.partBytes {
			part.LastPk = r.plan.keyOf(rows.Values())
			testhook.Delay(ctx, testhook.ChunkEmit)
			if err := r.sendPart(ctx, part, false); err != nil {
				return false, err
			}
			part = r.newPart(c.fence, c.fenceTime)
		}
	}
	if err := rows.Err(); err != nil {
		return false, err // this package packed them: a bug
	}
	if c.lastPK != nil {
		part.LastPk = c.lastPK
		r.lastPK = rowKey(c.lastPK)
	}
	part.TableDone = !c.more
	testhook.Delay(ctx, testhook.ChunkEmit)
	return !c.more, r.sendPart(ctx, part, true)
}

// begin opens the chunk's snapshot and places its fence in the stream; the
// caller defers endSnapshot. fenceTime is the source's clock just before.
func (r *rowStreamer) begin(ctx context.Context) (fence *rowliftv1.Position, fenceTime int64, err error) {
	fenceTime = time.Now().UnixMicro() // the snapshot sees at least every commit before now
	fence, fencePos, held, err := r.snapshot(ctx)
	if err != nil {
		return nil, 0, err
	}
	if err := r.sink.fence(ctx, r.plan.table.Name, fencePos, held); err != nil {
		r.endSnapshot(ctx, &err)
		return nil, 0, err
	}
	return fence, fenceTime, nil
}

// endSnapshot ends the chunk's snapshot; a failure to is *err unless *err
// already holds one.
func (r *rowStreamer) endSnapshot(ctx context.Context, err *error) {
	if _, cerr := r.conn.ExecContext(context.WithoutCancel(ctx), "COMMIT"); *err == nil && cerr != nil {
		*err = fmt.Errorf("end snapshot: %w", cerr)
	}
}

// snapshot begins the chunk's snapshot and returns its fence, and held, the
// position once the snapshot holds its table (fencer.hold). A snapshot older
// than the stream's start (possible just after a resume, while the last applied
// transactions become visible) is retried: its rows would miss transactions the
// reader will not send again.
func (r *rowStreamer) snapshot(ctx context.Context) (fence *rowliftv1.Position, fencePos, held position, err error) {
	for {
		fence, err := r.fence.begin(ctx, r.conn, r.plan.table.Name)
		if testhook.UnsafeFence() {
			fence, err = unsafeFence(ctx, r.conn)
		}
		if err != nil {
			return nil, nil, nil, err
		}
		set, err := gtid.Parse(fence.GetGtidSet())
		if err != nil {
			return nil, nil, nil, fmt.Errorf("parse fence: %w", err)
		}
		if pos := (gtidPos{set}); r.start == nil || pos.covers(r.start) {
			testhook.Delay(ctx, testhook.ChunkRead)
			text, err := r.fence.hold(ctx, r.conn, r.plan.table.Name)
			if err == nil {
				set, err = gtid.Parse(text)
			}
			if err != nil {
				r.endSnapshot(ctx, &err)
				return nil, nil, nil, err
			}
			return fence, pos, gtidPos{set}, nil
		}
		if _, err := r.conn.ExecContext(ctx, "COMMIT"); err != nil {
			return nil, nil, nil, fmt.Errorf("end snapshot: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, nil, nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

const (
	// firstPartBytes is the size of a copy's first part. The parts after it
	// double up to packetBytes, so the target starts writing rows while the
	// first chunk is still being read instead of waiting for a full packet,
	// and the large parts that cost the target few commits follow at once.
	firstPartBytes = 64 << 10
	// partStartBytes is the room a new part starts with: enough that a part
	// of a large table grows only a few times, small enough that the many
	// short parts of small tables and narrow key ranges do not each hold a
	// packet's worth.
	partStartBytes = 256 << 10
)

func (r *rowStreamer) newPart(fence *rowliftv1.Position, fenceTimeUS int64) *rowliftv1.Chunk {
	return &rowliftv1.Chunk{Table: r.plan.table.Name, Fence: fence, FenceTimeUs: fenceTimeUS, Verify: r.verify,
		TraceContext: r.span.carried, PackedRows: make([]byte, 0, min(partStartBytes, r.partBytes+r.partBytes/8))}
}

// sendPart hands a part to the sink and lets the next part grow.
func (r *rowStreamer) sendPart(ctx context.Context, part *rowliftv1.Chunk, last bool) error {
	r.partBytes = min(2*r.partBytes, r.packetBytes)
	r.span.sent(part.RowCount, len(part.PackedRows))
	return r.sink.part(ctx, part, last)
}

// lastRow unpacks the one row packed at the start of block, which this
// package packed and is well-formed.
func lastRow(block []byte) [][]byte {
	rows := rowcodec.ReadRows(block)
	rows.Next()
	return rows.Values()
}

// packKey packs key values as a chunk's last_pk.
func packKey(key [][]byte) *rowliftv1.Row {
	row := &rowliftv1.Row{}
	rowcodec.Pack(row, key)
	return row
}

// rowKey unpacks a row this package packed, which is always well-formed.
func rowKey(row *rowliftv1.Row) [][]byte {
	vals, _ := rowcodec.Values(nil, row)
	return vals
}

// unsafeFence is the broken fence the race test must catch: the position read,
// then the chunk read by a plain SELECT that sees later commits too.
func unsafeFence(ctx context.Context, conn *sql.Conn) (*rowliftv1.Position, error) {
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		return nil, err
	}
	pos, err := dbconn.Position(ctx, conn)
	return &rowliftv1.Position{GtidSet: pos}, err
}
