package mysqljson

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

// AppendSQL appends the SQL expression that writes typed value v into a MySQL
// JSON column: its text as a utf8mb4 string (MySQL makes no JSON of a binary
// string), and with patches JSON_SET(CAST(text AS JSON), path, value, ...),
// where each value is an SQL value of the patch's type, which JSON_SET stores
// with that JSON type. escape appends a quoted, escaped string literal.
func AppendSQL(dst, v []byte, escape func(dst, v []byte) []byte) ([]byte, error) {
	text, patches := Split(v)
	if len(patches) == 0 {
		dst = append(dst, "_utf8mb4"...)
		return escape(dst, text), nil
	}
	dst = append(dst, "JSON_SET(CAST(_utf8mb4"...)
	dst = escape(dst, text)
	dst = append(dst, " AS JSON)"...)
	err := Patches(patches, func(p Patch) error {
		dst = append(dst, ", _utf8mb4"...)
		dst = escape(dst, p.Path)
		dst = append(dst, ", "...)
		var err error
		dst, err = appendValue(dst, p, escape)
		return err
	})
	return append(dst, ')'), err
}

// appendValue appends p's value as an SQL value of its type. Numbers are
// checked to be numbers, so no patch can write SQL of its own.
func appendValue(dst []byte, p Patch, escape func(dst, v []byte) []byte) ([]byte, error) {
	switch p.Type {
	case Decimal:
		precision, scale, ok := decimalShape(p.Value)
		if !ok {
			return dst, fmt.Errorf("JSON DECIMAL at %s is %q, not a decimal number", p.Path, p.Value)
		}
		dst = append(dst, "CAST("...)
		dst = append(dst, p.Value...)
		return fmt.Appendf(dst, " AS DECIMAL(%d,%d))", precision, scale), nil
	case Integer, Unsigned:
		if _, err := strconv.ParseUint(string(p.Value), 10, 64); err != nil {
			return dst, fmt.Errorf("JSON %s at %s is %q, not a whole number", p.Type, p.Path, p.Value)
		}
		cast := " AS SIGNED)"
		if p.Type == Unsigned {
			cast = " AS UNSIGNED)"
		}
		dst = append(dst, "CAST("...)
		dst = append(dst, p.Value...)
		return append(dst, cast...), nil
	case Date, Time, Datetime:
		dst = append(dst, [...]string{Date: "DATE", Time: "TIME", Datetime: "TIMESTAMP"}[p.Type]...)
		return escape(dst, p.Value), nil
	case Timestamp:
		// No literal or CAST makes a TIMESTAMP; a JSON_TABLE column does,
		// read in the session's zone, as the text was printed in it.
		if strings.Trim(string(p.Value), "0123456789-: .") != "" {
			return dst, fmt.Errorf("JSON TIMESTAMP at %s is %q, not a datetime", p.Path, p.Value)
		}
		return appendTableColumn(dst, "TIMESTAMP(6)", "_latin1'"+string(p.Value)+"'"), nil
	}
	field, data, err := opaque(p)
	if err != nil {
		return dst, err
	}
	hexData := strings.ToUpper(fmt.Sprintf("%x", data))
	switch {
	case field == 16 && p.Type == Bit && len(data) >= 1 && len(data) <= 8:
		var n [8]byte
		copy(n[8-len(data):], data)
		return appendTableColumn(dst, fmt.Sprintf("BIT(%d)", 8*len(data)), strconv.FormatUint(binary.BigEndian.Uint64(n[:]), 10)), nil
	case p.Type != Blob:
	case field == 15 || field == 253:
		// No expression is a VAR_STRING (253): VARCHAR's X'' is the nearest.
		return append(dst, "X'"+hexData+"'"...), nil
	case field == 250 || field == 251:
		// A binary string function's type follows its length: longer
		// than 65,535 makes a MEDIUMBLOB, than 16 MiB a LONGBLOB.
		length := map[int]string{250: "70000", 251: "17000000"}[field]
		return append(dst, "IF(TRUE, X'"+hexData+"', CAST('' AS BINARY("+length+")))"...), nil
	case field == 252 || field == 249:
		// No expression is a TINYBLOB (249): a BLOB is the nearest, the
		// same bytes and JSON type, printed base64:type252.
		return appendTableColumn(dst, "BLOB", "CAST(X'"+hexData+"' AS JSON)"), nil
	case field == 254 && len(data) > 0 && len(data) <= 255:
		return appendTableColumn(dst, fmt.Sprintf("BINARY(%d)", len(data)), "CAST(X'"+hexData+"' AS JSON)"), nil
	}
	return dst, fmt.Errorf("JSON %s at %s has field type %d, which no SQL expression makes: "+
		"rowlift cannot write it exactly (exclude the table, or store the value another way)", p.Type, p.Path, field)
}

// appendTableColumn appends a subquery whose value is the JSON element
// (given as SQL) read into a JSON_TABLE column of the given SQL type.
func appendTableColumn(dst []byte, sqlType, element string) []byte {
	dst = append(dst, "(SELECT _rl_v FROM JSON_TABLE(JSON_ARRAY("...)
	dst = append(dst, element...)
	dst = append(dst, "), _utf8mb4'$[*]' COLUMNS(_rl_v "...)
	dst = append(dst, sqlType...)
	return append(dst, " PATH _utf8mb4'$')) AS _rl_t)"...)
}

// decimalShape returns the precision and scale of a DECIMAL's text.
func decimalShape(v []byte) (precision, scale int, ok bool) {
	s := strings.TrimPrefix(string(v), "-")
	whole, frac, _ := strings.Cut(s, ".")
	digits := func(d string) bool { return strings.Trim(d, "0123456789") == "" }
	if whole == "" || !digits(whole) || !digits(frac) {
		return 0, 0, false
	}
	whole = strings.TrimLeft(whole, "0")
	precision = max(len(whole)+len(frac), 1)
	return precision, len(frac), precision <= 65 && len(frac) <= 30
}

// opaque decodes an opaque patch's value, base64:typeN:data.
func opaque(p Patch) (field int, data []byte, err error) {
	rest, ok := strings.CutPrefix(string(p.Value), "base64:type")
	typ, encoded, ok2 := strings.Cut(rest, ":")
	if ok && ok2 {
		if field, err = strconv.Atoi(typ); err == nil {
			data, err = base64.StdEncoding.DecodeString(strings.ReplaceAll(encoded, "\n", ""))
		}
	}
	if !ok || !ok2 || err != nil {
		return 0, nil, fmt.Errorf("JSON %s at %s is %q, not base64:typeN:data", p.Type, p.Path, cut(p.Value))
	}
	return field, data, nil
}
