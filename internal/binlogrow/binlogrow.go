// Package binlogrow turns the row images go-mysql decodes from binlog ROWS events
// into packed rows whose bytes are exactly what the copy's SELECT returns for the
// same row (see rowlift.v1.Row), so the applier treats copied and replicated rows
// alike.
//
// It relies on go-mysql decoding with ParseTime=false, UseDecimal=false,
// UseFloatWithTrailingZero=false, TimestampStringLocation=time.UTC and
// RowsEventDecodeFunc=DecodeRows (CheckConfig checks a BinlogSyncerConfig), and
// on a source with binlog_row_image=FULL and binlog_row_metadata=FULL: the
// metadata gives column names, signedness and ENUM and SET members.
//
// MySQL's JSON travels in its binary form, which DecodeRows hands over as it is
// and Convert turns into a typed value (see mysqljson): the text MySQL's SELECT
// prints, and the types of the scalars that text does not tell. A partial JSON
// update's diffs (binlog_row_value_options=PARTIAL_JSON) are applied to the
// before image's document, so an after image is always the whole document.
package binlogrow

import (
	"bytes"
	"fmt"
	"math/bits"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/rowlift/rowlift/internal/mysqljson"
	"github.com/rowlift/rowlift/internal/schema"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// CheckConfig rejects syncer settings under which Convert cannot be exact (a non-UTC TIMESTAMP zone would shift values silently, MySQL JSON rendered as text would lose its types).
func CheckConfig(cfg replication.BinlogSyncerConfig) error {
	var problems []string
	if cfg.ParseTime {
		problems = append(problems, "ParseTime must be false (temporals are copied as the server's text)")
	}
	if cfg.UseDecimal {
		problems = append(problems, "UseDecimal must be false (DECIMAL is copied as the server's text)")
	}
	if cfg.UseFloatWithTrailingZero {
		problems = append(problems, "UseFloatWithTrailingZero must be false (FLOAT and DOUBLE are copied as their shortest text)")
	}
	if cfg.RowsEventDecodeFunc == nil || reflect.ValueOf(cfg.RowsEventDecodeFunc).Pointer() != reflect.ValueOf(DecodeRows).Pointer() {
		problems = append(problems, "RowsEventDecodeFunc must be binlogrow.DecodeRows (MySQL JSON must arrive in its binary form "+
			"to keep the types of its scalars)")
	}
	if cfg.TimestampStringLocation != time.UTC {
		problems = append(problems, "TimestampStringLocation must be time.UTC (the copy reads TIMESTAMP with time_zone '+00:00')")
	}
	if cfg.RawModeEnabled {
		problems = append(problems, "RawModeEnabled must be false (rows must be decoded)")
	}
	if len(problems) > 0 {
		return fmt.Errorf("binlog syncer config: %s", strings.Join(problems, "; "))
	}
	return nil
}

// kind says how one column's decoded value becomes its SELECT text.
type kind uint8

const (
	kindInt      kind = iota // any Go integer: decimal text
	kindDecimal              // string: as is
	kindFloat                // float32: shortest text of its float64 widening
	kindDouble               // float64: shortest text
	kindBit                  // int64: big-endian bytes of the column's width
	kindEnum                 // int64 1-based index: the member's bytes
	kindSet                  // int64 bitmask: members in definition order, comma-joined
	kindYear                 // int: four digits
	kindTemporal             // DATE, DATETIME, TIMESTAMP string: as is
	kindTime                 // TIME string: fraction padded to the column's precision
	kindBytes                // string or []byte: raw bytes
	kindBinary               // BINARY string: raw bytes padded with 0x00 to the width
	kindJSON                 // MySQL JSON, its binary bytes (DecodeRows): its typed value
)

// column is one streamed column: where its value is in the image and how to
// write it.
type column struct {
	name    string
	index   int // in the binlog image
	kind    kind
	width   int      // bytes of BIT and BINARY, fractional digits of TIME
	members []string // ENUM and SET members, in the column's character set
	// unsigned, for an unsigned integer column, has the bits of its binlog
	// width set: DecodeRows decodes every integer as signed (0: signed).
	unsigned uint64
}

// Converter maps one table's binlog row images onto its streamed columns, so binlog rows carry the copy's exact bytes.
type Converter struct {
	table   string
	columns int // in the binlog image
	cols    []column
	// hint is the last row's bytes, which a new row's values are allotted
	// at once rather than grown value by value.
	hint int
}

// NewConverter matches cols (the streamed columns in stream order, never generated) to tm's image by name; make a new one per table map
// unless SameTable says the map is alike.
func NewConverter(tm *replication.TableMapEvent, cols []schema.Column) (*Converter, error) {
	c := &Converter{table: string(tm.Schema) + "." + string(tm.Table), columns: int(tm.ColumnCount)}
	names := tm.ColumnNameString()
	if len(names) != c.columns {
		return nil, fmt.Errorf("binlog table map of %s has no column names: source must run with binlog_row_metadata=FULL", c.table)
	}
	unsigned := tm.UnsignedMap()
	enums := tm.EnumStrValueMap()
	sets := tm.SetStrValueMap()
	for _, sc := range cols {
		if sc.Generated {
			return nil, fmt.Errorf("column %s of %s is generated: it is not streamed", sc.Name, c.table)
		}
		i := slices.IndexFunc(names, func(n string) bool { return strings.EqualFold(n, sc.Name) })
		if i < 0 {
			return nil, fmt.Errorf("streamed column %s is not in the binlog image of %s (was the table altered?)", sc.Name, c.table)
		}
		col, err := newColumn(tm, i, sc)
		if err != nil {
			return nil, fmt.Errorf("column %s of %s: %w", sc.Name, c.table, err)
		}
		switch col.kind {
		case kindInt:
			want := strings.Contains(strings.ToLower(sc.ColumnType), "unsigned")
			if unsigned[i] != want {
				return nil, fmt.Errorf("column %s of %s is %s but the binlog metadata says unsigned=%v (was the table altered? "+
					"without binlog_row_metadata=FULL every column reads as signed)", sc.Name, c.table, sc.ColumnType, unsigned[i])
			}
			if want {
				col.unsigned = intMask[tm.ColumnType[i]]
			}
		case kindEnum, kindSet:
			m := enums
			if col.kind == kindSet {
				m = sets
			}
			if col.members = m[i]; col.members == nil {
				return nil, fmt.Errorf("binlog table map of %s has no members of %s column %s: "+
					"source must run with binlog_row_metadata=FULL", c.table, strings.ToUpper(sc.DataType), sc.Name)
			}
		}
		c.cols = append(c.cols, col)
	}
	return c, nil
}

// SameTable reports whether b describes its table as a does in everything
// NewConverter reads (the helpers it calls included), so a converter made from
// a converts b's rows: every transaction logs its tables' maps again, and
// building a converter for each took a tenth of the streamer's CPU in a
// catch-up. A field NewConverter comes to read must be compared here too.
func SameTable(a, b *replication.TableMapEvent) bool {
	return a.TableID == b.TableID && bytes.Equal(a.Schema, b.Schema) && bytes.Equal(a.Table, b.Table) &&
		a.ColumnCount == b.ColumnCount && bytes.Equal(a.ColumnType, b.ColumnType) && slices.Equal(a.ColumnMeta, b.ColumnMeta) &&
		bytes.Equal(a.SignednessBitmap, b.SignednessBitmap) && slices.EqualFunc(a.ColumnName, b.ColumnName, bytes.Equal) &&
		slices.EqualFunc(a.EnumStrValue, b.EnumStrValue, sameBytesList) && slices.EqualFunc(a.SetStrValue, b.SetStrValue, sameBytesList)
}

func sameBytesList(a, b [][]byte) bool { return slices.EqualFunc(a, b, bytes.Equal) }

// intMask is the bits of each binlog integer type's width.
var intMask = map[byte]uint64{mysql.MYSQL_TYPE_TINY: 1<<8 - 1, mysql.MYSQL_TYPE_SHORT: 1<<16 - 1, mysql.MYSQL_TYPE_INT24: 1<<24 - 1,
	mysql.MYSQL_TYPE_LONG: 1<<32 - 1, mysql.MYSQL_TYPE_LONGLONG: 1<<64 - 1}

// binlogType is the type and byte length a column's values have in the binlog:
// CHAR, BINARY, ENUM and SET all travel as MYSQL_TYPE_STRING, with the real type
// and the length folded into the metadata (as go-mysql's decodeValue unfolds it).
func binlogType(tm *replication.TableMapEvent, i int) (typ byte, length int) {
	typ, meta := tm.ColumnType[i], tm.ColumnMeta[i]
	if typ != mysql.MYSQL_TYPE_STRING {
		return typ, 0
	}
	if meta < 256 {
		return typ, int(meta)
	}
	b0, b1 := byte(meta>>8), byte(meta)
	if b0&0x30 != 0x30 {
		return b0 | 0x30, int(uint16(b1) | uint16((b0&0x30)^0x30)<<4)
	}
	return b0, int(b1)
}

// newColumn classifies column i of the image by its DATA_TYPE, and checks that
// the binlog carries it as that type (a mismatch means the schema and the
// binlog describe different tables).
func newColumn(tm *replication.TableMapEvent, i int, sc schema.Column) (column, error) {
	col := column{name: sc.Name, index: i}
	typ, length := binlogType(tm, i)
	meta := tm.ColumnMeta[i]
	var want []byte
	switch sc.DataType {
	case "tinyint":
		col.kind, want = kindInt, []byte{mysql.MYSQL_TYPE_TINY}
	case "smallint":
		col.kind, want = kindInt, []byte{mysql.MYSQL_TYPE_SHORT}
	case "mediumint":
		col.kind, want = kindInt, []byte{mysql.MYSQL_TYPE_INT24}
	case "int":
		col.kind, want = kindInt, []byte{mysql.MYSQL_TYPE_LONG}
	case "bigint":
		col.kind, want = kindInt, []byte{mysql.MYSQL_TYPE_LONGLONG}
	case "decimal":
		col.kind, want = kindDecimal, []byte{mysql.MYSQL_TYPE_NEWDECIMAL}
	case "float":
		col.kind, want = kindFloat, []byte{mysql.MYSQL_TYPE_FLOAT}
	case "double":
		col.kind, want = kindDouble, []byte{mysql.MYSQL_TYPE_DOUBLE}
	case "bit":
		col.kind, want = kindBit, []byte{mysql.MYSQL_TYPE_BIT}
		col.width = (int(meta>>8)*8 + int(meta&0xFF) + 7) / 8
	case "year":
		col.kind, want = kindYear, []byte{mysql.MYSQL_TYPE_YEAR}
	case "date":
		col.kind, want = kindTemporal, []byte{mysql.MYSQL_TYPE_DATE}
	// DATETIME, TIMESTAMP and TIME only in their MySQL 5.6 formats: go-mysql
	// decodes the older ones without fractions, and negative old TIMEs wrongly.
	case "datetime":
		col.kind, want = kindTemporal, []byte{mysql.MYSQL_TYPE_DATETIME2}
	case "timestamp":
		col.kind, want = kindTemporal, []byte{mysql.MYSQL_TYPE_TIMESTAMP2}
	case "time":
		col.kind, want = kindTime, []byte{mysql.MYSQL_TYPE_TIME2}
		col.width = int(meta)
	case "char":
		col.kind, want = kindBytes, []byte{mysql.MYSQL_TYPE_STRING}
	case "binary":
		col.kind, want = kindBinary, []byte{mysql.MYSQL_TYPE_STRING}
		col.width = length
	case "enum":
		col.kind, want = kindEnum, []byte{mysql.MYSQL_TYPE_ENUM}
	case "set":
		col.kind, want = kindSet, []byte{mysql.MYSQL_TYPE_SET}
	case "varchar", "varbinary":
		col.kind, want = kindBytes, []byte{mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING}
	case "tinytext", "text", "mediumtext", "longtext", "tinyblob", "blob", "mediumblob", "longblob":
		// MariaDB's JSON is LONGTEXT and travels as its text.
		col.kind, want = kindBytes, []byte{mysql.MYSQL_TYPE_BLOB}
	case "json":
		// MySQL's JSON; MariaDB's is LONGTEXT and has DATA_TYPE longtext.
		col.kind, want = kindJSON, []byte{mysql.MYSQL_TYPE_JSON}
	case "vector":
		// MySQL 9's VECTOR: its float32s as little-endian bytes, as a SELECT
		// returns them.
		col.kind, want = kindBytes, []byte{mysql.MYSQL_TYPE_VECTOR}
	case "geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon", "geometrycollection",
		"geomcollection":
		// SRID and WKB, as a SELECT returns them. MySQL names
		// GEOMETRYCOLLECTION's DATA_TYPE geomcollection.
		col.kind, want = kindBytes, []byte{mysql.MYSQL_TYPE_GEOMETRY}
	default:
		// MariaDB's UUID and INET types are stored in binary but selected as
		// text, and its COMPRESSED columns do not decode at all.
		return col, fmt.Errorf("type %s (%s) cannot be streamed from the binlog byte-exactly", sc.DataType, sc.ColumnType)
	}
	if !slices.Contains(want, typ) {
		return col, fmt.Errorf("schema says %s but the binlog carries binlog type %d (was the table altered, "+
			"or does it use a pre-MySQL-5.6 temporal format? ALTER TABLE ... FORCE upgrades it)", sc.ColumnType, typ)
	}
	return col, nil
}

// CheckSkipped fails when an image (skipped: its RowsEvent.SkippedColumns) left out a streamed column, which Convert would take for NULL.
func (c *Converter) CheckSkipped(skipped []int) error {
	for _, s := range skipped {
		for _, col := range c.cols {
			if col.index == s {
				return fmt.Errorf("binlog row image of %s leaves out streamed column %s: source must log with binlog_row_image=FULL",
					c.table, col.name)
			}
		}
	}
	return nil
}

// Convert fills row (reusing its storage) from one RowsEvent.Rows image, nil being NULL; call CheckSkipped first.
func (c *Converter) Convert(row *rowliftv1.Row, image []any) error {
	if len(image) != c.columns {
		return fmt.Errorf("binlog row image of %s has %d columns, its table map %d", c.table, len(image), c.columns)
	}
	if cap(row.Lengths) < len(c.cols) {
		row.Lengths = make([]int64, 0, len(c.cols))
	}
	if cap(row.Values) < c.hint {
		row.Values = make([]byte, 0, c.hint)
	}
	row.Lengths = row.Lengths[:0]
	row.Values = row.Values[:0]
	for i := range c.cols {
		col := &c.cols[i]
		v := image[col.index]
		if v == nil {
			row.Lengths = append(row.Lengths, -1)
			continue
		}
		start := len(row.Values)
		var err error
		if row.Values, err = col.appendValue(row.Values, v); err != nil {
			return fmt.Errorf("binlog row of %s, column %s: %w", c.table, col.name, err)
		}
		row.Lengths = append(row.Lengths, int64(len(row.Values)-start))
	}
	c.hint = len(row.Values)
	return nil
}

// appendValue appends the SELECT text of one non-NULL decoded value.
func (col *column) appendValue(dst []byte, v any) ([]byte, error) {
	switch col.kind {
	case kindInt:
		switch v := v.(type) {
		case int8:
			return col.appendInt(dst, int64(v)), nil
		case int16:
			return col.appendInt(dst, int64(v)), nil
		case int32:
			return col.appendInt(dst, int64(v)), nil
		case int64:
			return col.appendInt(dst, v), nil
		case uint8:
			return strconv.AppendUint(dst, uint64(v), 10), nil
		case uint16:
			return strconv.AppendUint(dst, uint64(v), 10), nil
		case uint32:
			return strconv.AppendUint(dst, uint64(v), 10), nil
		case uint64:
			return strconv.AppendUint(dst, v, 10), nil
		}
	case kindDecimal, kindTemporal:
		if s, ok := v.(string); ok {
			return append(dst, s...), nil
		}
	case kindFloat:
		if f, ok := v.(float32); ok {
			return strconv.AppendFloat(dst, float64(f), 'g', -1, 64), nil
		}
	case kindDouble:
		if f, ok := v.(float64); ok {
			return strconv.AppendFloat(dst, f, 'g', -1, 64), nil
		}
	case kindBit:
		if b, ok := v.(int64); ok {
			return appendBit(dst, uint64(b), col.width), nil
		}
	case kindEnum:
		if i, ok := v.(int64); ok {
			return appendEnum(dst, i, col.members)
		}
	case kindSet:
		if m, ok := v.(int64); ok {
			return appendSet(dst, uint64(m), col.members)
		}
	case kindYear:
		if y, ok := v.(int); ok {
			return appendYear(dst, y)
		}
	case kindTime:
		if s, ok := v.(string); ok {
			return appendTime(dst, s, col.width)
		}
	case kindJSON:
		switch j := v.(type) {
		case []byte:
			// An empty document, which INSERT IGNORE or a non-strict
			// session stores for NULL in a NOT NULL column: MySQL
			// reads it as the JSON null literal, and SELECT prints null.
			if len(j) == 0 {
				return append(dst, "null"...), nil
			}
			return mysqljson.AppendBinary(dst, j)
		case partialJSON:
			return j.appendAfter(dst)
		case string:
			return dst, fmt.Errorf("JSON decoded as text, which loses the types of its scalars: " +
				"the binlog syncer must decode rows with binlogrow.DecodeRows")
		}
	case kindBytes, kindBinary:
		start := len(dst)
		switch b := v.(type) {
		case string:
			dst = append(dst, b...)
		case []byte:
			dst = append(dst, b...)
		default:
			return dst, unexpected(v)
		}
		if col.kind == kindBinary {
			return padBinary(dst, start, col.width)
		}
		return dst, nil
	}
	return dst, unexpected(v)
}

// appendInt appends an integer go-mysql decoded as signed: an unsigned
// column's value is its bits in the column's width.
func (col *column) appendInt(dst []byte, v int64) []byte {
	if col.unsigned != 0 {
		return strconv.AppendUint(dst, uint64(v)&col.unsigned, 10)
	}
	return strconv.AppendInt(dst, v, 10)
}

func unexpected(v any) error {
	return fmt.Errorf("unexpected %T from the binlog decoder (BinlogSyncerConfig must have ParseTime and UseDecimal false)", v)
}

// appendBit appends a BIT value as a SELECT returns it: big-endian, in the
// column's full width of (M+7)/8 bytes.
func appendBit(dst []byte, v uint64, width int) []byte {
	for i := width - 1; i >= 0; i-- {
		dst = append(dst, byte(v>>(8*i)))
	}
	return dst
}

// appendEnum appends the member a 1-based ENUM index names; 0 is the empty
// string a non-strict server stores for an invalid value.
func appendEnum(dst []byte, index int64, members []string) ([]byte, error) {
	if index == 0 {
		return dst, nil
	}
	if index < 0 || index > int64(len(members)) {
		return dst, fmt.Errorf("ENUM index %d is out of range of its %d members", index, len(members))
	}
	return append(dst, members[index-1]...), nil
}

// appendSet appends the members whose bits are set, in definition order, joined
// by commas, as a SELECT returns a SET.
func appendSet(dst []byte, mask uint64, members []string) ([]byte, error) {
	if extra := mask &^ (1<<len(members) - 1); extra != 0 {
		return dst, fmt.Errorf("SET bitmask %#x has bit %d set beyond its %d members", mask, bits.TrailingZeros64(extra), len(members))
	}
	first := true
	for i, m := range members {
		if mask&(1<<i) == 0 {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		dst = append(dst, m...)
		first = false
	}
	return dst, nil
}

// appendYear appends a YEAR as CAST(y AS CHAR) gives it: four digits, the zero
// year as 0000.
func appendYear(dst []byte, y int) ([]byte, error) {
	if y < 0 || y > 9999 {
		return dst, fmt.Errorf("YEAR %d is out of range", y)
	}
	for p := 1000; p > 1 && y < p; p /= 10 {
		dst = append(dst, '0')
	}
	return strconv.AppendInt(dst, int64(y), 10), nil
}

// appendTime appends a TIME with exactly fsp fractional digits, as a SELECT
// prints a TIME(fsp): go-mysql leaves the fraction out when it is zero.
func appendTime(dst []byte, s string, fsp int) ([]byte, error) {
	dot := strings.IndexByte(s, '.')
	if dot < 0 {
		dst = append(dst, s...)
		if fsp > 0 {
			dst = append(dst, '.')
			for range fsp {
				dst = append(dst, '0')
			}
		}
		return dst, nil
	}
	if digits := len(s) - dot - 1; digits != fsp {
		return dst, fmt.Errorf("TIME %q has %d fractional digits, the column %d", s, digits, fsp)
	}
	return append(dst, s...), nil
}

// padBinary pads the BINARY value that starts at dst[start:] with 0x00 bytes to
// the column's width: the binlog strips them, a SELECT returns them.
func padBinary(dst []byte, start, width int) ([]byte, error) {
	n := len(dst) - start
	if n > width {
		return dst, fmt.Errorf("BINARY value of %d bytes is longer than the column's %d", n, width)
	}
	for ; n < width; n++ {
		dst = append(dst, 0)
	}
	return dst, nil
}

// Unwrap returns the events ev carries, so a reader handles a transaction that
// MySQL logged compressed (binlog_transaction_compression=ON) as it handles a
// plain one: the table map, rows and XID events inside a TRANSACTION_PAYLOAD
// event (go-mysql decompresses and decodes them with the syncer's options),
// and any other event as itself.
func Unwrap(ev *replication.BinlogEvent) []*replication.BinlogEvent {
	if p, ok := ev.Event.(*replication.TransactionPayloadEvent); ok {
		return p.Events
	}
	return []*replication.BinlogEvent{ev}
}

// DecodeRows decodes a rows event as go-mysql does, but hands over MySQL JSON
// values as their binary bytes ([]byte), which Convert turns into typed values:
// go-mysql would render them as text, losing their scalars' types. It hands
// over every integer as signed, which Convert reads as the column's type says:
// go-mysql would build a map of the table's signedness for every row image.
// Set it as the BinlogSyncerConfig's RowsEventDecodeFunc (CheckConfig
// requires it).
//
// A JSON column's row data is laid out as a BLOB's, so DecodeRows decodes the
// event with a copy of its table map in which JSON columns read as BLOBs, and
// which has no signedness. In a PARTIAL_UPDATE_ROWS_EVENT
// (binlog_row_value_options=PARTIAL_JSON) an after image's JSON value may be a
// diff vector of the before image's document: partialJSONColumns tells which,
// and the value is handed over with the before image's (partialJSON), which
// Convert updates with it. Such an after image holds a bitmap of them that
// go-mysql sizes by the table map's JSON columns, so that copy ends with as
// many JSON columns, beyond the event's column count, as it has: they are
// counted, never decoded.
func DecodeRows(e *replication.RowsEvent, data []byte) error {
	pos, err := e.DecodeHeader(data)
	if err != nil {
		return err
	}
	tm := e.Table
	// go-mysql's Type knows every rows event but the partial update one.
	partial := e.Type() == replication.EnumRowsEventTypeUnknown && tm.JsonColumnCount() > 0
	var diffs [][2]int
	if partial {
		if diffs, err = partialJSONColumns(e, data, pos); err != nil {
			return fmt.Errorf("binlog partial update of %s.%s: %w", tm.Schema, tm.Table, err)
		}
	}
	e.Table = decodeTable(tm, partial)
	err = e.DecodeData(pos, data)
	e.Table = tm
	if err != nil {
		return err
	}
	for _, at := range diffs {
		r, i := at[0], at[1]
		vector, ok := e.Rows[r][i].([]byte)
		if !ok {
			return fmt.Errorf("binlog partial update of %s.%s: JSON diff vector of column %d in row image %d decoded as %T",
				tm.Schema, tm.Table, i, r, e.Rows[r][i])
		}
		e.Rows[r][i] = partialJSON{before: e.Rows[r-1][i], diffs: vector}
	}
	return nil
}

// partialJSON is a JSON value of a partial update's after image: the column's
// diff vector and the before image's value.
type partialJSON struct {
	before any // []byte, or nil for NULL
	diffs  []byte
}

// appendAfter appends the typed value of the updated document.
func (p partialJSON) appendAfter(dst []byte) ([]byte, error) {
	bin, ok := p.before.([]byte)
	if !ok {
		return dst, fmt.Errorf("partial JSON update of a NULL or non-JSON before value (%T)", p.before)
	}
	before := []byte("null") // an empty document, see appendValue
	if len(bin) > 0 {
		var err error
		if before, err = mysqljson.AppendBinary(nil, bin); err != nil {
			return dst, err
		}
	}
	if len(p.diffs) == 0 { // the update left the column alone
		return append(dst, before...), nil
	}
	return mysqljson.ApplyDiffs(dst, before, p.diffs)
}

// decodeTables caches, by table ID, the copies of the table maps DecodeRows
// decodes with (decodeTable): every transaction logs its tables' maps again,
// each one a new event, and the copy of the last one still decodes a new one
// that has the same column types. Syncers may decode side by side.
var decodeTables = struct {
	sync.Mutex
	copies map[decodeKey]decodeCopy
}{copies: map[decodeKey]decodeCopy{}}

// maxDecodeTables bounds decodeTables: past it, a new copy evicts another.
const maxDecodeTables = 64

// decodeKey names a copy: of which table, and whether for a partial update
// event (with trailing JSON columns).
type decodeKey struct {
	tableID uint64
	partial bool
}

// decodeCopy is a cached copy and the column types and metadata of the table
// map it was made from, which are all the decoding reads of it.
type decodeCopy struct {
	types []byte
	meta  []uint16
	tm    *replication.TableMapEvent
}

// decodeTable returns tm itself if it has no JSON column and no signedness,
// or a copy with BLOB in place of JSON, no signedness and, for a partial
// update event, as many JSON columns after the last as it has.
func decodeTable(tm *replication.TableMapEvent, partial bool) *replication.TableMapEvent {
	jsons := tm.JsonColumnCount()
	if jsons == 0 && len(tm.SignednessBitmap) == 0 {
		return tm
	}
	decodeTables.Lock()
	defer decodeTables.Unlock()
	key := decodeKey{tm.TableID, partial}
	if c, ok := decodeTables.copies[key]; ok && bytes.Equal(c.types, tm.ColumnType) && slices.Equal(c.meta, tm.ColumnMeta) {
		return c.tm
	}
	if len(decodeTables.copies) >= maxDecodeTables {
		for k := range decodeTables.copies {
			delete(decodeTables.copies, k)
			break
		}
	}
	c := *tm
	c.SignednessBitmap = nil
	c.ColumnType = slices.Clone(tm.ColumnType)
	for i, t := range c.ColumnType {
		if t == mysql.MYSQL_TYPE_JSON {
			c.ColumnType[i] = mysql.MYSQL_TYPE_BLOB
		}
	}
	if partial {
		for range jsons {
			c.ColumnType = append(c.ColumnType, mysql.MYSQL_TYPE_JSON)
		}
	}
	decodeTables.copies[key] = decodeCopy{types: tm.ColumnType, meta: tm.ColumnMeta, tm: &c}
	return &c
}
