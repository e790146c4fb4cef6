package binlogrow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// appendJSON appends MySQL JSON, as go-mysql renders it with
// RenderJSONAsMySQLText (compact, HTML characters escaped, doubles in Go's
// formats), in the text a SELECT of the column prints: ", " and ": " between
// members, strings escaped as MySQL escapes them, doubles as MySQL prints them.
// Object keys stay in go-mysql's order, which is the stored order MySQL prints.
//
// One case cannot come out as SELECT prints it: the binlog text no longer
// tells a double from a DECIMAL (JSON_OBJECT('d', CAST(x AS DECIMAL(p,1)))), so
// a whole DECIMAL of 16 or more integer digits with scale 1 whose value a
// double holds exactly, printed by SELECT as "1000000000000000.0", comes out as
// the double text "1e15": the same value, other bytes. Every other number is
// printed exactly.
func appendJSON(dst []byte, text string) ([]byte, error) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	// open holds, for each open object or array, whether it is an object,
	// and first whether its next member is its first; key tells whether the
	// next token in an object is a key.
	type level struct{ object, first bool }
	var open []level
	key := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return dst, fmt.Errorf("JSON from the binlog decoder %q: %w", cut(text), err)
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			open = open[:len(open)-1]
			dst = append(dst, byte(d))
			key = len(open) > 0 && open[len(open)-1].object
			continue
		}
		if len(open) > 0 {
			top := &open[len(open)-1]
			switch {
			case top.object && !key:
				dst = append(dst, ':', ' ')
			case !top.first:
				dst = append(dst, ',', ' ')
			}
			top.first = false
		}
		wasKey := key
		key = len(open) > 0 && open[len(open)-1].object && !wasKey
		switch t := tok.(type) {
		case json.Delim:
			open = append(open, level{object: t == '{', first: true})
			key = t == '{'
			dst = append(dst, byte(t))
		case string:
			dst = appendJSONString(dst, t)
		case json.Number:
			if dst, err = appendJSONNumber(dst, string(t)); err != nil {
				return dst, err
			}
		case bool:
			dst = strconv.AppendBool(dst, t)
		case nil:
			dst = append(dst, "null"...)
		}
	}
	if len(open) > 0 {
		return dst, fmt.Errorf("JSON from the binlog decoder %q ends inside a value", cut(text))
	}
	return dst, nil
}

// cut shortens JSON text for an error message.
func cut(text string) string {
	if len(text) > 80 {
		return text[:80] + "..."
	}
	return text
}

// appendJSONString appends s as a quoted JSON string escaped as MySQL escapes
// it: quote, backslash and control characters only, \b \f \n \r \t by name and
// the others as \u00xx; everything else (U+007F, '/', '<', U+2028) as is.
func appendJSONString(dst []byte, s string) []byte {
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

// appendJSONNumber appends a number of go-mysql's JSON text as MySQL prints it.
// go-mysql prints integers as digits, DECIMALs as their digits with their
// scale, and doubles with a '.' or an exponent: whole ones as "123.0" and the
// others in Go's %g ("0.5", "1.5e-07", "1.23456789e+07"). MySQL prints the
// same shortest digits with other exponent rules, so the texts differ only
// for doubles with an exponent and whole doubles of 16 or more digits. A whole
// number of 16 or more digits with ".0" is taken for a double when it is one
// exactly (a DECIMAL of that value is the ambiguous case, see appendJSON).
func appendJSONNumber(dst []byte, n string) ([]byte, error) {
	intPart, frac, hasFrac := strings.Cut(strings.TrimPrefix(n, "-"), ".")
	exponent := strings.ContainsAny(n, "eE")
	if !exponent && !(hasFrac && frac == "0" && len(intPart) > 15) {
		return append(dst, n...), nil
	}
	f, err := strconv.ParseFloat(n, 64)
	if err != nil {
		return dst, fmt.Errorf("JSON number %q from the binlog decoder: %w", n, err)
	}
	if !exponent && strconv.FormatFloat(f, 'f', 1, 64) != n {
		return append(dst, n...), nil // a DECIMAL no double equals
	}
	return appendJSONDouble(dst, f), nil
}

// appendJSONDouble appends a double as MySQL prints one in JSON (my_gcvt on
// its shortest digits): plain notation when the decimal point falls within
// the digits or at most 15 places after the first digit and no more than 14
// places before it, ".0" added to whole numbers; otherwise d.ddde[-]x, the
// exponent without '+' or leading zeros.
func appendJSONDouble(dst []byte, f float64) []byte {
	e := strconv.AppendFloat(nil, f, 'e', -1, 64)
	if f < 0 || (f == 0 && e[0] == '-') {
		dst = append(dst, '-')
		e = e[1:]
	}
	mant, expText, _ := bytes.Cut(e, []byte{'e'})
	digits := bytes.Replace(mant, []byte{'.'}, nil, 1)
	exp, _ := strconv.Atoi(string(expText)) // strconv wrote it
	point := exp + 1                        // digits before the decimal point
	if point >= -14 && (point <= 15 || len(digits) > point) {
		switch {
		case point <= 0:
			dst = append(dst, '0', '.')
			dst = append(dst, bytes.Repeat([]byte{'0'}, -point)...)
			return append(dst, digits...)
		case point < len(digits):
			dst = append(dst, digits[:point]...)
			dst = append(dst, '.')
			return append(dst, digits[point:]...)
		}
		dst = append(dst, digits...)
		dst = append(dst, bytes.Repeat([]byte{'0'}, point-len(digits))...)
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
