package binlogrow

import (
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/schema"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

func TestAppendBit(t *testing.T) {
	for _, c := range []struct {
		name  string
		v     int64
		width int
		want  []byte
	}{
		{"BIT(1) zero", 0, 1, []byte{0}},
		{"BIT(1) one", 1, 1, []byte{1}},
		{"BIT(12) keeps its leading zero bits", 1, 2, []byte{0, 1}},
		{"BIT(12) all ones", 0xFFF, 2, []byte{0x0F, 0xFF}},
		{"BIT(64) all ones decodes as -1", -1, 8, []byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}},
		{"BIT(64) top and bottom bits", math.MinInt64 + 1, 8, []byte{0x80, 0, 0, 0, 0, 0, 0, 1}},
		{"BIT(64) small value is padded to 8 bytes", 0xFF, 8, []byte{0, 0, 0, 0, 0, 0, 0, 0xFF}},
		{"BIT(17) is 3 bytes", 0x10203, 3, []byte{1, 2, 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, append([]byte("prefix"), c.want...), appendBit([]byte("prefix"), uint64(c.v), c.width))
		})
	}
}

func TestAppendSet(t *testing.T) {
	members := []string{"x", "y", "z", "ü"}
	var m64 []string
	for i := range 64 {
		m64 = append(m64, string(rune('A'+i)))
	}
	for _, c := range []struct {
		name    string
		mask    int64
		members []string
		want    string
		err     string
	}{
		{"empty set", 0, members, "", ""},
		{"one member", 0b1000, members, "ü", ""},
		{"members in definition order, not bit or insert order", 0b1101, members, "x,z,ü", ""},
		{"every member", 0b1111, members, "x,y,z,ü", ""},
		{"a bit beyond the members", 0b10001, members, "", "bit 4 set beyond its 4 members"},
		{"top bit of a 64-member SET is the int64 sign", math.MinInt64 | 1, m64, "A," + string(rune('A'+63)), ""},
		{"every member of a 64-member SET", -1, m64, strings.Join(m64, ","), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := appendSet(nil, uint64(c.mask), c.members)
			if c.err != "" {
				require.ErrorContains(t, err, c.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, string(got))
		})
	}
}

func TestAppendEnum(t *testing.T) {
	members := []string{"a", "\xe9", "😀"}
	for _, c := range []struct {
		index int64
		want  string
		err   string
	}{
		{0, "", ""}, // the empty error value of a non-strict server
		{1, "a", ""},
		{2, "\xe9", ""}, // latin1 members stay in latin1
		{3, "😀", ""},
		{4, "", "ENUM index 4 is out of range of its 3 members"},
	} {
		got, err := appendEnum(nil, c.index, members)
		if c.err != "" {
			require.ErrorContains(t, err, c.err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, c.want, string(got), "index %d", c.index)
	}
}

func TestAppendYear(t *testing.T) {
	for _, c := range []struct {
		year int
		want string
	}{{0, "0000"}, {1901, "1901"}, {2000, "2000"}, {2155, "2155"}, {7, "0007"}, {99, "0099"}} {
		got, err := appendYear(nil, c.year)
		require.NoError(t, err)
		require.Equal(t, c.want, string(got))
	}
	_, err := appendYear(nil, -1)
	require.ErrorContains(t, err, "out of range")
}

func TestAppendTime(t *testing.T) {
	for _, c := range []struct {
		in   string
		fsp  int
		want string
		err  string
	}{
		{"00:00:00", 0, "00:00:00", ""},
		{"00:00:00", 6, "00:00:00.000000", ""},
		{"-00:00:01", 6, "-00:00:01.000000", ""},
		{"-838:59:59", 2, "-838:59:59.00", ""},
		{"-12:34:56.789012", 6, "-12:34:56.789012", ""},
		{"-00:00:00.01", 2, "-00:00:00.01", ""},
		{"12:00:00.5", 2, "", `has 1 fractional digits, the column 2`},
	} {
		got, err := appendTime(nil, c.in, c.fsp)
		if c.err != "" {
			require.ErrorContains(t, err, c.err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, c.want, string(got), "%q with %d digits", c.in, c.fsp)
	}
}

func TestPadBinary(t *testing.T) {
	got, err := padBinary([]byte("xxab"), 2, 8)
	require.NoError(t, err)
	require.Equal(t, []byte("xxab\x00\x00\x00\x00\x00\x00"), got, "only the value after start is padded")
	got, err = padBinary([]byte("x"), 1, 4)
	require.NoError(t, err)
	require.Equal(t, []byte("x\x00\x00\x00\x00"), got, "an all-zero BINARY arrives empty")
	_, err = padBinary([]byte("abcde"), 0, 4)
	require.ErrorContains(t, err, "longer than the column's 4")
}

// handMadeTable is a table map like MariaDB's with binlog_row_metadata=FULL,
// for a table (i INT, u BIGINT UNSIGNED, e ENUM('a','b'), b BINARY(4), tm TIME(6),
// bits BIT(12), f FLOAT, g INT AS (i) VIRTUAL).
func handMadeTable() *replication.TableMapEvent {
	return &replication.TableMapEvent{
		Schema:      []byte("d"),
		Table:       []byte("t"),
		ColumnCount: 8,
		ColumnType: []byte{mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_STRING, mysql.MYSQL_TYPE_STRING,
			mysql.MYSQL_TYPE_TIME2, mysql.MYSQL_TYPE_BIT, mysql.MYSQL_TYPE_FLOAT, mysql.MYSQL_TYPE_LONG},
		ColumnMeta:       []uint16{0, 0, uint16(mysql.MYSQL_TYPE_ENUM)<<8 | 1, uint16(mysql.MYSQL_TYPE_STRING)<<8 | 4, 6, 1<<8 | 4, 4, 0},
		ColumnName:       [][]byte{[]byte("i"), []byte("u"), []byte("e"), []byte("b"), []byte("tm"), []byte("bits"), []byte("f"), []byte("g")},
		SignednessBitmap: []byte{0b0100_0000}, // i, u, f, g are numeric: u is unsigned
		EnumStrValue:     [][][]byte{{[]byte("a"), []byte("b")}},
	}
}

var handMadeColumns = []schema.Column{
	{Name: "i", DataType: "int", ColumnType: "int(11)"},
	{Name: "u", DataType: "bigint", ColumnType: "bigint(20) unsigned"},
	{Name: "e", DataType: "enum", ColumnType: "enum('a','b')"},
	{Name: "b", DataType: "binary", ColumnType: "binary(4)"},
	{Name: "tm", DataType: "time", ColumnType: "time(6)"},
	{Name: "bits", DataType: "bit", ColumnType: "bit(12)"},
	{Name: "f", DataType: "float", ColumnType: "float"},
}

func TestConvertHandMadeImages(t *testing.T) {
	conv, err := NewConverter(handMadeTable(), handMadeColumns)
	require.NoError(t, err)
	row := &rowliftv1.Row{}
	for _, c := range []struct {
		name  string
		image []any
		want  [][]byte
	}{
		{"values", []any{int32(-1), uint64(math.MaxUint64), int64(2), "a", "-00:00:01", int64(5), float32(0.1), int32(-1)},
			[][]byte{[]byte("-1"), []byte("18446744073709551615"), []byte("b"), []byte("a\x00\x00\x00"),
				[]byte("-00:00:01.000000"), {0, 5}, []byte("0.10000000149011612")}},
		{"NULLs and empty values", []any{nil, nil, int64(0), "", nil, nil, nil, nil},
			[][]byte{nil, nil, {}, {0, 0, 0, 0}, nil, nil, nil}},
		{"an unsigned BIGINT decoded as signed (DecodeRows)", []any{int32(-1), int64(-1), int64(1), "a", "00:00:00", int64(0), float32(0), nil},
			[][]byte{[]byte("-1"), []byte("18446744073709551615"), []byte("a"), []byte("a\x00\x00\x00"), []byte("00:00:00.000000"), {0, 0},
				[]byte("0")}},
		{"BINARY bytes as []byte, largest FLOAT", []any{int32(0), uint64(0), int64(1), []byte("abcd"), "838:59:59.000001", int64(0xFFF), float32(math.MaxFloat32), nil},
			[][]byte{[]byte("0"), []byte("0"), []byte("a"), []byte("abcd"), []byte("838:59:59.000001"), {0x0F, 0xFF},
				[]byte("3.4028234663852886e+38")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.NoError(t, conv.Convert(row, c.image))
			got, err := rowcodec.Values(nil, row)
			require.NoError(t, err)
			require.Equal(t, c.want, got)
			for i, v := range c.want {
				require.Equal(t, v == nil, got[i] == nil, "column %d: NULL and empty stay apart", i)
			}
		})
	}
	require.NoError(t, conv.CheckSkipped([]int{7}), "a skipped column that is not streamed does no harm")
	require.ErrorContains(t, conv.CheckSkipped([]int{7, 3}), "leaves out streamed column b")
}

func TestConvertSubsetInOtherOrder(t *testing.T) {
	conv, err := NewConverter(handMadeTable(), []schema.Column{handMadeColumns[5], {Name: "I", DataType: "int", ColumnType: "int(11)"}})
	require.NoError(t, err)
	row := &rowliftv1.Row{}
	require.NoError(t, conv.Convert(row, []any{int32(7), uint64(1), int64(1), "", "00:00:00", int64(1), float32(1), int32(7)}))
	require.Equal(t, []int64{2, 1}, row.Lengths, "column names match case-insensitively")
	require.Equal(t, []byte{0, 1, '7'}, row.Values)
}

func TestConvertErrors(t *testing.T) {
	conv, err := NewConverter(handMadeTable(), handMadeColumns)
	require.NoError(t, err)
	good := func() []any {
		return []any{int32(1), uint64(1), int64(1), "a", "00:00:00", int64(1), float32(1), int32(1)}
	}
	for _, c := range []struct {
		name   string
		change func(image []any) []any
		err    string
	}{
		{"image of another table shape", func(im []any) []any { return im[:7] }, "has 7 columns, its table map 8"},
		{"ParseTime on", func(im []any) []any { im[4] = time.Now(); return im }, "column tm: unexpected time.Time"},
		{"a string for an INT", func(im []any) []any { im[0] = "1"; return im }, "column i: unexpected string"},
		{"ENUM index past its members", func(im []any) []any { im[2] = int64(3); return im }, "ENUM index 3 is out of range"},
		{"BINARY longer than its column", func(im []any) []any { im[3] = "abcde"; return im }, "longer than the column's 4"},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.ErrorContains(t, conv.Convert(&rowliftv1.Row{}, c.change(good())), c.err)
		})
	}
}

func TestNewConverterErrors(t *testing.T) {
	for _, c := range []struct {
		name   string
		table  func(tm *replication.TableMapEvent)
		column schema.Column
		err    string
	}{
		{"no column names", func(tm *replication.TableMapEvent) { tm.ColumnName = nil }, handMadeColumns[0],
			"has no column names: source must run with binlog_row_metadata=FULL"},
		{"no signedness", func(tm *replication.TableMapEvent) { tm.SignednessBitmap = nil }, handMadeColumns[1],
			"binlog metadata says unsigned=false (was the table altered? without binlog_row_metadata=FULL"},
		{"no ENUM members", func(tm *replication.TableMapEvent) { tm.EnumStrValue = nil }, handMadeColumns[2],
			"no members of ENUM column e: source must run with binlog_row_metadata=FULL"},
		{"column not in the image", nil, schema.Column{Name: "gone", DataType: "int", ColumnType: "int(11)"},
			"streamed column gone is not in the binlog image of d.t"},
		{"generated column", nil, schema.Column{Name: "g", DataType: "int", ColumnType: "int(11)", Generated: true},
			"column g of d.t is generated"},
		{"signedness differs from the schema", nil, schema.Column{Name: "u", DataType: "bigint", ColumnType: "bigint(20)"},
			"is bigint(20) but the binlog metadata says unsigned=true (was the table altered?"},
		{"type differs from the schema", nil, schema.Column{Name: "i", DataType: "varchar", ColumnType: "varchar(10)"},
			"schema says varchar(10) but the binlog carries binlog type 3"},
		{"CHAR in the schema, ENUM in the binlog", nil, schema.Column{Name: "e", DataType: "char", ColumnType: "char(1)"},
			"binlog type 247"},
		{"JSON in the schema, INT in the binlog", nil, schema.Column{Name: "i", DataType: "json", ColumnType: "json"},
			"schema says json but the binlog carries binlog type 3"},
		{"MariaDB UUID", nil, schema.Column{Name: "b", DataType: "uuid", ColumnType: "uuid"}, "type uuid"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tm := handMadeTable()
			if c.table != nil {
				c.table(tm)
			}
			_, err := NewConverter(tm, []schema.Column{c.column})
			require.ErrorContains(t, err, c.err)
		})
	}
}

// TestConvertReusesRow checks that a converted row holds only its own values
// after a longer row was converted into the same storage.
func TestConvertReusesRow(t *testing.T) {
	conv, err := NewConverter(handMadeTable(), handMadeColumns)
	require.NoError(t, err)
	row := &rowliftv1.Row{}
	require.NoError(t, conv.Convert(row, []any{int32(123456), uint64(1), int64(2), "abcd", "-838:59:59.000000", int64(0xFFF), float32(0.1), nil}))
	capacity := cap(row.Values)
	require.NoError(t, conv.Convert(row, []any{int32(1), nil, nil, nil, nil, nil, nil, nil}))
	require.Equal(t, []int64{1, -1, -1, -1, -1, -1, -1}, row.Lengths)
	require.Equal(t, []byte("1"), row.Values)
	require.Equal(t, capacity, cap(row.Values), "the value buffer is reused")
}

func TestCheckConfig(t *testing.T) {
	require.NoError(t, CheckConfig(replication.BinlogSyncerConfig{TimestampStringLocation: time.UTC, RowsEventDecodeFunc: DecodeRows}))
	err := CheckConfig(replication.BinlogSyncerConfig{ParseTime: true, UseDecimal: true, RawModeEnabled: true, UseFloatWithTrailingZero: true})
	for _, want := range []string{"ParseTime must be false", "UseDecimal must be false", "TimestampStringLocation must be time.UTC",
		"RawModeEnabled must be false", "UseFloatWithTrailingZero must be false", "RowsEventDecodeFunc must be binlogrow.DecodeRows"} {
		require.ErrorContains(t, err, want)
	}
	other := func(e *replication.RowsEvent, data []byte) error { return e.Decode(data) }
	require.ErrorContains(t, CheckConfig(replication.BinlogSyncerConfig{TimestampStringLocation: time.UTC, RowsEventDecodeFunc: other}),
		"RowsEventDecodeFunc must be binlogrow.DecodeRows")
	err = CheckConfig(replication.BinlogSyncerConfig{TimestampStringLocation: time.FixedZone("IST", 19800), RowsEventDecodeFunc: DecodeRows})
	require.EqualError(t, err, "binlog syncer config: TimestampStringLocation must be time.UTC (the copy reads TIMESTAMP with time_zone '+00:00')")
}

// TestDecodeTable checks that DecodeRows's table map copy reads JSON as BLOB
// and has no signedness, leaves the event's own table map alone, and is made
// once per table map even by syncers decoding side by side, and once for the
// maps logged again alike; a partial update event's copy ends with one JSON
// column more than the table has per JSON column.
func TestDecodeTable(t *testing.T) {
	plain := handMadeTable()
	plain.SignednessBitmap = nil
	require.Same(t, plain, decodeTable(plain, false), "a table map without JSON or signedness is used as it is")
	require.Same(t, plain, decodeTable(plain, true))
	signed := handMadeTable()
	signed.TableID = 1
	unsigned := decodeTable(signed, false)
	require.Nil(t, unsigned.SignednessBitmap, "every integer decodes as signed")
	require.Equal(t, signed.ColumnType, unsigned.ColumnType)
	require.NotNil(t, signed.SignednessBitmap, "the original is unchanged")

	withJSON := func() *replication.TableMapEvent {
		tm := handMadeTable()
		tm.TableID = 2
		tm.ColumnType[7] = mysql.MYSQL_TYPE_JSON
		return tm
	}
	tm := withJSON()
	copies := make(chan *replication.TableMapEvent, 8)
	var wg sync.WaitGroup
	for range cap(copies) {
		wg.Go(func() { copies <- decodeTable(tm, false) })
	}
	wg.Wait()
	close(copies)
	first := <-copies
	for c := range copies {
		require.Same(t, first, c)
	}
	require.Equal(t, byte(mysql.MYSQL_TYPE_BLOB), first.ColumnType[7])
	require.Equal(t, byte(mysql.MYSQL_TYPE_JSON), tm.ColumnType[7], "the original is unchanged")
	require.Equal(t, tm.ColumnType[:7], first.ColumnType[:7])
	require.Equal(t, tm.ColumnName, first.ColumnName)
	require.Len(t, first.ColumnType, len(tm.ColumnType))
	require.Same(t, first, decodeTable(withJSON(), false), "the table's map logged again alike")
	partial := decodeTable(tm, true)
	require.NotSame(t, first, partial)
	require.Same(t, partial, decodeTable(tm, true))
	require.Equal(t, append(slices.Clone(first.ColumnType), mysql.MYSQL_TYPE_JSON), partial.ColumnType)
	require.Equal(t, uint64(1), partial.JsonColumnCount(), "go-mysql sizes the partial bitmap by the original's JSON columns")
	require.Equal(t, tm.ColumnCount, partial.ColumnCount, "the extra column is never decoded")

	altered := withJSON()
	altered.ColumnMeta[4] = 3
	require.NotSame(t, first, decodeTable(altered, false), "the table altered under the same ID")
	require.Equal(t, uint16(3), decodeTable(altered, false).ColumnMeta[4])
	for id := range uint64(2 * maxDecodeTables) {
		other := handMadeTable()
		other.TableID = 100 + id
		decodeTable(other, false)
	}
	decodeTables.Lock()
	defer decodeTables.Unlock()
	require.LessOrEqual(t, len(decodeTables.copies), maxDecodeTables)
}

// TestSameTable: a table map alike in everything NewConverter reads keeps its
// converter; a change in any of those fields does not.
func TestSameTable(t *testing.T) {
	require.True(t, SameTable(handMadeTable(), handMadeTable()))
	for name, change := range map[string]func(tm *replication.TableMapEvent){
		"table id":         func(tm *replication.TableMapEvent) { tm.TableID++ },
		"schema":           func(tm *replication.TableMapEvent) { tm.Schema = []byte("e") },
		"table":            func(tm *replication.TableMapEvent) { tm.Table = []byte("u") },
		"column count":     func(tm *replication.TableMapEvent) { tm.ColumnCount-- },
		"column type":      func(tm *replication.TableMapEvent) { tm.ColumnType[0] = mysql.MYSQL_TYPE_LONGLONG },
		"column meta":      func(tm *replication.TableMapEvent) { tm.ColumnMeta[4] = 3 },
		"column name":      func(tm *replication.TableMapEvent) { tm.ColumnName[1] = []byte("v") },
		"column added":     func(tm *replication.TableMapEvent) { tm.ColumnName = append(tm.ColumnName, []byte("h")) },
		"signedness":       func(tm *replication.TableMapEvent) { tm.SignednessBitmap = []byte{0} },
		"ENUM member":      func(tm *replication.TableMapEvent) { tm.EnumStrValue[0][1] = []byte("c") },
		"ENUM member more": func(tm *replication.TableMapEvent) { tm.EnumStrValue[0] = append(tm.EnumStrValue[0], []byte("c")) },
		"SET members":      func(tm *replication.TableMapEvent) { tm.SetStrValue = [][][]byte{{[]byte("x")}} },
	} {
		changed := handMadeTable()
		change(changed)
		require.False(t, SameTable(handMadeTable(), changed), name)
		require.False(t, SameTable(changed, handMadeTable()), name)
	}
}
