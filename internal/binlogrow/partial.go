package binlogrow

import (
	"encoding/binary"
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// partialJSONColumns walks the row images of a PARTIAL_UPDATE_ROWS_EVENT
// (data from pos, as DecodeHeader left it) and returns the row image and
// column of each JSON value that is a diff vector. go-mysql does not say
// which are: it reads an empty diff vector (a JSON column the update left
// alone) and an empty document alike, as []byte{}. Each after image starts
// with the event's value options and, if they include PARTIAL_JSON, a bitmap
// with a bit for each JSON column of the table; every value's size follows
// from its column's type and metadata as go-mysql's decodeValue reads them.
// The walk must end exactly at the event's end.
func partialJSONColumns(e *replication.RowsEvent, data []byte, pos int) ([][2]int, error) {
	tm := e.Table
	cols := int(e.ColumnCount)
	if len(tm.ColumnType) < cols || len(tm.ColumnMeta) < cols {
		return nil, fmt.Errorf("rows event has %d columns, its table map %d", cols, len(tm.ColumnType))
	}
	bitmapBytes := (cols + 7) / 8
	if len(e.ColumnBitmap1) < bitmapBytes || len(e.ColumnBitmap2) < bitmapBytes {
		return nil, fmt.Errorf("rows event's column bitmaps are shorter than its %d columns", cols)
	}
	jsons := int(tm.JsonColumnCount())
	var out [][2]int
	r := 0
	for ; pos < len(data); r++ {
		bitmap := e.ColumnBitmap1
		var partial []byte
		if r%2 == 1 {
			bitmap = e.ColumnBitmap2
			if data[pos] >= 0xfb {
				return nil, fmt.Errorf("row image %d has value options of more than a byte (%#x)", r, data[pos])
			}
			options := data[pos]
			pos++
			if options&byte(replication.EnumBinlogRowValueOptionsPartialJsonUpdates) != 0 {
				n := (jsons + 7) / 8
				if n > len(data)-pos {
					return nil, fmt.Errorf("row image %d ends in its partial JSON bitmap", r)
				}
				partial, pos = data[pos:pos+n], pos+n
			}
		}
		present := 0
		for i := range cols {
			if bitSet(bitmap, i) {
				present++
			}
		}
		n := (present + 7) / 8
		if n > len(data)-pos {
			return nil, fmt.Errorf("row image %d ends in its NULL bitmap", r)
		}
		nulls := data[pos : pos+n]
		pos += n
		nullIndex, jsonIndex := 0, 0
		for i := range cols {
			diff := false
			if tm.ColumnType[i] == mysql.MYSQL_TYPE_JSON {
				diff = partial != nil && bitSet(partial, jsonIndex)
				jsonIndex++
			}
			if !bitSet(bitmap, i) {
				continue
			}
			nullIndex++
			if bitSet(nulls, nullIndex-1) {
				continue
			}
			size, err := valueSize(tm.ColumnType[i], tm.ColumnMeta[i], data[pos:])
			if err != nil {
				return nil, fmt.Errorf("row image %d, column %d: %w", r, i, err)
			}
			pos += size
			if diff {
				out = append(out, [2]int{r, i})
			}
		}
	}
	if r%2 == 1 {
		return nil, fmt.Errorf("update event ends after a before image (%d images)", r)
	}
	return out, nil
}

func bitSet(bitmap []byte, i int) bool {
	return bitmap[i>>3]&(1<<(i&7)) != 0
}

// valueSize is the bytes of a value of binlog type typ with metadata meta
// that data starts with, as go-mysql's decodeValue reads them.
func valueSize(typ byte, meta uint16, data []byte) (int, error) {
	length := 0
	if typ == mysql.MYSQL_TYPE_STRING {
		length = int(meta)
		if meta >= 256 {
			b0, b1 := byte(meta>>8), byte(meta)
			if b0&0x30 != 0x30 {
				length, typ = int(uint16(b1)|uint16((b0&0x30)^0x30)<<4), b0|0x30
			} else {
				length, typ = int(b1), b0
			}
		}
	}
	fixed := -1
	switch typ {
	case mysql.MYSQL_TYPE_NULL:
		fixed = 0
	case mysql.MYSQL_TYPE_TINY, mysql.MYSQL_TYPE_YEAR:
		fixed = 1
	case mysql.MYSQL_TYPE_SHORT:
		fixed = 2
	case mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_DATE, mysql.MYSQL_TYPE_TIME:
		fixed = 3
	case mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_FLOAT, mysql.MYSQL_TYPE_TIMESTAMP:
		fixed = 4
	case mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_DOUBLE, mysql.MYSQL_TYPE_DATETIME:
		fixed = 8
	case mysql.MYSQL_TYPE_NEWDECIMAL:
		precision, scale := int(meta>>8), int(meta&0xff)
		if scale > precision {
			return 0, fmt.Errorf("DECIMAL with precision %d and scale %d", precision, scale)
		}
		digits := [9]int{0, 1, 1, 2, 2, 3, 3, 4, 4}
		intg := precision - scale
		fixed = intg/9*4 + digits[intg%9] + scale/9*4 + digits[scale%9]
	case mysql.MYSQL_TYPE_BIT:
		fixed = (int(meta>>8)*8 + int(meta&0xff) + 7) / 8
	case mysql.MYSQL_TYPE_TIMESTAMP2:
		fixed = 4 + (int(meta)+1)/2
	case mysql.MYSQL_TYPE_DATETIME2:
		fixed = 5 + (int(meta)+1)/2
	case mysql.MYSQL_TYPE_TIME2:
		fixed = 3 + (int(meta)+1)/2
	case mysql.MYSQL_TYPE_ENUM, mysql.MYSQL_TYPE_SET:
		fixed = int(meta & 0xff)
	case mysql.MYSQL_TYPE_BLOB, mysql.MYSQL_TYPE_GEOMETRY, mysql.MYSQL_TYPE_VECTOR, mysql.MYSQL_TYPE_JSON:
		prefix := int(meta)
		if prefix < 1 || prefix > 4 || prefix > len(data) {
			return 0, fmt.Errorf("value of type %d with a %d-byte length and %d bytes left", typ, prefix, len(data))
		}
		var b [4]byte
		copy(b[:], data[:prefix])
		return sized(prefix+int(binary.LittleEndian.Uint32(b[:])), typ, data)
	case mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING:
		length = int(meta)
		fallthrough
	case mysql.MYSQL_TYPE_STRING:
		if length < 256 {
			if len(data) < 1 {
				return 0, fmt.Errorf("string value of type %d is truncated", typ)
			}
			return sized(1+int(data[0]), typ, data)
		}
		if len(data) < 2 {
			return 0, fmt.Errorf("string value of type %d is truncated", typ)
		}
		return sized(2+int(binary.LittleEndian.Uint16(data)), typ, data)
	default:
		return 0, fmt.Errorf("unknown binlog type %d", typ)
	}
	return sized(fixed, typ, data)
}

// sized checks that data holds a value of n bytes.
func sized(n int, typ byte, data []byte) (int, error) {
	if n > len(data) {
		return 0, fmt.Errorf("value of type %d needs %d bytes, %d are left", typ, n, len(data))
	}
	return n, nil
}
