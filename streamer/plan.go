package streamer

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/schema"
	"github.com/rowlift/rowlift/internal/verify"
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
	// selectFrom is "SELECT `a`, `b` FROM `db`.`t`"; orderBy is " ORDER BY `k1`, `k2`".
	selectFrom string
	orderBy    string
}

func newTablePlan(t *schema.Table, columns []string) (*tablePlan, error) {
	cols, err := t.Streamed(columns)
	if err != nil {
		return nil, err
	}
	p := &tablePlan{table: t, cols: cols, fields: t.Fields(cols)}
	for _, i := range p.fields.PkColumns {
		c := cols[i]
		p.keyIdx = append(p.keyIdx, int(i))
		p.key.Kinds = append(p.key.Kinds, rowcodec.KindOf(c.DataType))
		p.key.Charsets = append(p.key.Charsets, c.Charset)
		p.key.Idents = append(p.key.Idents, rowcodec.Ident(c.Name))
	}
	for _, c := range cols {
		p.exprs = append(p.exprs, rowcodec.SelectExpr(c.Name, c.DataType))
	}
	p.width = len(p.exprs)
	p.selectFrom = "SELECT " + strings.Join(p.exprs, ", ") + " FROM " + rowcodec.QualifiedIdent(t.Database, t.Name)
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
	if !repair {
		tail = make([]string, len(p.keyIdx))
		for i, idx := range p.keyIdx {
			tail[i] = p.exprs[idx]
			v.keyIdx[i] = vp.Width() + i
		}
	}
	v.width = vp.Width() + len(tail)
	v.selectFrom = "SELECT " + vp.Columns() + ", " + strings.Join(tail, ", ") + " FROM " + rowcodec.QualifiedIdent(p.table.Database, p.table.Name)
	return &v
}

// chunkQuery returns the SELECT of the chunk after lastPK (nil: from the start).
func (p *tablePlan) chunkQuery(lastPK [][]byte, limit int64) (string, error) {
	if lastPK != nil && len(lastPK) != len(p.keyIdx) {
		return "", fmt.Errorf("last PK of %s has %d values, key has %d columns", p.table.Name, len(lastPK), len(p.keyIdx))
	}
	buf := make([]byte, 0, len(p.selectFrom)+len(p.orderBy)+64)
	buf = append(buf, p.selectFrom...)
	if lastPK != nil {
		buf = append(buf, " WHERE "...)
		buf = p.key.AppendAfter(buf, lastPK)
	}
	buf = append(buf, p.orderBy...)
	buf = append(buf, " LIMIT "...)
	buf = strconv.AppendInt(buf, limit, 10)
	return string(buf), nil
}

// keyOf packs the key values of a row (values in streamed column order).
func (p *tablePlan) keyOf(values [][]byte) *rowliftv1.Row {
	key := make([][]byte, len(p.keyIdx))
	for i, idx := range p.keyIdx {
		key[i] = values[idx]
	}
	row := &rowliftv1.Row{}
	rowcodec.Pack(row, key)
	return row
}
