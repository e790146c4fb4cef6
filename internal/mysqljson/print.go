package mysqljson

import (
	"bytes"
	"strconv"
)

// AppendString appends s as a quoted JSON string escaped as MySQL escapes
// it: quote, backslash and control characters only, \b \f \n \r \t by name and
// the others as \u00xx; everything else (U+007F, '/', '<', U+2028) as is.
func AppendString(dst []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	for i := range len(s) {
		switch c := s[i]; c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			if c < 0x20 {
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
				continue
			}
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

// AppendDouble appends a double as MySQL prints one in JSON (my_gcvt on
// its shortest digits): plain notation when the decimal point falls within
// the digits or at most 15 places after the first digit and no more than 14
// places before it, ".0" added to whole numbers; otherwise d.ddde[-]x, the
// exponent without '+' or leading zeros.
func AppendDouble(dst []byte, f float64) []byte {
	var buf, digitBuf [32]byte // no allocation: replay prints every double
	e := strconv.AppendFloat(buf[:0], f, 'e', -1, 64)
	if e[0] == '-' { // -0 too
		dst = append(dst, '-')
		e = e[1:]
	}
	mark := bytes.IndexByte(e, 'e')
	digits := append(digitBuf[:0], e[0])
	if mark > 1 {
		digits = append(digits, e[2:mark]...) // after the '.'
	}
	exp := 0
	for _, c := range e[mark+2:] { // after the exponent's sign
		exp = exp*10 + int(c-'0')
	}
	if e[mark+1] == '-' {
		exp = -exp
	}
	point := exp + 1 // digits before the decimal point
	if point >= -14 && (point <= 15 || len(digits) > point) {
		switch {
		case point <= 0:
			dst = append(dst, '0', '.')
			dst = appendZeros(dst, -point)
			return append(dst, digits...)
		case point < len(digits):
			dst = append(dst, digits[:point]...)
			dst = append(dst, '.')
			return append(dst, digits[point:]...)
		}
		dst = append(dst, digits...)
		dst = appendZeros(dst, point-len(digits))
		return append(dst, '.', '0')
	}
	dst = append(dst, digits[0])
	if len(digits) > 1 {
		dst = append(dst, '.')
		dst = append(dst, digits[1:]...)
	}
	dst = append(dst, 'e')
	return strconv.AppendInt(dst, int64(exp), 10)
}

func appendZeros(dst []byte, n int) []byte {
	for range n {
		dst = append(dst, '0')
	}
	return dst
}

// AppendMemberPath appends the path step to an object's member key: ."key",
// the name quoted so that any key is a valid step.
func AppendMemberPath(path []byte, key string) []byte {
	path = append(path, '.')
	return AppendString(path, key)
}

// AppendIndexPath appends the path step to an array's element i: [i].
func AppendIndexPath(path []byte, i int) []byte {
	path = append(path, '[')
	path = strconv.AppendInt(path, int64(i), 10)
	return append(path, ']')
}
