package streamer

import (
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/keyrange"
	"github.com/rowlift/rowlift/internal/mysqljson"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/schema"
	"github.com/rowlift/rowlift/internal/verify"
	"github.com/rowlift/rowlift/internal/vindex"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// tablePlan is what the streamer needs to copy one table: the columns it streams,
// where the key columns are among them, and the SQL of each chunk. It does no I/O.
type tablePlan struct {
	table  *schema.Table
	cols   []schema.Column
	fields *rowliftv1.TableFields
	// keyIdx[i] is the position in cols of the i-th key column.
	keyIdx []int
	key    rowcodec.Key
	// exprs are the select expressions of cols; width is how many values a
	// selected row has.
	exprs []string
	width int
	// typeMaps are selected after the width values: the type map of each
	// MySQL JSON value, at jsonIdx among them (see mysqljson.TypeMapExpr).
	typeMaps  []string
	jsonIdx   []int
	jsonNames []string
	// jsonText moves MySQL JSON as its text (StreamOptions.json_as_text):
	// no type maps, and replay's patches dropped.
	jsonText bool
	// selectFrom is "SELECT `a`, `b` FROM `db`.`t`"; orderBy is " ORDER BY `k1`, `k2`".
	selectFrom string
	orderBy    string
	// filter keeps the rows in the stream's key range (nil: no key range).
	filter *shardFilter
	// rangeCond, under numeric, is the key range as a condition on the
	// sharding column, which the chunk SELECT carries: the server then sends
	// only the range's rows (and reads only those when the column leads the
	// key), so the stream reads alone, unfiltered ("": none).
	rangeCond string
	// ahead, when set, is how the source's table differs from the target's,
	// whose fields the plan then has (see behind): a schema change of the
	// table must come before the position the source's table was read at.
	ahead error
}

// behind returns the plan the stream reads the table with, given the target
// table as the applier found it in targetDB (nil: none). The target mirrors
// the source at the stream's position, so where the source's table has
// changed shape since (an ALTER still ahead in the binlog, which the target
// gets when the stream reaches it), the binlog rows before that change have
// the target's columns: the plan is then the target's, carrying the
// difference in ahead, and no chunk of it is read. A target of the same
// shape leaves p as it is.
func (p *tablePlan) behind(target *rowliftv1.TableFields, targetDB string, jsonText bool) (*tablePlan, error) {
	if target == nil {
		return p, nil
	}
	ahead := schema.CheckShape(schema.FromFields(targetDB, target.GetTable(), target), p.fields)
	if ahead == nil {
		return p, nil
	}
	shape := schema.FromFields(p.table.Database, p.table.Name, target)
	shape.RowsEstimate, shape.BytesEstimate = p.table.RowsEstimate, p.table.BytesEstimate
	hp, err := newTablePlan(shape, nil, jsonText)
	if err != nil {
		return nil, fmt.Errorf("target table %s.%s as the stream's plan: %w", targetDB, target.GetTable(), err)
	}
	hp.ahead = ahead
	return hp, nil
}

func newTablePlan(t *schema.Table, columns []string, jsonText bool) (*tablePlan, error) {
	cols, err := t.Streamed(columns)
	if err != nil {
		return nil, err
	}
	p := &tablePlan{table: t, cols: cols, fields: t.Fields(cols), jsonText: jsonText}
	for _, i := range p.fields.PkColumns {
		c := cols[i]
		p.keyIdx = append(p.keyIdx, int(i))
		p.key.Kinds = append(p.key.Kinds, rowcodec.KindOf(c.DataType))
		p.key.Charsets = append(p.key.Charsets, c.Charset)
		p.key.Idents = append(p.key.Idents, rowcodec.Ident(c.Name))
	}
	table := rowcodec.QualifiedIdent(t.Database, t.Name)
	for i, c := range cols {
		p.exprs = append(p.exprs, rowcodec.SelectExpr(c.Name, c.DataType))
		if c.DataType == "json" { // MySQL's; MariaDB's JSON is longtext
			p.jsonIdx = append(p.jsonIdx, i)
			if !jsonText {
				p.typeMaps = append(p.typeMaps, mysqljson.TypeMapExpr(rowcodec.Ident(c.Name)))
				p.jsonNames = append(p.jsonNames, c.Name)
			}
		}
	}
	p.width = len(p.exprs)
	p.selectFrom = "SELECT " + strings.Join(append(slices.Clip(p.exprs), p.typeMaps...), ", ") + " FROM " + table
	p.orderBy = " ORDER BY " + strings.Join(p.key.Idents, ", ")
	return p, nil
}

// verifying is the plan of the table's verify chunks: the verify plan's
// select list (key forms and row hash), then the key columns as the copy
// selects them (its last PK), or with repair every streamed column (the rows
// to rewrite a differing target row with).
func (p *tablePlan) verifying(vp *verify.Plan, repair bool) *tablePlan {
	v := *p
	tail := p.exprs
	v.keyIdx = make([]int, len(p.keyIdx))
	for i, idx := range p.keyIdx {
		v.keyIdx[i] = vp.Width() + idx
	}
	v.jsonIdx = nil
	for _, i := range p.jsonIdx {
		v.jsonIdx = append(v.jsonIdx, vp.Width()+i)
	}
	if !repair {
		tail = make([]string, len(p.keyIdx))
		for i, idx := range p.keyIdx {
			tail[i] = p.exprs[idx]
			v.keyIdx[i] = vp.Width() + i
		}
		v.typeMaps, v.jsonIdx = nil, nil // keys hold no JSON
	}
	if p.filter != nil {
		// The verify chunk's rows are filtered to the range like the copy's: by
		// the sharding column among the streamed ones, or added at the end.
		f := *p.filter
		f.idx = vp.Width() + p.filter.idx
		if !repair {
			if i := slices.Index(p.keyIdx, p.filter.idx); i >= 0 {
				f.idx = vp.Width() + i
			} else {
				tail = append(tail, p.exprs[p.filter.idx])
				f.idx = vp.Width() + len(tail) - 1
			}
		}
		v.filter = &f
	}
	v.width = vp.Width() + len(tail)
	v.selectFrom = "SELECT " + vp.Columns() + ", " + strings.Join(append(slices.Clip(tail), v.typeMaps...), ", ") +
		" FROM " + rowcodec.QualifiedIdent(p.table.Database, p.table.Name)
	return &v
}

// chunkQuery returns the SELECT of the chunk after lastPK (nil: from the
// start) and up to upTo (nil: to the end).
func (p *tablePlan) chunkQuery(lastPK, upTo [][]byte, limit int64) (string, error) {
	buf := make([]byte, 0, len(p.selectFrom)+len(p.orderBy)+64)
	buf = append(buf, p.selectFrom...)
	buf, err := p.appendRange(buf, lastPK, upTo)
	if err != nil {
		return "", err
	}
	buf = append(buf, p.orderBy...)
	buf = append(buf, " LIMIT "...)
	buf = strconv.AppendInt(buf, limit, 10)
	return string(buf), nil
}

// appendRange appends the WHERE clause of the rows after lastPK (nil: from
// the start) up to upTo (nil: to the end) in the plan's key range.
func (p *tablePlan) appendRange(buf []byte, lastPK, upTo [][]byte) ([]byte, error) {
	for _, k := range [][][]byte{lastPK, upTo} {
		if k != nil && len(k) != len(p.keyIdx) {
			return nil, fmt.Errorf("key bound of %s has %d values, key has %d columns", p.table.Name, len(k), len(p.keyIdx))
		}
	}
	where := " WHERE "
	if lastPK != nil {
		buf = append(buf, where...)
		buf = p.key.AppendAfter(buf, lastPK)
		where = " AND "
	}
	if upTo != nil {
		buf = append(buf, where...)
		buf = p.key.AppendUpTo(buf, upTo)
		where = " AND "
	}
	if p.rangeCond != "" {
		buf = append(buf, where...)
		buf = append(buf, p.rangeCond...)
	}
	return buf, nil
}

// keyOf packs the key values of a row (values in streamed column order).
func (p *tablePlan) keyOf(values [][]byte) *rowliftv1.Row {
	key := make([][]byte, len(p.keyIdx))
	for i, idx := range p.keyIdx {
		key[i] = values[idx]
	}
	return packKey(key)
}

// shardFilter keeps the rows of a table whose keyspace ID is in the stream's
// key range. A plan without a key range has none, so a plain move does no
// per-row work for it.
type shardFilter struct {
	table  string
	column string
	// idx is the sharding column's position in the streamed columns.
	idx int
	fn  vindex.Func
	kr  keyrange.Range
}

// keyspaceIDError is a row whose keyspace ID cannot be computed: the stream
// stops on it (FailedPrecondition) rather than drop a row no shard would get.
type keyspaceIDError struct {
	table, column string
	value         []byte
	err           error
}

func (e *keyspaceIDError) Error() string {
	v := "NULL"
	if e.value != nil {
		v = strconv.Quote(string(e.value))
	}
	return fmt.Sprintf("table %s: sharding column %s has value %s, which has no keyspace ID: %v", e.table, e.column, v, e.err)
}

func (e *keyspaceIDError) Unwrap() error { return e.err }

// GRPCStatus makes the error a FailedPrecondition however deeply it is
// wrapped: retrying cannot help until the row changes.
func (e *keyspaceIDError) GRPCStatus() *status.Status {
	return status.New(codes.FailedPrecondition, e.Error())
}

// integerTypes are the column types an integer-only function takes.
var integerTypes = map[string]bool{"tinyint": true, "smallint": true, "mediumint": true, "int": true, "bigint": true}

// keyRange reads a request's key range; ok is false when it is unset or the
// whole keyspace, which needs no filter.
func keyRange(kr *rowliftv1.KeyRange) (r keyrange.Range, ok bool, err error) {
	if len(kr.GetStart()) == 0 && len(kr.GetEnd()) == 0 {
		return keyrange.Range{}, false, nil
	}
	r, err = keyrange.Parse(hex.EncodeToString(kr.GetStart()) + "-" + hex.EncodeToString(kr.GetEnd()))
	if err != nil {
		return keyrange.Range{}, false, err
	}
	return r, true, nil
}

// checkSharding checks what a key range needs of a table request before any
// schema is read: a sharding column and a known function (empty: hash).
func checkSharding(t *rowliftv1.TableRequest) (vindex.Func, error) {
	if t.GetShardingColumn() == "" {
		return "", fmt.Errorf("table %s has no sharding_column: a stream with a key range needs one for every table", t.GetName())
	}
	fn, err := vindex.Parse(t.GetShardingFunction())
	if err != nil {
		return "", fmt.Errorf("table %s: %w", t.GetName(), err)
	}
	return fn, nil
}

// shard gives the plan its key range filter on column under fn, failing with
// InvalidArgument when the column is not streamed and FailedPrecondition when
// fn cannot take its type.
func (p *tablePlan) shard(column string, fn vindex.Func, kr keyrange.Range) error {
	for i, c := range p.cols {
		if !strings.EqualFold(c.Name, column) {
			continue
		}
		if fn.IntegerOnly() && !integerTypes[c.DataType] {
			return status.Errorf(codes.FailedPrecondition, "table %s: sharding column %s is %s, but %s takes integer columns only "+
				"(tinyint to bigint): use xxhash for other types", p.table.Name, c.Name, c.DataType, fn)
		}
		p.filter = &shardFilter{table: p.table.Name, column: c.Name, idx: i, fn: fn, kr: kr}
		if fn == vindex.Numeric {
			p.rangeCond = numericCond(rowcodec.Ident(c.Name), kr, strings.Contains(strings.ToLower(c.ColumnType), "unsigned"))
		}
		return nil
	}
	return status.Errorf(codes.InvalidArgument, "table %s: sharding column %s is not among its streamed columns", p.table.Name, column)
}

// valueInterval is a half-open interval of integer column values in decimal,
// either end empty for unbounded.
type valueInterval struct{ lo, hi string }

// numericIntervals are the column values whose numeric keyspace ID is in r:
// the value itself for an unsigned column; for a signed one, the two's
// complement, so negative values hold the IDs from 2^63 up.
func numericIntervals(r keyrange.Range, unsigned bool) []valueInterval {
	start, end, hasEnd := r.Bounds()
	dec := func(v uint64) string { return strconv.FormatUint(v, 10) }
	if unsigned {
		iv := valueInterval{}
		if start > 0 {
			iv.lo = dec(start)
		}
		if hasEnd {
			iv.hi = dec(end)
		}
		return []valueInterval{iv}
	}
	const half = uint64(1) << 63
	signed := func(v uint64) string { return strconv.FormatInt(int64(v), 10) }
	var out []valueInterval
	if start < half { // the non-negative values
		iv := valueInterval{lo: dec(start)}
		if hasEnd && end < half {
			iv.hi = dec(end)
		}
		out = append(out, iv)
	}
	if !hasEnd || end > half { // the negative values
		iv := valueInterval{hi: "0"}
		if start > half {
			iv.lo = signed(start)
		}
		if hasEnd {
			iv.hi = signed(end)
		}
		out = append(out, iv)
	}
	return out
}

// numericCond is numericIntervals as a SQL condition on column (an
// identifier).
func numericCond(column string, r keyrange.Range, unsigned bool) string {
	var ors []string
	for _, iv := range numericIntervals(r, unsigned) {
		var ands []string
		if iv.lo != "" {
			ands = append(ands, column+" >= "+iv.lo)
		}
		if iv.hi != "" {
			ands = append(ands, column+" < "+iv.hi)
		}
		if len(ands) == 0 {
			return ""
		}
		ors = append(ors, strings.Join(ands, " AND "))
	}
	return "(" + strings.Join(ors, " OR ") + ")"
}

// perShardKeys names each unique key of a sharded table that lacks its
// sharding column: the target shards enforce it per shard only, so two rows
// of different shards may then share a value the source refused.
func perShardKeys(ctx context.Context, db *sql.DB, p *tablePlan) ([]string, error) {
	keys, err := schema.ReadUniqueKeys(ctx, db, p.table.Database, p.table.Name)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, k := range keys {
		var parts []string
		has := false
		for _, part := range k.Parts {
			if part.Column == "" {
				parts = append(parts, part.Expression)
				continue
			}
			parts = append(parts, part.Column)
			has = has || strings.EqualFold(part.Column, p.filter.column)
		}
		if !has {
			out = append(out, fmt.Sprintf("table %s: unique key %s (%s) does not contain the sharding column %s, so after the reshard "+
				"each target shard enforces it for its own rows only", p.table.Name, k.Name, strings.Join(parts, ", "), p.filter.column))
		}
	}
	return out, nil
}

// keep reports whether a row (values in streamed column order) is in range.
func (f *shardFilter) keep(values [][]byte) (bool, error) {
	if f.idx >= len(values) {
		return false, fmt.Errorf("table %s: sharding column %s: row has %d values, want at least %d", f.table, f.column, len(values), f.idx+1)
	}
	return f.keepValue(values[f.idx])
}

// keepRow is keep for a packed row of a binlog change, which it does not
// unpack beyond the sharding column.
func (f *shardFilter) keepRow(row *rowliftv1.Row) (bool, error) {
	v, err := packedValue(row, f.idx)
	if err != nil {
		return false, fmt.Errorf("table %s: sharding column %s: %w", f.table, f.column, err)
	}
	return f.keepValue(v)
}

// keepValue reports whether a row whose sharding column holds v is in range.
func (f *shardFilter) keepValue(v []byte) (bool, error) {
	id, err := f.fn.ID(v)
	if err != nil {
		return false, &keyspaceIDError{table: f.table, column: f.column, value: v, err: err}
	}
	return f.kr.Contains(id), nil
}

// packedValue is the i-th value of a packed row (nil for NULL), without
// unpacking the others.
func packedValue(row *rowliftv1.Row, i int) ([]byte, error) {
	lengths := row.GetLengths()
	if i >= len(lengths) {
		return nil, fmt.Errorf("packed row has %d values, want at least %d", len(lengths), i+1)
	}
	var off int64
	for _, n := range lengths[:i] {
		if n > 0 {
			off += n
		}
	}
	n := lengths[i]
	switch {
	case n < 0:
		return nil, nil
	case off+n > int64(len(row.GetValues())):
		return nil, fmt.Errorf("packed row is truncated: value of %d bytes at offset %d of %d", n, off, len(row.GetValues()))
	}
	return row.GetValues()[off : off+n : off+n], nil
}

// filterChange judges a binlog change by the key range: a change whose row
// stays in range goes as is; one whose row leaves the range becomes a delete,
// one whose row enters it an insert; one that is never in range is dropped
// (nil).
func (f *shardFilter) filterChange(ch *rowliftv1.RowChange) (*rowliftv1.RowChange, error) {
	return restrict(ch, f.keepRow)
}
