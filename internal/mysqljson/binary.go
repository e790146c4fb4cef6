package mysqljson

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"unsafe"
)

// Type bytes of MySQL's binary JSON (sql-common/json_binary.cc).
const (
	binSmallObject = 0x00
	binLargeObject = 0x01
	binSmallArray  = 0x02
	binLargeArray  = 0x03
	binLiteral     = 0x04
	binInt16       = 0x05
	binUint16      = 0x06
	binInt32       = 0x07
	binUint32      = 0x08
	binInt64       = 0x09
	binUint64      = 0x0a
	binDouble      = 0x0b
	binString      = 0x0c
	binOpaque      = 0x0f
)

// Field types (enum_field_types) an opaque value names.
const (
	fieldTimestamp = 7
	fieldDate      = 10
	fieldTime      = 11
	fieldDatetime  = 12
	fieldVarchar   = 15
	fieldBit       = 16
	fieldDecimal   = 246
	fieldTinyBlob  = 249
	fieldString    = 254
)

// maxDepth bounds the nesting AppendBinary follows, far beyond what MySQL
// stores, so malformed input cannot exhaust the stack.
const maxDepth = 1000

// AppendBinary appends to dst the typed value of a MySQL binary JSON document
// (a JSON column's bytes as the binlog logs them), so replay keeps the
// scalars' types the text alone loses. It never panics: malformed input
// returns an error saying what is wrong.
func AppendBinary(dst, bin []byte) ([]byte, error) {
	if len(bin) == 0 {
		return dst, errors.New("MySQL binary JSON is empty")
	}
	d := decoders.Get().(*decoder)
	defer d.release()
	d.bin = bin
	d.path = d.path[:0]
	d.patches = d.patches[:0]
	d.steps = d.steps[:0]
	d.levels = d.levels[:0]
	start := len(dst)
	dst, err := d.value(dst, bin[0], bin[1:], 1, 0)
	if err != nil {
		return dst[:start], fmt.Errorf("MySQL binary JSON of %d bytes: %w", len(bin), err)
	}
	return append(dst, d.patches...), nil
}

// decoder holds one AppendBinary's state and scratch buffers, pooled so that
// replay's many documents reuse them.
type decoder struct {
	bin     []byte
	patches []byte // encoded patches, the NUL first
	// steps are the path steps to the value being decoded; path is built from
	// them only for a patch.
	steps  []step
	path   []byte
	buf    []byte // a patch value that is not the printed text (base64 with real newlines)
	levels []int  // bytes of values visited at each depth, see charge
}

// step is one path step: an object member's key or an array index.
type step struct {
	key    []byte
	index  int
	member bool
}

var decoders = sync.Pool{New: func() any { return new(decoder) }}

// release returns d to the pool unless a huge document grew its buffers.
func (d *decoder) release() {
	d.bin = nil
	for i := range d.steps {
		d.steps[i].key = nil
	}
	if cap(d.patches)+cap(d.path)+cap(d.buf) <= 1<<20 {
		decoders.Put(d)
	}
}

// charge counts n bytes of a value visited at depth. In a well-formed document
// the values at one depth are disjoint, so they add up to no more than the
// document; more means values referenced twice, which could make a small input
// print an enormous text.
func (d *decoder) charge(depth, n int) error {
	for len(d.levels) <= depth {
		d.levels = append(d.levels, 0)
	}
	d.levels[depth] += n
	if d.levels[depth] > len(d.bin) {
		return errors.New("values overlap (a value is referenced more than once)")
	}
	return nil
}

// value appends the value of type typ whose bytes start at data, at absolute
// offset off in the document and at the given depth (the top level is 0);
// data may run past the value's end.
func (d *decoder) value(dst []byte, typ byte, data []byte, off, depth int) ([]byte, error) {
	switch typ {
	case binSmallObject, binLargeObject, binSmallArray, binLargeArray:
		return d.container(dst, typ, data, off, depth)
	case binLiteral:
		if len(data) < 1 {
			return dst, fmt.Errorf("literal at byte %d is truncated", off)
		}
		switch data[0] {
		case 0:
			return append(dst, "null"...), nil
		case 1:
			return append(dst, "true"...), nil
		case 2:
			return append(dst, "false"...), nil
		}
		return dst, fmt.Errorf("literal at byte %d has unknown value %d", off, data[0])
	case binInt16, binUint16, binInt32, binUint32:
		width := 2
		if typ == binInt32 || typ == binUint32 {
			width = 4
		}
		if len(data) < width {
			return dst, fmt.Errorf("%d-bit integer at byte %d is truncated", 8*width, off)
		}
		switch typ {
		case binInt16:
			return strconv.AppendInt(dst, int64(int16(binary.LittleEndian.Uint16(data))), 10), nil
		case binInt32:
			return strconv.AppendInt(dst, int64(int32(binary.LittleEndian.Uint32(data))), 10), nil
		case binUint16:
			return d.unsigned(dst, uint64(binary.LittleEndian.Uint16(data))), nil
		}
		return d.unsigned(dst, uint64(binary.LittleEndian.Uint32(data))), nil
	case binInt64, binUint64, binDouble:
		if len(data) < 8 {
			return dst, fmt.Errorf("8-byte number at byte %d is truncated", off)
		}
		if err := d.charge(depth, 8); err != nil {
			return dst, err
		}
		v := binary.LittleEndian.Uint64(data)
		switch typ {
		case binUint64:
			return d.unsigned(dst, v), nil
		case binDouble:
			f := math.Float64frombits(v)
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return dst, fmt.Errorf("double at byte %d is %v", off, f)
			}
			return AppendDouble(dst, f), nil
		}
		start := len(dst)
		dst = strconv.AppendInt(dst, int64(v), 10)
		if int64(v) > math.MaxUint32 {
			d.patch(Integer, dst[start:])
		}
		return dst, nil
	case binString:
		s, n, err := lengthAt(data, off)
		if err != nil {
			return dst, fmt.Errorf("string %w", err)
		}
		if err := d.charge(depth, n+len(s)); err != nil {
			return dst, err
		}
		return AppendString(dst, str(s)), nil
	case binOpaque:
		if len(data) < 1 {
			return dst, fmt.Errorf("opaque value at byte %d is truncated", off)
		}
		payload, n, err := lengthAt(data[1:], off+1)
		if err != nil {
			return dst, fmt.Errorf("opaque value of field type %d %w", data[0], err)
		}
		if err := d.charge(depth, 1+n+len(payload)); err != nil {
			return dst, err
		}
		return d.opaque(dst, data[0], payload, off)
	}
	return dst, fmt.Errorf("value at byte %d has unknown type %#x", off, typ)
}

// unsigned appends an UNSIGNED INTEGER, patched when text would read it as
// an INTEGER.
func (d *decoder) unsigned(dst []byte, v uint64) []byte {
	start := len(dst)
	dst = strconv.AppendUint(dst, v, 10)
	if v <= math.MaxUint32 {
		d.patch(Unsigned, dst[start:])
	}
	return dst
}

// container appends an object or an array: element count and byte size (2
// bytes each in the small format, 4 in the large), the key entries of an
// object (offset, 2-byte length), the value entries (type, then an offset or
// an inlined value), then the keys and values, offsets counted from data's
// start.
func (d *decoder) container(dst []byte, typ byte, data []byte, off, depth int) ([]byte, error) {
	object := typ == binSmallObject || typ == binLargeObject
	what := "array"
	if object {
		what = "object"
	}
	if depth >= maxDepth {
		return dst, fmt.Errorf("%s at byte %d is nested deeper than %d levels", what, off, maxDepth)
	}
	large := typ == binLargeObject || typ == binLargeArray
	width := 2
	if large {
		width = 4
	}
	if len(data) < 2*width {
		return dst, fmt.Errorf("%s at byte %d is truncated (%d bytes left)", what, off, len(data))
	}
	count, size := uint64(readUint(data, width)), uint64(readUint(data[width:], width))
	if size > uint64(len(data)) {
		return dst, fmt.Errorf("%s at byte %d claims %d bytes, %d are left", what, off, size, len(data))
	}
	data = data[:size]
	keyEntry := 0
	if object {
		keyEntry = width + 2
	}
	valueEntry := 1 + width
	keysAt := uint64(2 * width)
	valuesAt := keysAt + count*uint64(keyEntry)
	if header := valuesAt + count*uint64(valueEntry); header > size {
		return dst, fmt.Errorf("%s at byte %d has %d elements, whose entries need %d bytes of its %d", what, off, count, header, size)
	}
	if err := d.charge(depth, int(size)); err != nil {
		return dst, err
	}
	open, closing := byte('['), byte(']')
	if object {
		open, closing = '{', '}'
	}
	dst = append(dst, open)
	d.steps = append(d.steps, step{member: object})
	for i := range int(count) {
		if i > 0 {
			dst = append(dst, ',', ' ')
		}
		s := &d.steps[len(d.steps)-1]
		s.index = i
		if object {
			e := int(keysAt) + i*keyEntry
			keyOff, keyLen := readUint(data[e:], width), int(binary.LittleEndian.Uint16(data[e+width:]))
			if keyOff > len(data) || keyLen > len(data)-keyOff {
				return dst, fmt.Errorf("key %d of the object at byte %d lies outside it", i, off)
			}
			s.key = data[keyOff : keyOff+keyLen]
			dst = AppendString(dst, str(s.key))
			dst = append(dst, ':', ' ')
		}
		e := int(valuesAt) + i*valueEntry
		vt := data[e]
		field := data[e+1 : e+1+width]
		var err error
		if inlined(vt, large) {
			dst, err = d.value(dst, vt, field, off+e+1, depth+1)
		} else {
			at := readUint(field, width)
			if at >= len(data) {
				return dst, fmt.Errorf("element %d of the %s at byte %d points past its end", i, what, off)
			}
			dst, err = d.value(dst, vt, data[at:], off+at, depth+1)
		}
		if err != nil {
			return dst, err
		}
	}
	d.steps = d.steps[:len(d.steps)-1]
	return append(dst, closing), nil
}

// inlined says whether a value of type typ sits in its entry's offset field.
func inlined(typ byte, large bool) bool {
	switch typ {
	case binLiteral, binInt16, binUint16:
		return true
	case binInt32, binUint32:
		return large
	}
	return false
}

// readUint reads a little-endian unsigned integer of 2 or 4 bytes.
func readUint(b []byte, width int) int {
	if width == 2 {
		return int(binary.LittleEndian.Uint16(b))
	}
	return int(binary.LittleEndian.Uint32(b))
}

// lengthAt reads a variable-length size (7 bits a byte, low first, at most 5
// bytes) and the bytes it counts, returning them and the size's length.
func lengthAt(data []byte, off int) (field []byte, n int, err error) {
	var size uint64
	for n = 0; n < 5; n++ {
		if n >= len(data) {
			return nil, 0, fmt.Errorf("at byte %d has a truncated length", off)
		}
		size |= uint64(data[n]&0x7f) << (7 * n)
		if data[n]&0x80 == 0 {
			n++
			if size > math.MaxUint32 {
				return nil, 0, fmt.Errorf("at byte %d has a length beyond 32 bits", off)
			}
			if size > uint64(len(data)-n) {
				return nil, 0, fmt.Errorf("at byte %d claims %d bytes, %d are left", off, size, len(data)-n)
			}
			return data[n : n+int(size)], n, nil
		}
	}
	return nil, 0, fmt.Errorf("at byte %d has a length of more than 5 bytes", off)
}

// str views b as a string without copying, for printing it: the bytes are
// only read during the call.
func str(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// opaque appends an opaque scalar as MySQL prints it: a DECIMAL as a bare
// number, a date or time as a string, anything else as the string
// base64:type<field type>:<its bytes in MIME base64>.
func (d *decoder) opaque(dst []byte, field byte, payload []byte, off int) ([]byte, error) {
	start := len(dst)
	var err error
	switch field {
	case fieldDecimal:
		if dst, err = appendDecimal(dst, payload); err != nil {
			return dst, fmt.Errorf("DECIMAL at byte %d: %w", off, err)
		}
		d.patch(Decimal, dst[start:])
		return dst, nil
	case fieldDate, fieldTime, fieldDatetime, fieldTimestamp:
		if len(payload) != 8 {
			return dst, fmt.Errorf("temporal of field type %d at byte %d has %d bytes, not 8", field, off, len(payload))
		}
		packed := int64(binary.LittleEndian.Uint64(payload))
		dst = append(dst, '"')
		t := Time
		switch field {
		case fieldTime:
			dst, err = appendTime(dst, packed)
		case fieldDate:
			t = Date
			dst, err = appendDatetime(dst, packed, false)
		case fieldDatetime:
			t = Datetime
			dst, err = appendDatetime(dst, packed, true)
		default:
			t = Timestamp
			dst, err = appendDatetime(dst, packed, true)
		}
		if err != nil {
			return dst, fmt.Errorf("%s at byte %d: %w", t, off, err)
		}
		d.patch(t, dst[start+1:])
		return append(dst, '"'), nil
	}
	t := Opaque
	switch {
	case field == fieldBit:
		t = Bit
	case field == fieldVarchar, field >= fieldTinyBlob && field <= fieldString:
		t = Blob
	}
	d.buf = append(d.buf[:0], "base64:type"...)
	d.buf = strconv.AppendUint(d.buf, uint64(field), 10)
	d.buf = append(d.buf, ':')
	d.buf = appendBase64(d.buf, payload)
	d.patch(t, d.buf)
	return AppendString(dst, str(d.buf)), nil
}

// appendBase64 appends b in base64 broken into lines of 76 characters, as
// MySQL's base64_encode writes it.
func appendBase64(dst, b []byte) []byte {
	const line = 76 / 4 * 3 // input bytes a line holds
	for len(b) > 0 {
		n := min(len(b), line)
		dst = base64.StdEncoding.AppendEncode(dst, b[:n])
		if b = b[n:]; len(b) > 0 {
			dst = append(dst, '\n')
		}
	}
	return dst
}

// patch records the scalar being decoded as one whose text does not tell its
// type t; value is its printed form.
func (d *decoder) patch(t Type, value []byte) {
	d.path = append(d.path[:0], '$')
	for _, s := range d.steps {
		if s.member {
			d.path = AppendMemberPath(d.path, str(s.key))
		} else {
			d.path = AppendIndexPath(d.path, s.index)
		}
	}
	d.patches = AppendPatch(d.patches, Patch{Path: d.path, Type: t, Value: value}, len(d.patches) == 0)
}

// dig2bytes is the bytes MySQL's binary DECIMAL takes for a group of n < 9
// digits.
var dig2bytes = [9]int{0, 1, 1, 2, 2, 3, 3, 4, 4}

// appendDecimal appends a JSON DECIMAL's payload (precision, scale, then the
// value as decimal2bin writes it) as MySQL prints it: its integer digits
// without leading zeros (0 when there are none), then exactly scale
// fractional digits. The binary value is big-endian groups of 9 digits in 4
// bytes, the integer part's leading digits and the fraction's trailing ones in
// fewer bytes; the first bit is flipped, and a negative value's bytes are all
// inverted.
func appendDecimal(dst, payload []byte) ([]byte, error) {
	if len(payload) < 2 {
		return dst, errors.New("no precision and scale")
	}
	precision, scale := int(payload[0]), int(payload[1])
	bin := payload[2:]
	if scale > precision || precision == 0 {
		return dst, fmt.Errorf("precision %d and scale %d", precision, scale)
	}
	intg := precision - scale
	intgFull, intgLead := intg/9, intg%9
	fracFull, fracTail := scale/9, scale%9
	if size := dig2bytes[intgLead] + 4*(intgFull+fracFull) + dig2bytes[fracTail]; len(bin) != size {
		return dst, fmt.Errorf("DECIMAL(%d,%d) of %d bytes, not %d", precision, scale, len(bin), size)
	}
	var mask uint32
	if bin[0]&0x80 == 0 {
		mask = math.MaxUint32
		dst = append(dst, '-')
	}
	first := true
	// group reads the next group of digits, checking that it has no more.
	group := func(digits int) (uint32, error) {
		n := 4
		if digits < 9 {
			n = dig2bytes[digits]
		}
		var v uint32
		for i := range n {
			b := bin[i]
			if first {
				b ^= 0x80
				first = false
			}
			v = v<<8 | uint32(b)
		}
		bin = bin[n:]
		v ^= mask >> (32 - 8*n)
		if v >= pow10[digits] {
			return 0, fmt.Errorf("group of %d digits holds %d", digits, v)
		}
		return v, nil
	}
	// Integer part: the leading group, then full ones; zeros before the
	// first nonzero group are not printed.
	printed := false
	for i := -1; i < intgFull; i++ {
		digits := 9
		if i < 0 {
			if digits = intgLead; digits == 0 {
				continue
			}
		}
		v, err := group(digits)
		if err != nil {
			return dst, err
		}
		switch {
		case printed:
			dst = appendPadded(dst, v, 9)
		case v != 0:
			dst = strconv.AppendUint(dst, uint64(v), 10)
			printed = true
		}
	}
	if !printed {
		dst = append(dst, '0')
	}
	if scale == 0 {
		return dst, nil
	}
	dst = append(dst, '.')
	for i := 0; i <= fracFull; i++ {
		digits := 9
		if i == fracFull {
			if digits = fracTail; digits == 0 {
				break
			}
		}
		v, err := group(digits)
		if err != nil {
			return dst, err
		}
		dst = appendPadded(dst, v, digits)
	}
	return dst, nil
}

var pow10 = [10]uint32{1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000}

// appendPadded appends v in exactly digits digits, zeros first.
func appendPadded(dst []byte, v uint32, digits int) []byte {
	for p := digits - 1; p >= 0; p-- {
		dst = append(dst, byte('0'+v/pow10[p]%10))
	}
	return dst
}

// Packed temporals (MySQL's TIME_to_longlong_*_packed): the fraction in
// microseconds in the low 24 bits, above it the seconds (6 bits), minutes (6),
// hours (5 bits for a datetime, 10 for a TIME), and for a date or datetime
// the day (5 bits) and year*13+month; a TIME's sign is the number's.
const fracBits = 24

// appendDatetime appends a packed DATE (withTime false: YYYY-MM-DD) or
// DATETIME or TIMESTAMP (YYYY-MM-DD hh:mm:ss.ffffff).
func appendDatetime(dst []byte, packed int64, withTime bool) ([]byte, error) {
	if packed < 0 {
		return dst, fmt.Errorf("negative packed value %d", packed)
	}
	frac := packed % (1 << fracBits)
	ymdhms := packed >> fracBits
	ymd, hms := ymdhms>>17, ymdhms%(1<<17)
	day, ym := ymd%(1<<5), ymd>>5
	year, month := ym/13, ym%13
	hour, minute, second := hms>>12, hms>>6%(1<<6), hms%(1<<6)
	if year > 9999 || day > 31 || hour > 23 || minute > 59 || second > 59 || frac > 999999 {
		return dst, fmt.Errorf("packed value %d is out of range", packed)
	}
	dst = appendPadded(dst, uint32(year), 4)
	dst = append(dst, '-')
	dst = appendPadded(dst, uint32(month), 2)
	dst = append(dst, '-')
	dst = appendPadded(dst, uint32(day), 2)
	if !withTime {
		return dst, nil
	}
	dst = append(dst, ' ')
	return appendClock(dst, uint32(hour), 2, uint32(minute), uint32(second), uint32(frac)), nil
}

// appendTime appends a packed TIME: [-]hh:mm:ss.ffffff, the hours in at least
// two digits.
func appendTime(dst []byte, packed int64) ([]byte, error) {
	if packed == math.MinInt64 {
		return dst, fmt.Errorf("packed value %d is out of range", packed)
	}
	if packed < 0 {
		dst = append(dst, '-')
		packed = -packed
	}
	frac := packed % (1 << fracBits)
	hms := packed >> fracBits
	hour, minute, second := hms>>12, hms>>6%(1<<6), hms%(1<<6)
	if hour > 838 || minute > 59 || second > 59 || frac > 999999 {
		return dst, fmt.Errorf("packed value %d is out of range", packed)
	}
	digits := 2
	if hour > 99 {
		digits = 3
	}
	return appendClock(dst, uint32(hour), digits, uint32(minute), uint32(second), uint32(frac)), nil
}

// appendClock appends hh:mm:ss.ffffff, the hours in hourDigits digits.
func appendClock(dst []byte, hour uint32, hourDigits int, minute, second, frac uint32) []byte {
	dst = appendPadded(dst, hour, hourDigits)
	dst = append(dst, ':')
	dst = appendPadded(dst, minute, 2)
	dst = append(dst, ':')
	dst = appendPadded(dst, second, 2)
	dst = append(dst, '.')
	return appendPadded(dst, frac, 6)
}
