package applier

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/reshard"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/schema"
	"github.com/rowlift/rowlift/internal/tracing"
	"github.com/rowlift/rowlift/internal/verify"
	"github.com/rowlift/rowlift/internal/vindex"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// verifier compares one table's verify chunks with the target. A chunk sits in
// the stream exactly at its fence and is checked once everything before it has
// committed and before anything after it is applied, so the target is exactly
// at the chunk's source snapshot: the comparison is exact under live traffic
// with no long snapshot on either side. With repair it rewrites the keys that
// differ from the source's rows in the transaction that records the chunk.
type verifier struct {
	db   *sql.DB
	play *player
	t    *targetTable
	plan *verify.Plan
	key  rowcodec.Key
	// keyExprs select the key as the copy streams it, for deleting extra rows.
	keyExprs []string
	state    state.TableVerify
	// scope, in a reshard, is which of the target's rows this stream's chunks
	// answer for (nil: all of them).
	scope *verifyScope
	// merge, when the target receives several sources whole, is this
	// stream's source among them (nil: it answers for every target row).
	merge *mergeScope
	// lower is the last verified key (nil: from the table's start).
	lower     [][]byte
	maxPacket int
	flavor    dbconn.Flavor
	// jobs queue digest chunks for the check worker that runs beside the
	// stream (nil: none runs), which sends its end to checked; fail ends
	// the stream with a check's error.
	jobs    chan digestJob
	checked chan error
	fail    context.CancelCauseFunc
	// recheckFound counts the differences found since a recheck began.
	recheckFound int64
	log          *zap.Logger
}

// verifyScope keeps the target rows a reshard stream's verify compares: a
// target shard holds the rows of several streams (one per overlapping source),
// and each compares those of its own range; the target's first stream also
// takes the rows outside the target's range, which no stream should have
// written, so that they count as extra.
type verifyScope struct {
	column string
	fn     vindex.Func
	keep   func(id uint64) bool
}

// mergeScope is a stream's source among the several a target receives
// whole. Its verify compares the target rows of the source's keys and
// records, in the target's state, the keys it holds and the target's keys it
// does not; once every source has verified a table, the keys no source
// holds are extra and those several hold are reported
// (state.FinishMergeVerify). Under writes this is exact: a key a source
// holds is on the target at that source's chunk's point, so no source finds
// it foreign there, and a key every source found foreign was on the target
// at each source's point without that source holding it.
type mergeScope struct {
	index   int
	sources []string
}

// mergeOf is the merge scope of a stream (nil when it does not merge).
func mergeOf(st reshard.Stream) *mergeScope {
	if !st.Merges() {
		return nil
	}
	m := &mergeScope{}
	for i, src := range st.Spec.GetSources() {
		m.sources = append(m.sources, src.GetName())
		if src.GetName() == st.Source.GetName() {
			m.index = i
		}
	}
	return m
}

// scopeOf is the verify scope of a stream's table (nil: the whole table).
func scopeOf(st reshard.Stream, t *rowliftv1.TableSpec) (*verifyScope, error) {
	if !st.Filtered || t.GetReference() {
		return nil, nil
	}
	fn, err := vindex.Parse(t.GetShardingFunction())
	if err != nil {
		return nil, permanent("verify %s: %v", t.GetName(), err)
	}
	return &verifyScope{column: t.GetShardingColumn(), fn: fn, keep: func(id uint64) bool {
		return st.Range.Contains(id) || (st.First && !st.TargetRange.Contains(id))
	}}, nil
}

func newVerifier(ctx context.Context, db *sql.DB, play *player, t *targetTable, tv state.TableVerify, scope *verifyScope, merge *mergeScope,
	jsonText bool, maxPacket int, fail context.CancelCauseFunc, log *zap.Logger) (*verifier, error) {
	tt, err := schema.Load(ctx, db, t.database, t.table)
	if err != nil {
		return nil, fmt.Errorf("verify %s: target: %w", t.name, err)
	}
	flavor, _, err := dbconn.ServerFlavor(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("verify %s: target: %w", t.name, err)
	}
	names := make([]string, len(t.fields.GetFields()))
	for i, f := range t.fields.GetFields() {
		names[i] = f.GetName()
	}
	plan, err := verify.NewPlan(ctx, db, tt, names, jsonText)
	if err != nil {
		return nil, permanent("verify %s: target: %v", t.name, err)
	}
	if merge != nil && tv.Repair {
		return nil, permanent("verify %s: a repair of a merge of several sources cannot tell which source's row a key should have", t.name)
	}
	v := &verifier{db: db, play: play, t: t, plan: plan, state: tv, scope: scope, merge: merge, maxPacket: maxPacket, flavor: flavor, fail: fail,
		log: log.With(zap.String("table", t.name))}
	for _, idx := range t.fields.GetPkColumns() {
		f := t.fields.GetFields()[idx]
		v.key.Idents = append(v.key.Idents, rowcodec.Ident(f.GetName()))
		v.key.Kinds = append(v.key.Kinds, rowcodec.KindOf(f.GetDataType()))
		v.key.Charsets = append(v.key.Charsets, f.GetCharset())
		v.keyExprs = append(v.keyExprs, rowcodec.SelectExpr(f.GetName(), f.GetDataType()))
	}
	if tv.LastPK != nil {
		if v.lower, err = rowcodec.Values(nil, tv.LastPK); err != nil {
			return nil, fmt.Errorf("verify %s: last key: %w", t.name, err)
		}
	}
	return v, nil
}

// query selects the target's rows of the chunk's key range: after the last
// verified key, up to the chunk's last key (to the end on the table's last
// chunk, so extra rows above the source's last key are found).
func (v *verifier) query(c *rowliftv1.Chunk) (string, error) {
	buf := []byte("SELECT " + v.plan.Columns())
	for _, e := range v.keyExprs {
		buf = append(buf, ", "...)
		buf = append(buf, e...)
	}
	if v.scope != nil {
		i := slices.IndexFunc(v.t.fields.GetFields(), func(f *rowliftv1.Field) bool { return strings.EqualFold(f.GetName(), v.scope.column) })
		if i < 0 {
			return "", permanent("verify %s: sharding column %s is not among the streamed columns", v.t.name, v.scope.column)
		}
		f := v.t.fields.GetFields()[i]
		buf = append(buf, ", "...)
		buf = append(buf, rowcodec.SelectExpr(f.GetName(), f.GetDataType())...)
	}
	buf, err := v.appendRange(buf, c)
	if err != nil {
		return "", err
	}
	buf = append(buf, " ORDER BY "...)
	buf = append(buf, v.plan.OrderBy()...)
	return string(buf), nil
}

// appendRange appends FROM and WHERE of the chunk's key range.
func (v *verifier) appendRange(buf []byte, c *rowliftv1.Chunk) ([]byte, error) {
	buf = append(buf, " FROM "...)
	buf = append(buf, v.t.ident...)
	where := " WHERE "
	if v.lower != nil {
		buf = append(buf, where...)
		buf = v.key.AppendAfter(buf, v.lower)
		where = " AND "
	}
	if !c.GetTableDone() {
		upper, err := rowcodec.Values(nil, c.GetLastPk())
		if err != nil || len(upper) != len(v.key.Idents) {
			return nil, permanent("verify %s: chunk's last key does not fit the key (%v)", v.t.name, err)
		}
		buf = append(buf, where...)
		buf = v.key.AppendUpTo(buf, upper)
	}
	return buf, nil
}

// check compares one verify chunk with the target, repairs if asked, and
// commits what it found with the table's verify progress.
func (v *verifier) check(ctx context.Context, c *rowliftv1.Chunk, w *rowWriter) (err error) {
	if err := v.wait(); err != nil {
		return err
	}
	span := w.p.startSpan(ctx, "rowlift.applier.verify_chunk", c.GetTraceContext(), v.t.name)
	defer func() { tracing.End(span, err, c.GetRowCount(), int64(len(c.GetPackedRows()))) }()
	q, err := v.query(c)
	if err != nil {
		return err
	}
	conn, err := v.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("verify %s: %w", v.t.name, err)
	}
	defer conn.Close()
	committed := false
	defer func() {
		if !committed {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	src := &chunkRows{rows: rowcodec.ReadRows(c.GetPackedRows()), width: v.plan.Width()}
	// A merge's keys are recorded in batches as the merge meets them: the
	// table's last chunk meets every other source's keys above this one's.
	var mergeKeys []state.MergeKey
	saveKeys := func() error {
		err := state.SaveMergeKeys(ctx, v.db, v.play.workflow, v.t.name, v.merge.index, mergeKeys)
		mergeKeys = mergeKeys[:0]
		return err
	}
	found := state.VerifyChunk{Done: c.GetTableDone()}
	var res verify.Result
	w.reset()
	repair := &rowliftv1.Transaction{Gtid: "verify repair of " + v.t.name}
	err = func() error {
		rows, err := conn.QueryContext(ctx, q)
		if err != nil {
			return fmt.Errorf("verify %s: target: %w", v.t.name, err)
		}
		defer rows.Close()
		dst := &targetRows{rows: rows, width: v.plan.Width() + len(v.keyExprs)}
		if v.scope != nil {
			at := dst.width
			dst.width++
			dst.keep = func(vals [][]byte) (bool, error) {
				id, err := v.scope.fn.ID(vals[at])
				if err != nil {
					return false, permanent("verify %s: target row with sharding column %s = %q has no keyspace ID: %v", v.t.name, v.scope.column, vals[at], err)
				}
				return v.scope.keep(id), nil
			}
		}
		merge := v.plan.Merge
		if v.merge != nil {
			merge = v.plan.MergeAll
		}
		_, _, err = merge(src, dst, func(d verify.Diff) error {
			if v.merge != nil && d.Kind != verify.Missing {
				// Told once all sources have verified the table: a key held
				// here (whose row may differ because another source holds it
				// too), or one on the target this source lacks.
				mergeKeys = append(mergeKeys, state.MergeKey{Form: slices.Clone(d.KeyForm), Shown: d.Key, Holder: d.Kind != verify.Extra,
					Differs: d.Kind == verify.Different, Foreign: d.Kind == verify.Extra})
				if len(mergeKeys) == mergeKeyBatch {
					return saveKeys()
				}
				return nil
			}
			res.Add(d, state.MaxVerifyExamples)
			if !v.state.Repair {
				return nil
			}
			found.Repaired++
			v.log.Warn("verify repairs a key that differs from the source", zap.String("difference", d.String()))
			if d.Kind == verify.Extra {
				return w.addRewrite(repair, v.t, &rowliftv1.RowChange{Before: v.keyRow(dst.vals[v.plan.Width():])})
			}
			return w.addRewrite(repair, v.t, &rowliftv1.RowChange{After: src.current()})
		})
		return err
	}()
	if err != nil {
		return err
	}
	if err := src.rows.Err(); err != nil {
		return permanent("verify %s: %v", v.t.name, err)
	}
	if int64(src.rows.Count()) != c.GetRowCount() {
		return permanent("verify %s: chunk says it holds %d rows and holds %d", v.t.name, c.GetRowCount(), src.rows.Count())
	}
	found.RowsCompared = int64(src.rows.Count())
	found.Missing, found.Extra, found.Different, found.Examples = res.Missing, res.Extra, res.Different, res.Examples
	// A filtered chunk may have no row in range and still carry the key it
	// scanned up to.
	if c.GetLastPk() != nil {
		found.LastPK = c.GetLastPk()
	}
	if v.state.Recheck {
		v.recheckFound += res.Missing + res.Extra + res.Different
		through := v.state.RowsThrough
		found.EndRecheck = found.Done || through != nil && proto.Equal(through, c.GetLastPk())
	}
	if _, err := w.exec(ctx, conn, v.maxPacket, nil); err != nil {
		return fmt.Errorf("verify %s: repair: %w", v.t.name, err)
	}
	if v.merge != nil {
		if err := saveKeys(); err != nil {
			return err
		}
		if err := v.finishMerge(ctx, conn, &found); err != nil {
			return err
		}
	}
	if err := state.SaveVerifyChunk(ctx, conn, v.play.workflow, v.play.source, v.play.owner, v.t.name, v.state.StartedAtUS, found); err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("verify %s: commit: %w", v.t.name, err)
	}
	committed = true
	if found.LastPK != nil {
		v.lower, _ = rowcodec.Values(nil, found.LastPK)
	}
	if found.EndRecheck {
		v.state.Recheck, v.state.RowsThrough = false, nil
		if v.recheckFound == 0 {
			v.log.Warn("verify found no difference in the rows of a chunk whose digests differed: later changes, replicated " +
				"since the digests' position, replaced the rows that differed there")
		}
		v.recheckFound = 0
	}
	if found.Missing+found.Extra+found.Different > 0 {
		v.log.Warn("verify found differences", zap.Int64("missing", found.Missing), zap.Int64("extra", found.Extra),
			zap.Int64("different", found.Different), zap.Strings("examples", found.Examples))
	}
	if found.Done {
		v.log.Info("table verified")
		return v.play.tableVerified(ctx)
	}
	return nil
}

// mergeKeyBatch is how many keys a merge's chunk records at once.
const mergeKeyBatch = 1000

// finishMerge adds to what a merge stream's last chunk of a table found, in
// its transaction on conn, what every source's keys together tell (extra
// keys, keys on several sources, differing rows), once all sources have
// verified the table. The keys themselves are recorded outside that
// transaction: recording one twice (a chunk checked again after a crash) is
// a no-op, since each only sets this source's bits.
func (v *verifier) finishMerge(ctx context.Context, conn *sql.Conn, found *state.VerifyChunk) error {
	if !found.Done {
		return nil
	}
	extra, several, different, last, err := state.FinishMergeVerify(ctx, conn, v.play.workflow, v.t.name, v.merge.index, v.merge.sources)
	if err != nil || !last {
		return err
	}
	found.Extra += int64(len(extra))
	found.Different += int64(len(several) + len(different))
	found.Examples = slices.Concat(found.Examples, extra, several, different)
	return nil
}

// keyRow is a row of the table's streamed width holding only key values, for
// the delete of an extra row.
func (v *verifier) keyRow(key [][]byte) *rowliftv1.Row {
	vals := make([][]byte, len(v.t.fields.GetFields()))
	for i, idx := range v.t.fields.GetPkColumns() {
		vals[idx] = key[i]
	}
	row := &rowliftv1.Row{}
	rowcodec.Pack(row, vals)
	return row
}

// chunkRows are a verify chunk's source rows as one side of a merge: the
// select list first, then the key or, with repair, the whole row.
type chunkRows struct {
	rows  *rowcodec.Rows
	width int
	vals  [][]byte
}

func (s *chunkRows) Next() ([][]byte, error) {
	if !s.rows.Next() {
		return nil, nil // a malformed row: check reads rows.Err
	}
	if s.vals = s.rows.Values(); len(s.vals) < s.width {
		return nil, permanent("verify chunk row %d has %d values, want at least %d", s.rows.Count(), len(s.vals), s.width)
	}
	return s.vals[:s.width], nil
}

// current is the source row last returned, as the streamed row after the
// select list (a verify with repair sends it whole).
func (s *chunkRows) current() *rowliftv1.Row {
	row := &rowliftv1.Row{}
	rowcodec.Pack(row, s.vals[s.width:])
	return row
}

// targetRows are the target's rows of a chunk's range as the other side,
// those keep accepts (nil: all).
type targetRows struct {
	rows  *sql.Rows
	width int
	keep  func([][]byte) (bool, error)
	raw   []sql.RawBytes
	dest  []any
	vals  [][]byte
}

func (s *targetRows) Next() ([][]byte, error) {
	if s.raw == nil {
		s.raw, s.dest, s.vals = make([]sql.RawBytes, s.width), make([]any, s.width), make([][]byte, s.width)
		for i := range s.raw {
			s.dest[i] = &s.raw[i]
		}
	}
	for s.rows.Next() {
		if err := s.rows.Scan(s.dest...); err != nil {
			return nil, err
		}
		for i, v := range s.raw {
			s.vals[i] = v
		}
		if s.keep == nil {
			return s.vals, nil
		}
		if ok, err := s.keep(s.vals); err != nil || ok {
			return s.vals, err
		}
	}
	return nil, s.rows.Err()
}
