package streamer

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/schema"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// tablePlan is what the streamer needs to copy one table: the columns it streams,
// where the key columns are among them, and the SQL of each chunk. It does no I/O.
type tablePlan struct {
	table  *schema.Table
	cols   []schema.Column
	fields *rowliftv1.TableFields
	// keyIdx[i] is the position in cols of the i-th key column.
	keyIdx   []int
	keyKinds []rowcodec.Kind
	keyCS    []string
	// selectFrom is "SELECT `a`, `b` FROM `db`.`t`"; orderBy is " ORDER BY `k1`, `k2`".
	selectFrom string
	orderBy    string
	keyIdents  []string
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
		p.keyKinds = append(p.keyKinds, rowcodec.KindOf(c.DataType))
		p.keyCS = append(p.keyCS, c.Charset)
		p.keyIdents = append(p.keyIdents, rowcodec.Ident(c.Name))
	}
	var b strings.Builder
	b.WriteString("SELECT ")
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		switch c.DataType {
		case "float":
			// A FLOAT's text form has 6 significant digits; its DOUBLE has them all.
			b.WriteString("CAST(" + rowcodec.Ident(c.Name) + " AS DOUBLE)")
		case "year":
			// As text: go-sql-driver parses a YEAR column's "0000" to 0, and LOAD
			// DATA reads the string '0' as 2000.
			b.WriteString("CAST(" + rowcodec.Ident(c.Name) + " AS CHAR)")
		default:
			b.WriteString(rowcodec.Ident(c.Name))
		}
	}
	b.WriteString(" FROM ")
	b.WriteString(rowcodec.QualifiedIdent(t.Database, t.Name))
	p.selectFrom = b.String()
	p.orderBy = " ORDER BY " + strings.Join(p.keyIdents, ", ")
	return p, nil
}

// chunkQuery returns the SELECT of the chunk after lastPK (nil: from the start).
// The key comparison is written so that the server uses a range scan on the key:
// a leading `k1 >= v1` bounds the index, and the rest is the lexicographic
// "greater than" expanded per column (row constructors are not range-optimized by
// every server version).
func (p *tablePlan) chunkQuery(lastPK [][]byte, limit int64) (string, error) {
	if lastPK != nil && len(lastPK) != len(p.keyIdx) {
		return "", fmt.Errorf("last PK of %s has %d values, key has %d columns", p.table.Name, len(lastPK), len(p.keyIdx))
	}
	buf := make([]byte, 0, len(p.selectFrom)+len(p.orderBy)+64)
	buf = append(buf, p.selectFrom...)
	if lastPK != nil {
		buf = append(buf, " WHERE "...)
		buf = append(buf, p.keyIdents[0]...)
		buf = append(buf, " >= "...)
		buf = p.literal(buf, 0, lastPK[0])
		buf = append(buf, " AND "...)
		buf = p.greater(buf, lastPK, 0)
	}
	buf = append(buf, p.orderBy...)
	buf = append(buf, " LIMIT "...)
	buf = strconv.AppendInt(buf, limit, 10)
	return string(buf), nil
}

// greater appends (k_i, ..., k_n) > (v_i, ..., v_n) as
// (k_i > v_i OR (k_i = v_i AND <greater from i+1>)).
func (p *tablePlan) greater(buf []byte, v [][]byte, i int) []byte {
	buf = append(buf, '(')
	buf = append(buf, p.keyIdents[i]...)
	buf = append(buf, " > "...)
	buf = p.literal(buf, i, v[i])
	if i+1 < len(v) {
		buf = append(buf, " OR ("...)
		buf = append(buf, p.keyIdents[i]...)
		buf = append(buf, " = "...)
		buf = p.literal(buf, i, v[i])
		buf = append(buf, " AND "...)
		buf = p.greater(buf, v, i+1)
		buf = append(buf, ')')
	}
	return append(buf, ')')
}

func (p *tablePlan) literal(buf []byte, keyCol int, v []byte) []byte {
	return rowcodec.AppendComparable(buf, p.keyKinds[keyCol], p.keyCS[keyCol], v)
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
