// Package schema reads what rowlift needs to know about a table from
// information_schema: its columns, the key it is copied and applied by, its
// CREATE TABLE, and whether a target table has the same shape as a source one.
package schema

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/rowlift/rowlift/internal/rowcodec"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// Errors callers classify (for gRPC codes and workflow states).
var (
	ErrNoTable = errors.New("table does not exist")
	ErrNoKey   = errors.New("table has no usable key")
	ErrColumn  = errors.New("bad column list")
)

// Queryer is what Load needs of *sql.DB, *sql.Conn or *sql.Tx.
type Queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Column is one column of a table.
type Column struct {
	Name       string
	DataType   string // information_schema DATA_TYPE, lower case
	ColumnType string // information_schema COLUMN_TYPE
	Charset    string
	Collation  string
	Nullable   bool
	Generated  bool // virtual or stored generated column: never written
}

// Table is a table's metadata.
type Table struct {
	Database string
	Name     string
	Columns  []Column // in ordinal order, generated ones included
	// Key names the columns rows are ordered and applied by: the PRIMARY KEY, or
	// the first NOT NULL UNIQUE key when there is none.
	Key          []string
	KeyName      string
	CreateTable  string
	RowsEstimate int64
	// BytesEstimate is the table's size on disk (DATA_LENGTH), which status
	// shows beside the bytes copied.
	BytesEstimate int64
}

var generatedExtra = regexp.MustCompile(`(?i)\b(VIRTUAL|STORED|PERSISTENT) GENERATED\b`)

// Load reads a table's metadata. It fails with ErrNoTable when the table does not
// exist and ErrNoKey when it has no primary key and no NOT NULL unique key.
func Load(ctx context.Context, q Queryer, database, table string) (*Table, error) {
	t, err := Shape(ctx, q, database, table)
	if err != nil {
		return nil, err
	}
	var name string
	if err := q.QueryRowContext(ctx, "SHOW CREATE TABLE "+rowcodec.QualifiedIdent(database, table)).Scan(&name, &t.CreateTable); err != nil {
		return nil, gone(ctx, q, t, fmt.Errorf("show create table %s.%s: %w", database, table, err))
	}
	if err := q.QueryRowContext(ctx, `SELECT IFNULL(TABLE_ROWS, 0), IFNULL(DATA_LENGTH, 0) FROM information_schema.TABLES
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?`, database, table).Scan(&t.RowsEstimate, &t.BytesEstimate); err != nil {
		return nil, gone(ctx, q, t, fmt.Errorf("read row and byte estimates of %s.%s: %w", database, table, err))
	}
	return t, nil
}

// Shape reads what Load does but the definition and the row estimate: the
// columns and the key rows are applied by, all a comparison of two tables'
// shapes needs. It fails as Load does.
func Shape(ctx context.Context, q Queryer, database, table string) (*Table, error) {
	t := &Table{Database: database, Name: table}
	var err error
	if t.Columns, err = ReadColumns(ctx, q, database, table); err != nil {
		return nil, err
	}
	if len(t.Columns) == 0 {
		return nil, fmt.Errorf("%w: %s.%s", ErrNoTable, database, table)
	}
	keys, err := ReadUniqueKeys(ctx, q, database, table)
	if err != nil {
		return nil, err
	}
	if err := t.chooseKey(keys); err != nil {
		return nil, gone(ctx, q, t, err)
	}
	return t, nil
}

// gone turns err, met after Load read t's columns, into ErrNoTable when the
// table no longer exists: each read is its own statement, and a table renamed
// or dropped between them (a cutover's freeze renames the moved tables at any
// moment) would otherwise look keyless, a permanent error, rather than absent,
// which callers know how to handle.
func gone(ctx context.Context, q Queryer, t *Table, err error) error {
	if cols, cerr := ReadColumns(ctx, q, t.Database, t.Name); cerr == nil && len(cols) == 0 {
		return fmt.Errorf("%w: %s.%s (renamed or dropped while its definition was read)", ErrNoTable, t.Database, t.Name)
	}
	return err
}

// chooseKey picks the key rows are copied and applied by among the unique
// keys (PRIMARY first): the first on NOT NULL real columns. A key with a
// functional part is never chosen: rowlift cannot compute an expression
// from a row to order a copy or find a row.
func (t *Table) chooseKey(keys []Key) error {
	var functional []string
	for _, k := range keys {
		if expr := k.Expression(); expr != "" {
			functional = append(functional, fmt.Sprintf("%s on the expression %s", k.Name, expr))
			continue
		}
		var cols []string
		for _, p := range k.Parts {
			cols = append(cols, p.Column)
		}
		if t.usableKey(cols) {
			t.KeyName, t.Key = k.Name, cols
			break
		}
	}
	if t.Key == nil {
		why := ""
		if len(functional) > 0 {
			why = fmt.Sprintf(" (unique key %s is functional: its value is no column of the row)", strings.Join(functional, ", "))
		}
		return fmt.Errorf("%w: %s.%s has no PRIMARY KEY and no UNIQUE key on NOT NULL columns%s; "+
			"add a primary key (rowlift copies in key order and applies changes by key)", ErrNoKey, t.Database, t.Name, why)
	}
	for _, name := range t.Key {
		c := t.Column(name)
		if c.DataType == "enum" || c.DataType == "set" {
			return fmt.Errorf("%w: %s.%s key column %s is %s, which sorts by its index but compares as text; "+
				"rowlift cannot copy in its key order", ErrNoKey, t.Database, t.Name, name, strings.ToUpper(c.DataType))
		}
		if c.DataType == "char" && strings.Contains(c.Collation, "nopad") {
			return fmt.Errorf("%w: %s.%s key column %s is CHAR with the NO PAD collation %s, which MariaDB sorts padded "+
				"but compares trimmed, so a copy in key order could skip rows; make it VARCHAR or use a PAD SPACE collation",
				ErrNoKey, t.Database, t.Name, name, c.Collation)
		}
	}
	return nil
}

// usableKey reports whether a unique key's columns are all NOT NULL real columns.
func (t *Table) usableKey(cols []string) bool {
	for _, name := range cols {
		c := t.Column(name)
		if c == nil || c.Nullable || c.Generated {
			return false
		}
	}
	return true
}

// Column returns the named column (case-insensitive, as MySQL compares column
// names), or nil.
func (t *Table) Column(name string) *Column {
	for i := range t.Columns {
		if strings.EqualFold(t.Columns[i].Name, name) {
			return &t.Columns[i]
		}
	}
	return nil
}

// Streamed returns the columns to stream for a requested column list: every
// non-generated column when names is empty. Key columns must be included.
func (t *Table) Streamed(names []string) ([]Column, error) {
	var out []Column
	if len(names) == 0 {
		for _, c := range t.Columns {
			if !c.Generated {
				out = append(out, c)
			}
		}
		return out, nil
	}
	for _, name := range names {
		c := t.Column(name)
		switch {
		case c == nil:
			return nil, fmt.Errorf("%w: %s.%s has no column %q", ErrColumn, t.Database, t.Name, name)
		case c.Generated:
			return nil, fmt.Errorf("%w: %s.%s column %s is generated; the target computes it, leave it out",
				ErrColumn, t.Database, t.Name, c.Name)
		}
		out = append(out, *c)
	}
	for _, k := range t.Key {
		if !slices.ContainsFunc(out, func(c Column) bool { return strings.EqualFold(c.Name, k) }) {
			return nil, fmt.Errorf("%w: %s.%s column list must include key column %s", ErrColumn, t.Database, t.Name, k)
		}
	}
	return out, nil
}

// Fields describes streamed columns for the stream, with the key's positions.
func (t *Table) Fields(cols []Column) *rowliftv1.TableFields {
	tf := &rowliftv1.TableFields{Table: t.Name, CreateTable: []byte(t.CreateTable), RowsEstimate: t.RowsEstimate, BytesEstimate: t.BytesEstimate}
	for _, c := range cols {
		tf.Fields = append(tf.Fields, &rowliftv1.Field{Name: c.Name, DataType: c.DataType, ColumnType: c.ColumnType,
			Charset: c.Charset, Collation: c.Collation, Nullable: c.Nullable})
	}
	for _, k := range t.Key {
		for i, c := range cols {
			if strings.EqualFold(c.Name, k) {
				tf.PkColumns = append(tf.PkColumns, int32(i))
			}
		}
	}
	return tf
}

// FromFields is the table fields describe, as database.name: Fields' inverse,
// for a table known only by what a stream says of it.
func FromFields(database, name string, f *rowliftv1.TableFields) *Table {
	t := &Table{Database: database, Name: name, RowsEstimate: f.GetRowsEstimate(), BytesEstimate: f.GetBytesEstimate()}
	for _, c := range f.GetFields() {
		t.Columns = append(t.Columns, Column{Name: c.GetName(), DataType: c.GetDataType(), ColumnType: c.GetColumnType(),
			Charset: c.GetCharset(), Collation: c.GetCollation(), Nullable: c.GetNullable()})
	}
	for _, i := range f.GetPkColumns() {
		t.Key = append(t.Key, f.GetFields()[i].GetName())
	}
	return t
}

// SameType reports whether two COLUMN_TYPEs hold the same values, as MariaDB
// and MySQL print them: MySQL 8.0.19+ leaves out the display width of integer
// types (int, not int(11)) and of YEAR, which changes nothing stored unless
// the column is ZEROFILL.
func SameType(a, b string) bool {
	return strings.EqualFold(a, b) || normalType(a) == normalType(b)
}

// displayWidth is an integer or YEAR type's display width.
var displayWidth = regexp.MustCompile(`^(tinyint|smallint|mediumint|int|bigint|year)\(\d+\)`)

func normalType(t string) string {
	t = strings.ToLower(t)
	if strings.Contains(t, "zerofill") {
		return t
	}
	return displayWidth.ReplaceAllString(t, "$1")
}

// jsonAsText reports whether a target column takes JSON documents as the
// source holds them across flavors: MariaDB's JSON is LONGTEXT, and a MySQL
// JSON column on the other side holds the same documents (the workflow's
// creation warns that MySQL stores them normalised).
func jsonAsText(target, source string) bool {
	t, s := strings.ToLower(target), strings.ToLower(source)
	return (t == "json" && s == "longtext") || (t == "longtext" && s == "json")
}

// CheckShape compares a target table with the streamed fields: every streamed
// column must exist on the target with the same type, character set, collation
// and nullability, and the target must be keyed by the same columns. It returns
// one error that lists every difference.
func CheckShape(target *Table, fields *rowliftv1.TableFields) error {
	var diffs []string
	for _, f := range fields.GetFields() {
		c := target.Column(f.GetName())
		switch {
		case c == nil:
			diffs = append(diffs, fmt.Sprintf("column %s is missing", f.GetName()))
		case c.Generated:
			diffs = append(diffs, fmt.Sprintf("column %s is generated on the target", f.GetName()))
		case !jsonAsText(c.ColumnType, f.GetColumnType()) && !SameType(c.ColumnType, f.GetColumnType()):
			diffs = append(diffs, fmt.Sprintf("column %s is %s, source has %s", f.GetName(), c.ColumnType, f.GetColumnType()))
		// A MySQL JSON column has no collation; MariaDB's JSON is utf8mb4 text.
		case !jsonAsText(c.ColumnType, f.GetColumnType()) && c.Collation != f.GetCollation():
			diffs = append(diffs, fmt.Sprintf("column %s has collation %q, source has %q", f.GetName(), c.Collation, f.GetCollation()))
		case c.Nullable != f.GetNullable():
			diffs = append(diffs, fmt.Sprintf("column %s nullable=%v, source nullable=%v", f.GetName(), c.Nullable, f.GetNullable()))
		}
	}
	var srcKey []string
	for _, i := range fields.GetPkColumns() {
		srcKey = append(srcKey, strings.ToLower(fields.GetFields()[i].GetName()))
	}
	var dstKey []string
	for _, k := range target.Key {
		dstKey = append(dstKey, strings.ToLower(k))
	}
	if !slices.Equal(srcKey, dstKey) {
		diffs = append(diffs, fmt.Sprintf("target is keyed by (%s), source by (%s)", strings.Join(dstKey, ", "), strings.Join(srcKey, ", ")))
	}
	if len(diffs) > 0 {
		return fmt.Errorf("target table %s.%s differs from the source: %s; make it match or drop it so rowlift creates it",
			target.Database, target.Name, strings.Join(diffs, "; "))
	}
	return nil
}
