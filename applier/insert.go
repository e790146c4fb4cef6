package applier

import (
	"fmt"

	"github.com/rowlift/rowlift/internal/rowcodec"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// insertBuilder turns copied rows into multi-row INSERT statements no larger than
// the target's max_allowed_packet allows. It is immutable and shared by workers;
// each worker brings its own scratch buffers.
type insertBuilder struct {
	prefix   []byte // INSERT INTO `db`.`t` (`a`, `b`) VALUES
	kinds    []rowcodec.Kind
	maxBytes int
}

// scratch is one worker's reusable buffers, so statements cost no allocation once
// the buffers have grown.
type scratch struct {
	buf   []byte
	ends  []int
	stmts [][]byte
	row   []byte
	rows  rowcodec.Rows
}

// build returns the statements that insert the chunk's rows, in order. They
// alias the scratch buffers and are valid until its next use; building ahead
// of executing lets a worker prepare its statements while the previous part
// is inserting.
func (b *insertBuilder) build(s *scratch, c *rowliftv1.Chunk) ([][]byte, error) {
	s.buf, s.ends, s.stmts = s.buf[:0], s.ends[:0], s.stmts[:0]
	start, n := 0, 0
	err := eachRow(&s.rows, c, len(b.kinds), func(values [][]byte) error {
		s.row = append(s.row[:0], '(')
		for i, v := range values {
			if i > 0 {
				s.row = append(s.row, ',')
			}
			var err error
			if s.row, err = rowcodec.AppendLiteral(s.row, b.kinds[i], v); err != nil {
				return permanent("copy: %v", err)
			}
		}
		s.row = append(s.row, ')')
		if len(b.prefix)+len(s.row) > b.maxBytes {
			return fmt.Errorf("a row of %d bytes does not fit the target's max_allowed_packet (%d bytes usable): raise max_allowed_packet on the target",
				len(s.row), b.maxBytes)
		}
		if n > 0 && len(s.buf)-start+1+len(s.row) > b.maxBytes {
			s.ends = append(s.ends, len(s.buf))
			start, n = len(s.buf), 0
		}
		if n == 0 {
			s.buf = append(s.buf, b.prefix...)
		} else {
			s.buf = append(s.buf, ',')
		}
		s.buf = append(s.buf, s.row...)
		n++
		return nil
	})
	if err != nil {
		return nil, err
	}
	if n > 0 {
		s.ends = append(s.ends, len(s.buf))
	}
	// Slice only now: appends above may have moved the buffer.
	start = 0
	for _, end := range s.ends {
		s.stmts = append(s.stmts, s.buf[start:end:end])
		start = end
	}
	return s.stmts, nil
}

// newInsertBuilder builds the INSERTs into the table ident (`db`.`table`),
// each column's values written as literals of its kind.
func newInsertBuilder(ident string, fields []*rowliftv1.Field, kinds []rowcodec.Kind, maxBytes int) *insertBuilder {
	b := &insertBuilder{maxBytes: maxBytes, kinds: kinds}
	b.prefix = append(b.prefix, "INSERT INTO "...)
	b.prefix = append(b.prefix, ident...)
	b.prefix = append(b.prefix, " ("...)
	for i, f := range fields {
		if i > 0 {
			b.prefix = append(b.prefix, ", "...)
		}
		b.prefix = rowcodec.AppendIdent(b.prefix, f.GetName())
	}
	b.prefix = append(b.prefix, ") VALUES "...)
	return b
}

// eachRow calls row with each of a chunk's rows (values valid until row
// returns), read with rows, until row fails, checking that each has one value
// per streamed column and that the chunk holds the rows it says.
func eachRow(rows *rowcodec.Rows, c *rowliftv1.Chunk, ncols int, row func(values [][]byte) error) error {
	rows.Reset(c.GetPackedRows())
	for rows.Next() {
		if len(rows.Values()) != ncols {
			return fmt.Errorf("row %d has %d values, table has %d streamed columns", rows.Count(), len(rows.Values()), ncols)
		}
		if err := row(rows.Values()); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if int64(rows.Count()) != c.GetRowCount() {
		return fmt.Errorf("chunk says it holds %d rows and holds %d", c.GetRowCount(), rows.Count())
	}
	return nil
}

// unpackRow splits a streamed row into its values (into dst's storage) and
// checks it has one value per streamed column.
func unpackRow(dst [][]byte, r *rowliftv1.Row, ncols int) ([][]byte, error) {
	vals, err := rowcodec.Values(dst[:0], r)
	if err != nil {
		return vals, err
	}
	if len(vals) != ncols {
		return vals, fmt.Errorf("row has %d values, table has %d streamed columns", len(vals), ncols)
	}
	return vals, nil
}
