package applier

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"
	"go.opentelemetry.io/otel/attribute"

	"github.com/rowlift/rowlift/applier/writeset"
	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/metrics"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/tracing"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// player holds what every replay worker shares about one stream: the target
// tables, the stream's owner token, and the position the target has committed.
// The target is a consistent prefix of the source, so a statement that does not
// find the row its before image describes, or an insert that finds its key taken,
// is divergence: the workflow stops with the key rather than absorb it. The one
// exception is the window an out-of-order run may have committed before it died
// (maybeApplied): those transactions are written again idempotently.
type player struct {
	db       *sql.DB
	workflow string
	source   string
	owner    int64
	tables   map[string]*targetTable
	// stats records what the stream commits.
	stats *metrics.ApplyStream
	// spanAttrs name the stream (workflow, source, target) on its spans.
	spanAttrs []attribute.KeyValue
	// applied is the GTID set committed on the target; transactions in it are
	// skipped (a streamer resumed from an older position sends them again). The
	// replayer and the copy writer move it, under mu: a committed chunk covers
	// its fence.
	mu           sync.Mutex
	applied      *gtid.Set
	maybeApplied *gtid.Set
	// repairing: a rewind went past transactions the source lost, whose rows
	// a verify with repair puts right; until it has, every transaction is
	// written idempotently over whatever they left (state.Resume.Repairing).
	repairing atomic.Bool
}

func newPlayer(db *sql.DB, workflow, source, target string, owner int64, tables map[string]*targetTable, resume state.Resume,
	stats *metrics.ApplyStream) (*player, error) {
	applied, err := gtid.Parse(resume.Position)
	if err != nil {
		return nil, fmt.Errorf("committed position %q: %w", resume.Position, err)
	}
	maybe, err := gtid.Parse(resume.MaybeApplied)
	if err != nil {
		return nil, fmt.Errorf("maybe-applied position %q: %w", resume.MaybeApplied, err)
	}
	p := &player{db: db, workflow: workflow, source: source, owner: owner, tables: tables, stats: stats,
		spanAttrs: []attribute.KeyValue{tracing.Workflow.String(workflow), tracing.Source.String(source), tracing.Target.String(target)},
		applied:   applied, maybeApplied: maybe}
	p.repairing.Store(resume.Repairing != "")
	return p, nil
}

// tableVerified follows a table's verify to its end: once the verify with
// repair of every table has finished, the stream's repair after a rewind is
// over (state.SaveVerifyChunk ended it) and replay judges rows strictly again.
func (p *player) tableVerified(ctx context.Context) error {
	if !p.repairing.Load() {
		return nil
	}
	r, err := state.Repairing(ctx, p.db, p.workflow, p.source)
	if err != nil {
		return err
	}
	p.repairing.Store(r != "")
	return nil
}

// divergence is a permanent error naming the transaction and the row.
func divergence(trx *rowliftv1.Transaction, table, what string) error {
	return &permanentError{diverged: table, err: fmt.Errorf("divergence applying source transaction %s to %s: %s; the target changed "+
		"outside rowlift or missed a change: verify the table and restart its copy", trx.GetGtid(), table, what)}
}

// rowWriter builds the statements of a group of transactions and runs them;
// each replay worker has its own, for its buffers.
type rowWriter struct {
	p *player
	// keys are the target tables' unique keys, for idempotent rewrites.
	keys map[string]*writeset.Table
	// sql holds the statements, separated by ';'; stmts says where each ends.
	sql    []byte
	stmts  []stmt
	query  []byte
	buf    []byte
	values [][]byte
	// keyVals is keyBytes's scratch, item addNet's, slot the replayer's
	// progress write.
	keyVals [][]byte
	item    []byte
	slot    []byte
}

// stmt is one statement of a group and what its result must be.
type stmt struct {
	end int
	trx *rowliftv1.Transaction
	t   *targetTable
	ch  *rowliftv1.RowChange
	// exact: the statement must find exactly one row, the before image's.
	exact bool
	// rows, when not zero, is how many rows a coalesced DELETE must find (ch
	// is nil then; a statement of several changes names none).
	rows int64
}

func (w *rowWriter) reset() {
	w.sql, w.stmts = w.sql[:0], w.stmts[:0]
}

func (w *rowWriter) text(i int) []byte {
	start := 0
	if i > 0 {
		start = w.stmts[i-1].end + 1
	}
	return w.sql[start:w.stmts[i].end]
}

func (w *rowWriter) push(built []byte, s stmt) {
	if len(w.stmts) > 0 {
		w.sql = append(w.sql, ';')
	}
	w.sql = append(w.sql, built...)
	w.buf = built[:0] // its storage serves the next statement
	s.end = len(w.sql)
	w.stmts = append(w.stmts, s)
}

// add appends the statements of one transaction. idempotent writes them so that
// applying them a second time changes nothing: upserts and deletes that may find
// nothing, never REPLACE (which would delete rows other unique keys point at).
func (w *rowWriter) add(trx *rowliftv1.Transaction, idempotent bool) error {
	for _, ev := range trx.GetEvents() {
		t := w.p.tables[ev.GetTable()]
		if t == nil {
			return permanent("apply %s: streamer sent rows of table %q, which the workflow does not stream", trx.GetGtid(), ev.GetTable())
		}
		for _, ch := range ev.GetChanges() {
			var err error
			if idempotent {
				err = w.addRewrite(trx, t, ch)
			} else {
				err = w.addChange(trx, t, ch)
			}
			if err != nil {
				return fmt.Errorf("apply %s to %s: %w", trx.GetGtid(), t.name, err)
			}
		}
	}
	return nil
}

// exec runs the statements in a new transaction, as few round trips as
// maxPacket allows (several statements per query), and checks that each
// statement keyed by a before image found its row. tail, when not nil, is one
// more statement sent at the end of the last query (a replay group's progress,
// state.AppendSaveSlot); exec returns the rows it changed.
func (w *rowWriter) exec(ctx context.Context, conn *sql.Conn, maxPacket int, tail []byte) (int64, error) {
	if tail != nil {
		maxPacket -= len(tail) + 1
	}
	w.query = append(w.query[:0], "START TRANSACTION"...)
	for first := 0; ; {
		last := first
		for last < len(w.stmts) && (last == first || len(w.query)+1+len(w.text(last)) <= maxPacket) {
			if len(w.query) > 0 {
				w.query = append(w.query, ';')
			}
			w.query = append(w.query, w.text(last)...)
			last++
		}
		end := last == len(w.stmts)
		withTail := end && tail != nil
		if withTail {
			w.query = append(append(w.query, ';'), tail...)
		}
		affected, err := execMulti(ctx, conn, w.query)
		if err != nil {
			return 0, err
		}
		var tailRows int64
		if withTail {
			affected, tailRows = affected[:len(affected)-1], affected[len(affected)-1]
		}
		if err := w.check(affected[len(affected)-(last-first):], first); err != nil {
			return 0, err
		}
		if end {
			return tailRows, nil
		}
		w.query, first = w.query[:0], last
	}
}

// check compares the rows changed by the statements from first on with what
// each must find.
func (w *rowWriter) check(affected []int64, first int) error {
	for i, n := range affected {
		s := w.stmts[first+i]
		if s.rows != 0 && n != s.rows {
			return fmt.Errorf("%w (%d of %d rows of %s)", errNotAsCoalesced, n, s.rows, s.t.name)
		}
		if s.exact && n != 1 {
			what := map[bool]string{true: "delete", false: "update"}[s.ch.GetAfter() == nil]
			return divergence(s.trx, s.t.name, fmt.Sprintf("no row %s to %s", w.describe(s.t, s.ch.GetBefore()), what))
		}
	}
	return nil
}

// diagnose runs the statements one at a time in a transaction it rolls back,
// to name the statement a failed multi-statement query broke on; nil when
// none fails.
func (w *rowWriter) diagnose(ctx context.Context, conn *sql.Conn) error {
	if _, err := conn.ExecContext(ctx, "START TRANSACTION"); err != nil {
		return err
	}
	defer conn.ExecContext(ctx, "ROLLBACK") //nolint:errcheck // the connection goes if this fails
	for i, s := range w.stmts {
		if _, err := conn.ExecContext(ctx, string(w.text(i))); err != nil {
			return rejected(fmt.Sprintf("apply %s to %s", s.trx.GetGtid(), s.t.name), err, func(msg string) error {
				return divergence(s.trx, s.t.name, fmt.Sprintf("the key of %s is already taken (%s)", w.describe(s.t, s.ch.GetAfter()), msg))
			})
		}
	}
	return nil
}

// execMulti runs a query of several statements and returns each one's affected
// rows, which database/sql does not expose.
func execMulti(ctx context.Context, conn *sql.Conn, query []byte) ([]int64, error) {
	var affected []int64
	err := conn.Raw(func(dc any) error {
		res, err := dc.(driver.ExecerContext).ExecContext(ctx, string(query), nil)
		if err != nil {
			return err
		}
		affected = res.(mysql.Result).AllRowsAffected()
		return nil
	})
	return affected, err
}

// advance commits a new position with no rows (a heartbeat, a skipped DDL).
func (p *player) advance(ctx context.Context, position string, sourceTimeUS int64) error {
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("advance position: begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	return p.commit(ctx, tx, position, sourceTimeUS)
}

func (p *player) commit(ctx context.Context, tx *sql.Tx, position string, sourceTimeUS int64) error {
	set, err := gtid.Parse(position)
	if err != nil {
		return fmt.Errorf("position: %w", err)
	}
	if err := state.SavePosition(ctx, tx, p.workflow, p.source, p.owner, position, sourceTimeUS); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit position %s: %w", position, err)
	}
	p.committed(set, sourceTimeUS)
	return nil
}

// seen reports whether the target has committed gtid (skip it: a resumed
// streamer sends it again) and whether a dead out-of-order run may have
// (write it idempotently, as during a repair), parsing it once.
func (p *player) seen(trxGTID string) (applied, maybeApplied bool, err error) {
	g, err := gtid.Parse(trxGTID)
	if err != nil {
		return false, false, fmt.Errorf("transaction GTID: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.applied.Contains(g), p.repairing.Load() || p.maybeApplied.Contains(g), nil
}

// position returns the committed position.
func (p *player) position() *gtid.Set {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.applied.Clone()
}

// saveFence records, in a chunk's transaction, that the target now covers the
// chunk's fence: every transaction at or before it was placed before the chunk
// and is applied, or was dropped because the chunk holds its rows. Without it a
// restarted stream would read those dropped transactions again and judge them
// against a copy that has moved past their rows, applying them twice. It
// returns the position to record with after commit. The fence's time is the
// source time the target is now current to, so lag reads true during a copy.
func (p *player) saveFence(ctx context.Context, tx *sql.Tx, fence string, fenceTimeUS int64) (*gtid.Set, error) {
	f, err := gtid.Parse(fence)
	if err != nil {
		return nil, fmt.Errorf("fence: %w", err)
	}
	merged := p.position()
	if err := merged.Advance(f); err != nil {
		return nil, fmt.Errorf("fence: %w", err)
	}
	if err := state.SavePosition(ctx, tx, p.workflow, p.source, p.owner, merged.String(), fenceTimeUS); err != nil {
		return nil, err
	}
	return merged, nil
}

// committed records a position a transaction has committed, whose last item
// the source committed at sourceTimeUS.
func (p *player) committed(set *gtid.Set, sourceTimeUS int64) {
	p.mu.Lock()
	p.applied = set
	p.mu.Unlock()
	p.stats.PositionCommitted(sourceTimeUS)
}

// rewrite writes a change idempotently: the after image is upserted (an update
// whose key changed first deletes the row at the old key), a delete deletes
// whatever is at the key. Applying a window of transactions again this way, in
// source order, ends where applying it once did.
func (w *rowWriter) addRewrite(trx *rowliftv1.Transaction, t *targetTable, ch *rowliftv1.RowChange) error {
	before, after := ch.GetBefore(), ch.GetAfter()
	s := stmt{trx: trx, t: t, ch: ch}
	if before != nil && (after == nil || !w.sameKey(t, before, after)) {
		buf, err := w.delete(t, before)
		if err != nil {
			return err
		}
		w.push(buf, s)
	}
	if after == nil {
		return nil
	}
	// A row that holds one of after's unique values under another key got it
	// from a later transaction, which this replay rewrites too: clear it.
	for _, key := range w.keys[t.name].UniqueKeys() {
		buf, ok, err := w.deleteOthers(t, key, after)
		if err != nil {
			return err
		}
		if ok {
			w.push(buf, s)
		}
	}
	buf, err := w.insertRow(t, after, true)
	if err != nil {
		return err
	}
	w.push(buf, s)
	return nil
}

// deleteOthers builds the DELETE of rows other than row's own (by its key) that
// hold row's values of a unique key; ok is false when a part is NULL, which
// no uniqueness applies to.
func (w *rowWriter) deleteOthers(t *targetTable, key []writeset.KeyPart, row *rowliftv1.Row) (buf []byte, ok bool, err error) {
	vals, err := w.row(t, row)
	if err != nil {
		return nil, false, err
	}
	buf = append(w.buf[:0], "DELETE FROM "...)
	buf = append(buf, t.ident...)
	buf = append(buf, " WHERE "...)
	for i, part := range key {
		if vals[part.Pos] == nil {
			return nil, false, nil
		}
		if i > 0 {
			buf = append(buf, " AND "...)
		}
		buf = w.comparison(buf, t, part.Pos, part.Prefix, vals[part.Pos])
	}
	buf = append(buf, " AND NOT ("...)
	for i, idx := range t.fields.GetPkColumns() {
		if i > 0 {
			buf = append(buf, " AND "...)
		}
		buf = w.comparison(buf, t, int(idx), 0, vals[idx])
	}
	w.buf = append(buf, ')')
	return w.buf, true, nil
}

// comparison appends "column = value", or for a prefix key part
// "LEFT(column, n) = LEFT(value, n)", compared under the column's collation.
func (w *rowWriter) comparison(buf []byte, t *targetTable, pos, prefix int, val []byte) []byte {
	f := t.fields.GetFields()[pos]
	kind := t.kinds[pos]
	if prefix == 0 {
		buf = rowcodec.AppendIdent(buf, f.GetName())
		buf = append(buf, " = "...)
		return rowcodec.AppendComparable(buf, kind, f.GetCharset(), val)
	}
	n := strconv.Itoa(prefix)
	buf = append(buf, "LEFT("...)
	buf = rowcodec.AppendIdent(buf, f.GetName())
	buf = append(buf, ", "+n+") = LEFT("...)
	buf = rowcodec.AppendComparable(buf, kind, f.GetCharset(), val)
	return append(buf, ", "+n+")"...)
}

// sameKey reports whether two images have byte-identical key values.
func (w *rowWriter) sameKey(t *targetTable, a, b *rowliftv1.Row) bool {
	va, err1 := rowcodec.Values(nil, a)
	vb, err2 := rowcodec.Values(nil, b)
	if err1 != nil || err2 != nil {
		return false
	}
	for _, idx := range t.fields.GetPkColumns() {
		if !bytes.Equal(va[idx], vb[idx]) || (va[idx] == nil) != (vb[idx] == nil) {
			return false
		}
	}
	return true
}

func (w *rowWriter) addChange(trx *rowliftv1.Transaction, t *targetTable, ch *rowliftv1.RowChange) error {
	before, after := ch.GetBefore(), ch.GetAfter()
	var buf []byte
	var err error
	switch {
	case before == nil:
		buf, err = w.insert(t, after)
	case after == nil:
		buf, err = w.delete(t, before)
	default:
		buf, err = w.update(t, before, after)
	}
	if err != nil {
		return err
	}
	w.push(buf, stmt{trx: trx, t: t, ch: ch, exact: before != nil})
	return nil
}

func (w *rowWriter) insert(t *targetTable, after *rowliftv1.Row) ([]byte, error) {
	return w.insertRow(t, after, false)
}

// insertRow builds the INSERT of a row; upsert makes it overwrite the row that
// holds any of its keys.
func (w *rowWriter) insertRow(t *targetTable, after *rowliftv1.Row, upsert bool) ([]byte, error) {
	buf, err := w.appendValues(append(w.buf[:0], t.insertHead...), t, after)
	if err != nil {
		return nil, err
	}
	if upsert {
		buf = append(buf, t.upsert...)
	}
	return buf, nil
}

// insertHead is "INSERT INTO t (c1, c2, ...) VALUES " of every streamed
// column, which replay's INSERTs start with.
func insertHead(ident string, fields []*rowliftv1.Field) string {
	buf := append([]byte("INSERT INTO "), ident...)
	buf = append(buf, " ("...)
	for i, f := range fields {
		if i > 0 {
			buf = append(buf, ", "...)
		}
		buf = rowcodec.AppendIdent(buf, f.GetName())
	}
	return string(append(buf, ") VALUES "...))
}

// appendValues appends a row's values as an INSERT's "(v1,v2,...)".
func (w *rowWriter) appendValues(buf []byte, t *targetTable, r *rowliftv1.Row) ([]byte, error) {
	vals, err := w.row(t, r)
	if err != nil {
		return nil, err
	}
	buf = append(buf, '(')
	for i, v := range vals {
		if i > 0 {
			buf = append(buf, ',')
		}
		if buf, err = rowcodec.AppendLiteral(buf, t.kinds[i], v); err != nil {
			return nil, permanent("replay %s: %v", t.name, err)
		}
	}
	return append(buf, ')'), nil
}

func (w *rowWriter) update(t *targetTable, before, after *rowliftv1.Row) ([]byte, error) {
	buf := append(w.buf[:0], "UPDATE "...)
	buf = append(buf, t.ident...)
	buf = append(buf, " SET "...)
	vals, err := w.row(t, after)
	if err != nil {
		return nil, err
	}
	for i, f := range t.fields.GetFields() {
		if i > 0 {
			buf = append(buf, ", "...)
		}
		buf = rowcodec.AppendIdent(buf, f.GetName())
		buf = append(buf, " = "...)
		if buf, err = rowcodec.AppendLiteral(buf, t.kinds[i], vals[i]); err != nil {
			return nil, permanent("replay %s: %v", t.name, err)
		}
	}
	return w.where(buf, t, before)
}

func (w *rowWriter) delete(t *targetTable, before *rowliftv1.Row) ([]byte, error) {
	buf := append(w.buf[:0], "DELETE FROM "...)
	buf = append(buf, t.ident...)
	return w.where(buf, t, before)
}

// where appends the key condition of before. Key values compare under their
// column's collation, as the source ordered and identified them.
func (w *rowWriter) where(buf []byte, t *targetTable, before *rowliftv1.Row) ([]byte, error) {
	vals, err := w.row(t, before)
	if err != nil {
		return nil, err
	}
	return w.keyCondition(append(buf, " WHERE "...), t, vals), nil
}

// keyCondition appends "k1 = v1 AND k2 = v2" of a row's key values.
func (w *rowWriter) keyCondition(buf []byte, t *targetTable, vals [][]byte) []byte {
	for i, idx := range t.fields.GetPkColumns() {
		if i > 0 {
			buf = append(buf, " AND "...)
		}
		buf = w.comparison(buf, t, int(idx), 0, vals[idx])
	}
	return buf
}

func (w *rowWriter) row(t *targetTable, r *rowliftv1.Row) ([][]byte, error) {
	var err error
	w.values, err = unpackRow(w.values, r, len(t.fields.GetFields()))
	return w.values, err
}

// describe renders a row's key for messages: (id=5, region='eu').
func (w *rowWriter) describe(t *targetTable, r *rowliftv1.Row) string {
	vals, err := rowcodec.Values(nil, r)
	if err != nil {
		return "(undecodable row)"
	}
	var parts []string
	for _, idx := range t.fields.GetPkColumns() {
		parts = append(parts, fmt.Sprintf("%s=%q", t.fields.GetFields()[idx].GetName(), vals[idx]))
	}
	return "(" + strings.Join(parts, ", ") + ")"
}
