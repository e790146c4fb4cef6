// Package verify compares a table on a source server with the same table on a
// target server, row by row, and reports exactly which keys are missing, extra or
// different. End-to-end tests use it to prove a copy correct, and operators run it
// through the verify command.
//
// Values are never decoded in Go: each server hashes every column of every row
// (SHA-256 of an exact text or byte form per column, then SHA-256 of those per
// row; MySQL 9 has no MD5 unless its classic hashing component is installed), so
// what is compared is what the servers store. Each side runs one streaming query
// ordered by the source's key, and the two ordered streams are merge-joined in
// constant memory. Keys are compared in Go in exactly the order the servers sort
// them: numbers and temporal values by value, strings by their collation weight
// strings (WEIGHT_STRING, padded for PAD SPACE collations), binary strings by their
// bytes. Each stream is checked to come in strictly increasing key order, so a
// comparison that disagreed with a server's order would fail the run instead of
// giving a wrong answer.
//
// The streaming connections run with time_zone='+00:00' (TIMESTAMP values are
// hashed as UTC text, identical on servers in different zones) and
// character_set_results=binary (the caller's connection character set does not
// matter); they are closed afterwards rather than returned to the caller's pool.
// Each side's query reads its own consistent snapshot: under concurrent writes the
// two sides are compared at slightly different moments.
package verify

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/rowlift/rowlift/internal/keyorder"
	"github.com/rowlift/rowlift/internal/mysqljson"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/schema"
)

// DefaultMaxReported is how many differing keys a Result lists when Options leaves
// MaxReported zero: enough to start debugging, short enough to read.
const DefaultMaxReported = 20

// Options select what Table compares and how much of it Table reports.
type Options struct {
	// Columns to compare; empty means every non-generated column of the source.
	// They must exist on both sides and include the key columns.
	Columns []string
	// MaxReported caps Result.Examples; zero or less means DefaultMaxReported.
	MaxReported int
	// TargetTable is the table's name on the target when it differs (a table
	// a cutover renamed out of the way); empty means the same name.
	TargetTable string
	// JSONAsText compares MySQL JSON by its text alone, not by its types.
	JSONAsText bool
}

// Result is what Table found, counted and with the first differing keys spelled
// out for a person to read.
type Result struct {
	Table      string // the table's name, to tell results apart in a report
	SourceRows int64  // rows read from the source
	TargetRows int64  // rows read from the target
	Missing    int64  // keys on the source only
	Extra      int64  // keys on the target only
	Different  int64  // keys on both sides whose rows differ
	// Examples are the first differing keys in key order, at most MaxReported,
	// like "missing on target: (id=5, c='ab')".
	Examples []string
}

// Identical reports whether both sides hold the same rows.
func (r *Result) Identical() bool {
	return r.Missing == 0 && r.Extra == 0 && r.Different == 0
}

// String is a one-line summary followed by the examples, one per line, for logs
// and the verify command's output.
func (r *Result) String() string {
	var b strings.Builder
	if r.Identical() {
		fmt.Fprintf(&b, "%s: identical, %d rows", r.Table, r.SourceRows)
		return b.String()
	}
	total := r.Missing + r.Extra + r.Different
	fmt.Fprintf(&b, "%s: %d missing on target, %d extra on target, %d different (%d source rows, %d target rows)",
		r.Table, r.Missing, r.Extra, r.Different, r.SourceRows, r.TargetRows)
	if int64(len(r.Examples)) < total {
		fmt.Fprintf(&b, "; first %d of %d differing keys:", len(r.Examples), total)
	} else {
		b.WriteString(":")
	}
	for _, e := range r.Examples {
		b.WriteString("\n  ")
		b.WriteString(e)
	}
	return b.String()
}

// Table compares table srcDB.table on src with dstDB.table on dst. The key and
// the column list come from the source; key columns must have the same type and
// collation on the target, so both servers sort them alike.
func Table(ctx context.Context, src, dst *sql.DB, srcDB, dstDB, table string, opts Options) (*Result, error) {
	res, err := compare(ctx, src, dst, srcDB, dstDB, table, opts)
	if err != nil {
		return nil, fmt.Errorf("verify %s: %w", table, err)
	}
	return res, nil
}

// compare is Table without the error context.
func compare(ctx context.Context, src, dst *sql.DB, srcDB, dstDB, table string, opts Options) (*Result, error) {
	st, err := schema.Load(ctx, src, srcDB, table)
	if err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}
	dstTable := table
	if opts.TargetTable != "" {
		dstTable = opts.TargetTable
	}
	tt, err := schema.Load(ctx, dst, dstDB, dstTable)
	if err != nil {
		return nil, fmt.Errorf("target: %w", err)
	}
	cols, err := st.Streamed(opts.Columns)
	if err != nil {
		return nil, err
	}
	for _, c := range cols {
		if tt.Column(c.Name) == nil {
			return nil, fmt.Errorf("%w: target %s.%s has no column %s", schema.ErrColumn, dstDB, dstTable, c.Name)
		}
	}
	// JSON compares by type where both sides are MySQL's, by text where
	// one side keeps it as text.
	jsonText := opts.JSONAsText
	for _, c := range cols {
		jsonText = jsonText || c.DataType == "json" && tt.Column(c.Name).DataType != "json"
	}
	p, err := newPlan(ctx, src, st, tt, cols, jsonText)
	if err != nil {
		return nil, err
	}
	a, err := openStream(ctx, src, "source", p.query(srcDB, table), p.Width())
	if err != nil {
		return nil, err
	}
	defer a.close()
	b, err := openStream(ctx, dst, "target", p.query(dstDB, dstTable), p.Width())
	if err != nil {
		return nil, err
	}
	defer b.close()

	res := &Result{Table: table}
	res.SourceRows, res.TargetRows, err = p.Merge(a, b, func(d Diff) error {
		res.Add(d, opts.MaxReported)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// DiffKind says how a key differs between the two sides.
type DiffKind uint8

// The kinds of difference, and Same for a key whose rows are equal (which
// only MergeAll reports).
const (
	Missing DiffKind = iota + 1
	Extra
	Different
	Same
)

// Diff is one key a merge found differing. Source and Target are that side's
// select-list values (nil on the side that lacks the key), valid only during
// the callback; Key shows the key for a person. KeyForm, from MergeAll only,
// is the key as the servers compare it (each column's sort form, length
// first): keys equal under their collations have equal forms.
type Diff struct {
	Kind           DiffKind
	Key            string
	KeyForm        []byte
	Source, Target [][]byte
}

// Add counts d and, while fewer than maxReported (zero or less:
// DefaultMaxReported) are listed, spells it out in Examples.
func (r *Result) Add(d Diff, maxReported int) {
	if maxReported <= 0 {
		maxReported = DefaultMaxReported
	}
	switch d.Kind {
	case Missing:
		r.Missing++
	case Extra:
		r.Extra++
	case Different:
		r.Different++
	}
	if len(r.Examples) < maxReported {
		r.Examples = append(r.Examples, d.String())
	}
}

// String is the diff as a Result example: "missing on target: (id=5)".
func (d Diff) String() string {
	switch d.Kind {
	case Missing:
		return "missing on target: " + d.Key
	case Extra:
		return "extra on target: " + d.Key
	}
	return "different: " + d.Key
}

// Plan is the select list of a comparison: each key column's sort and shown
// forms, then the row hash. Both sides select the same list, so the chunked
// verify of a workflow (the streamer on the source, the applier on the
// target) merges its rows by the same rules as Table.
type Plan struct {
	keys    []keyCol
	selects []string // the key columns' forms, then the row hash last
	order   []string
}

// NewPlan plans the comparison of table t (on db, whose collations decide the
// key forms) over columns (empty: every non-generated column); jsonText
// compares MySQL JSON by its text alone, as a move that accepted losing its
// types (WorkflowOptions.json_as_text) must.
func NewPlan(ctx context.Context, db *sql.DB, t *schema.Table, columns []string, jsonText bool) (*Plan, error) {
	cols, err := t.Streamed(columns)
	if err != nil {
		return nil, err
	}
	return newPlan(ctx, db, t, t, cols, jsonText)
}

func newPlan(ctx context.Context, src *sql.DB, st, tt *schema.Table, cols []schema.Column, jsonText bool) (*Plan, error) {
	p, err := planKeys(ctx, src, st, tt)
	if err != nil {
		return nil, err
	}
	p.selects = append(p.selects, rowHashExpr(cols, jsonText))
	return p, nil
}

// Columns is the select list, comma-separated.
func (p *Plan) Columns() string { return strings.Join(p.selects, ", ") }

// OrderBy is the key order, comma-separated, for ORDER BY.
func (p *Plan) OrderBy() string { return strings.Join(p.order, ", ") }

// Width is how many values a row of the select list has.
func (p *Plan) Width() int { return len(p.selects) }

// query is the streaming query of a whole table.
func (p *Plan) query(db, table string) string {
	return "SELECT " + p.Columns() + " FROM " + rowcodec.QualifiedIdent(db, table) + " ORDER BY " + p.OrderBy()
}

// Rows is one side of a merge, in key order.
type Rows interface {
	// Next returns the next row's values, the select list first (more may
	// follow), valid until the next call, or nil at the end.
	Next() ([][]byte, error)
}

// Merge merge-joins the two sides in key order, in constant memory, calls
// found for every key that is missing, extra or different, and returns how
// many rows each side had. It fails when a side's keys do not come in
// strictly increasing order: then the servers' order and this package's
// comparison disagree, and the merge would report wrong differences.
func (p *Plan) Merge(src, dst Rows, found func(Diff) error) (srcRows, dstRows int64, err error) {
	return p.merge(src, dst, found, false)
}

// MergeAll is Merge that also reports every key whose rows are equal (Same),
// and each key's KeyForm: a merge of several sources attributes each target
// key to the sources that hold it.
func (p *Plan) MergeAll(src, dst Rows, found func(Diff) error) (srcRows, dstRows int64, err error) {
	return p.merge(src, dst, found, true)
}

func (p *Plan) merge(src, dst Rows, found func(Diff) error, all bool) (srcRows, dstRows int64, err error) {
	var form []byte
	keyForm := func(c *cursor) []byte {
		if !all {
			return nil
		}
		form = form[:0]
		for _, k := range c.cur {
			form = binary.AppendUvarint(form, uint64(len(k)))
			form = append(form, k...)
		}
		return form
	}
	a := &cursor{side: "source", rows: src, cur: make([][]byte, len(p.keys)), prev: make([][]byte, len(p.keys))}
	b := &cursor{side: "target", rows: dst, cur: make([][]byte, len(p.keys)), prev: make([][]byte, len(p.keys))}
	if err := a.next(p.keys); err != nil {
		return 0, 0, err
	}
	if err := b.next(p.keys); err != nil {
		return 0, 0, err
	}
	for a.ok || b.ok {
		var c int
		switch {
		case !b.ok:
			c = -1
		case !a.ok:
			c = 1
		default:
			c = compareKeys(p.keys, a.cur, b.cur)
		}
		switch {
		case c < 0:
			err = found(Diff{Kind: Missing, Key: a.display(p.keys), KeyForm: keyForm(a), Source: a.vals})
			if err == nil {
				err = a.next(p.keys)
			}
		case c > 0:
			err = found(Diff{Kind: Extra, Key: b.display(p.keys), KeyForm: keyForm(b), Target: b.vals})
			if err == nil {
				err = b.next(p.keys)
			}
		default:
			if hash := len(p.selects) - 1; !bytes.Equal(a.vals[hash], b.vals[hash]) {
				ak, bk := a.display(p.keys), b.display(p.keys)
				if bk != ak { // equal under the key's collation, not in bytes
					ak += ", on target " + bk
				}
				err = found(Diff{Kind: Different, Key: ak, KeyForm: keyForm(a), Source: a.vals, Target: b.vals})
			} else if all {
				err = found(Diff{Kind: Same, Key: a.display(p.keys), KeyForm: keyForm(a), Source: a.vals, Target: b.vals})
			}
			if err == nil {
				err = a.next(p.keys)
			}
			if err == nil {
				err = b.next(p.keys)
			}
		}
		if err != nil {
			return 0, 0, err
		}
	}
	return a.n, b.n, nil
}

// keyKind says how a key column's sort form is compared and its value shown.
type keyKind uint8

const (
	// keyNumber is decimal text (integers, DECIMAL, YEAR, BIT as a number),
	// compared by value without limits on its size (keyorder.CompareDecimal).
	keyNumber keyKind = iota
	// keyTemporal is DATE, TIME, DATETIME or TIMESTAMP text, compared by value
	// (keyorder.CompareTemporal).
	keyTemporal
	// keyFloat is FLOAT or DOUBLE text, encoded as bytes that sort like the value.
	keyFloat
	// keyBytes is a weight string or binary string, compared byte by byte and
	// shown from a separate text column.
	keyBytes
)

// keyCol is one key column of the merge: where its sort form and its shown form
// are in the select list.
type keyCol struct {
	name   string
	kind   keyKind
	sortAt int
	showAt int
}

var (
	sqlName    = regexp.MustCompile(`^[0-9A-Za-z_]+$`)
	charLength = regexp.MustCompile(`^(?i)(?:var)?char\((\d+)\)`)
)

// planKeys chooses each key column's sort form and shown form.
func planKeys(ctx context.Context, src *sql.DB, st, tt *schema.Table) (*Plan, error) {
	p := &Plan{}
	for _, name := range st.Key {
		c := st.Column(name)
		tc := tt.Column(name)
		switch {
		case tc == nil:
			return nil, fmt.Errorf("%w: target has no key column %s", schema.ErrColumn, c.Name)
		case !schema.SameType(c.ColumnType, tc.ColumnType) || c.Collation != tc.Collation:
			return nil, fmt.Errorf("%w: key column %s is %s %s on the source but %s %s on the target, so the servers would sort it differently",
				schema.ErrColumn, c.Name, c.ColumnType, c.Collation, tc.ColumnType, tc.Collation)
		}
		id := rowcodec.Ident(c.Name)
		p.order = append(p.order, id)
		k := keyCol{name: c.Name, sortAt: len(p.selects), showAt: len(p.selects)}
		// Non-string keys are read as the server's text of exactly the value that is
		// hashed; CONCAT makes it a string, so the driver passes it on untouched.
		text := "CONCAT(" + valueExpr(*c, true) + ")" // keys hold no JSON
		switch c.DataType {
		case "tinyint", "smallint", "mediumint", "int", "bigint", "decimal", "year", "bit":
			k.kind = keyNumber
			p.selects = append(p.selects, text)
		case "float", "double":
			k.kind = keyFloat
			p.selects = append(p.selects, text)
		case "date", "time", "datetime", "timestamp":
			k.kind = keyTemporal
			p.selects = append(p.selects, text)
		case "char", "varchar", "binary", "varbinary", "tinytext", "text", "mediumtext", "longtext",
			"tinyblob", "blob", "mediumblob", "longblob":
			k.kind = keyBytes
			sortExpr, showExpr, err := stringForms(ctx, src, c, id)
			if err != nil {
				return nil, err
			}
			p.selects = append(p.selects, sortExpr)
			if showExpr != sortExpr {
				k.showAt++
				p.selects = append(p.selects, showExpr)
			}
		default:
			return nil, fmt.Errorf("%w: key column %s is %s; verify cannot compare its order", schema.ErrNoKey, c.Name, c.ColumnType)
		}
		p.keys = append(p.keys, k)
	}
	return p, nil
}

// stringForms returns a string key column's sort form, whose bytes sort exactly as
// the server orders the column, and its form for showing, as UTF-8 (raw bytes for
// binary strings). WEIGHT_STRING leaves out trailing spaces under PAD SPACE
// collations, where 'a' sorts after 'a\t'; padding every value to the column's
// length puts the spaces back.
func stringForms(ctx context.Context, src *sql.DB, c *schema.Column, id string) (sortExpr, showExpr string, err error) {
	if c.Charset == "" || c.Charset == "binary" {
		return id, id, nil
	}
	showExpr = "CONVERT(" + id + " USING utf8mb4)"
	if !sqlName.MatchString(c.Charset) || !sqlName.MatchString(c.Collation) {
		return "", "", fmt.Errorf("key column %s has unexpected character set %q or collation %q", c.Name, c.Charset, c.Collation)
	}
	var pad bool
	q := fmt.Sprintf("SELECT CONVERT('a' USING %[1]s) COLLATE %[2]s = CONVERT('a ' USING %[1]s) COLLATE %[2]s", c.Charset, c.Collation)
	if err := src.QueryRowContext(ctx, q).Scan(&pad); err != nil {
		return "", "", fmt.Errorf("source: pad attribute of collation %s: %w", c.Collation, err)
	}
	if !pad {
		return "WEIGHT_STRING(" + id + ")", showExpr, nil
	}
	m := charLength.FindStringSubmatch(c.ColumnType)
	if m == nil {
		return "", "", fmt.Errorf("%w: key column %s is %s with PAD SPACE collation %s; verify compares only CHAR and VARCHAR keys under such collations",
			schema.ErrNoKey, c.Name, c.ColumnType, c.Collation)
	}
	return "WEIGHT_STRING(" + id + " AS CHAR(" + m[1] + "))", showExpr, nil
}

// valueExpr is a column's value in a form that tells apart every value the column
// can hold: the stored bytes for strings, exact decimal text for integers, DECIMAL
// and BIT, text for temporal types, ENUM and SET, for DOUBLE the column's
// shortest text that parses back to the same bits, and for FLOAT its DOUBLE
// widening's text (the column's own text shows a FLOAT with 6 digits only).
// MySQL prints a DOUBLE column exactly but a computed double with 16 digits,
// so a DOUBLE is never cast; for a FLOAT's widening 16 digits are still far
// more than its 9 and tell every FLOAT apart. MariaDB's JSON is its text;
// MySQL's is its text followed by its type map (mysqljson.TypeMapExpr),
// which names the type of every scalar the text does not tell: a text is one
// whole JSON value, so where it ends and the map starts is never ambiguous.
func valueExpr(c schema.Column, jsonText bool) string {
	id := rowcodec.Ident(c.Name)
	switch c.DataType {
	case "json":
		if jsonText {
			return id
		}
		return "CONCAT(" + id + ", IFNULL(" + mysqljson.TypeMapExpr(id) + ", ''))"
	case "float":
		return "CAST(" + id + " AS DOUBLE)"
	case "bit":
		return "(" + id + " + 0)"
	}
	return id
}

// rowHashExpr hashes a row: one SHA-256 of its values joined by commas, 'n'
// for NULL. Numbers, temporals and BIT print without a comma; a CHAR,
// VARCHAR, BINARY, VARBINARY, ENUM or SET value (at most 65,535 bytes, as is
// the whole row of them) is its byte length and then its bytes, so the
// joined text is unambiguous. A TEXT, BLOB or JSON value is its own SHA-256
// (64 hex digits), so no value of unbounded length is copied whole into a
// string that max_allowed_packet could cut to NULL. One digest per row, not
// one per value and one more, costs about a third of it. SHA2 is the one
// digest both flavors have built in: MySQL 9 moved MD5 and SHA1 into an
// optional component.
func rowHashExpr(cols []schema.Column, jsonText bool) string {
	var parts []string
	for _, c := range cols {
		v := valueExpr(c, jsonText)
		switch {
		case rowcodec.KindOf(c.DataType) != rowcodec.String:
			parts = append(parts, "IFNULL("+v+", 'n')")
		case boundedString(c.DataType):
			parts = append(parts, "IFNULL(LENGTH("+v+"), 'n')", "CAST("+v+" AS BINARY)")
		default:
			parts = append(parts, "IFNULL(SHA2("+v+", 256), 'n')")
		}
	}
	return "SHA2(CONCAT_WS(',', " + strings.Join(parts, ", ") + "), 256)"
}

// boundedString reports whether a string type holds at most 65,535 bytes.
func boundedString(dataType string) bool {
	switch dataType {
	case "char", "varchar", "binary", "varbinary", "enum", "set":
		return true
	}
	return false
}

// sqlRows is one side of Table: a streaming query on a connection of its own.
type sqlRows struct {
	side   string
	conn   *sql.Conn
	rows   *sql.Rows
	cancel context.CancelFunc
	raw    []sql.RawBytes
	dest   []any
	vals   [][]byte
}

// openStream runs query on a connection of its own, set up for an exact and
// unhurried read: a slow consumer must not be cut off after the default 60 s.
func openStream(ctx context.Context, db *sql.DB, side, query string, ncols int) (*sqlRows, error) {
	ctx, cancel := context.WithCancel(ctx)
	s := &sqlRows{side: side, cancel: cancel, raw: make([]sql.RawBytes, ncols), dest: make([]any, ncols), vals: make([][]byte, ncols)}
	for i := range s.raw {
		s.dest[i] = &s.raw[i]
	}
	var err error
	if s.conn, err = db.Conn(ctx); err != nil {
		cancel()
		return nil, fmt.Errorf("%s: connect: %w", side, err)
	}
	if _, err = s.conn.ExecContext(ctx, SessionSetup); err != nil {
		s.close()
		return nil, fmt.Errorf("%s: set up session: %w", side, err)
	}
	if s.rows, err = s.conn.QueryContext(ctx, query); err != nil {
		s.close()
		return nil, fmt.Errorf("%s: %w", side, err)
	}
	return s, nil
}

// SessionSetup is the session a side's rows are read in: UTC, so TIMESTAMP
// values hash alike on servers in different zones; binary results, so the
// connection's character set does not matter; no write timeout for a slow
// reader.
const SessionSetup = "SET SESSION time_zone = '+00:00', net_write_timeout = 3600, character_set_results = binary"

func (s *sqlRows) Next() ([][]byte, error) {
	if !s.rows.Next() {
		if err := s.rows.Err(); err != nil {
			return nil, fmt.Errorf("%s: read rows: %w", s.side, err)
		}
		return nil, nil
	}
	if err := s.rows.Scan(s.dest...); err != nil {
		return nil, fmt.Errorf("%s: read rows: %w", s.side, err)
	}
	for i, v := range s.raw {
		s.vals[i] = v
	}
	return s.vals, nil
}

// close stops the query (canceling it, so an unread rest is not drained) and
// closes the connection instead of returning it to the pool with this session's
// settings.
func (s *sqlRows) close() {
	s.cancel()
	if s.rows != nil {
		s.rows.Close()
	}
	// Raw hands back driver.ErrBadConn, which makes database/sql discard the
	// connection; the error it returns is that one.
	_ = s.conn.Raw(func(any) error { return driver.ErrBadConn })
	s.conn.Close()
}

// cursor is one side of a merge: its current row and that row's key in sort
// form, checked to grow strictly.
type cursor struct {
	side string
	rows Rows
	vals [][]byte
	cur  [][]byte // sort forms of the current row's key, owned
	prev [][]byte // sort forms of the previous row's key, owned
	n    int64
	ok   bool
}

// next reads the next row, or sets ok false at the end.
func (s *cursor) next(keys []keyCol) error {
	vals, err := s.rows.Next()
	if err != nil {
		return err
	}
	if s.ok = vals != nil; !s.ok {
		return nil
	}
	s.vals = vals
	s.cur, s.prev = s.prev, s.cur
	for i, k := range keys {
		var err error
		if s.cur[i], err = sortForm(s.cur[i][:0], k.kind, s.vals[k.sortAt]); err != nil {
			return fmt.Errorf("%s: key %s: %w", s.side, s.display(keys), err)
		}
	}
	if s.n > 0 && compareKeys(keys, s.prev, s.cur) >= 0 {
		return fmt.Errorf("%s: key %s does not sort after the row before it; the server's key order and verify's disagree, "+
			"so the comparison cannot be trusted", s.side, s.display(keys))
	}
	s.n++
	return nil
}

// display shows the current row's key as "(a=1, b='x')".
func (s *cursor) display(keys []keyCol) string {
	var b strings.Builder
	b.WriteByte('(')
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k.name)
		b.WriteByte('=')
		v := s.vals[k.showAt]
		switch k.kind {
		case keyNumber, keyFloat:
			b.Write(v)
		case keyTemporal:
			b.WriteByte('\'')
			b.Write(v)
			b.WriteByte('\'')
		case keyBytes:
			b.WriteString(quote(v))
		}
	}
	b.WriteByte(')')
	return b.String()
}

// quote shows a string value: quoted, with quotes, backslashes and unprintable
// characters escaped, or as 0x hex digits when it is not valid UTF-8.
func quote(v []byte) string {
	if !utf8.Valid(v) {
		return fmt.Sprintf("0x%X", v)
	}
	var b strings.Builder
	b.WriteByte('\'')
	for _, r := range string(v) {
		switch r {
		case 0:
			b.WriteString(`\0`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\'', '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		default:
			if unicode.IsPrint(r) {
				b.WriteRune(r)
			} else {
				fmt.Fprintf(&b, `\u%04X`, r)
			}
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// sortForm appends a key value's form for compareKeys to dst.
func sortForm(dst []byte, kind keyKind, v []byte) ([]byte, error) {
	if kind == keyFloat {
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			return dst, err
		}
		return appendFloatKey(dst, f), nil
	}
	return append(dst, v...), nil
}

// appendFloatKey appends f as 8 bytes that compare like the value: the sign bit
// flipped for positive numbers, all bits flipped for negative ones. -0 is 0, as
// the server compares it.
func appendFloatKey(dst []byte, f float64) []byte {
	if f == 0 {
		f = 0
	}
	u := math.Float64bits(f)
	if u>>63 == 1 {
		u = ^u
	} else {
		u |= 1 << 63
	}
	return binary.BigEndian.AppendUint64(dst, u)
}

// compareKeys compares two keys' sort forms column by column.
func compareKeys(keys []keyCol, a, b [][]byte) int {
	for i, k := range keys {
		var c int
		switch k.kind {
		case keyNumber:
			c = keyorder.CompareDecimal(a[i], b[i])
		case keyTemporal:
			c = keyorder.CompareTemporal(a[i], b[i])
		default:
			c = bytes.Compare(a[i], b[i])
		}
		if c != 0 {
			return c
		}
	}
	return 0
}
