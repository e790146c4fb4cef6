// Package mysqljson moves MySQL JSON values between MySQL servers with every
// scalar's JSON type kept. MySQL's JSON holds, besides the types of JSON text,
// DECIMAL, UNSIGNED INTEGER, DATE, TIME, DATETIME, TIMESTAMP and opaque values
// (BIT, BLOB and others) that print like numbers or strings: text parsed back
// makes a DOUBLE of 1.50, an INTEGER of an UNSIGNED 5, a STRING of a DATE, and
// (MySQL's parser reads every whole number above 2^32-1 as unsigned) an
// UNSIGNED INTEGER of the INTEGER 5000000000.
//
// A typed value is therefore the document's text as SELECT prints it, and,
// when it holds such scalars, a NUL byte and patches: for each of them, in
// the order they appear in the text, its path, its type and its printed
// value. JSON text never holds a raw NUL (control characters are escaped), so
// the split is unambiguous, and a document with no such scalar is its text
// alone, byte for byte what rowlift always streamed. Replay builds typed
// values from the binlog's binary JSON (AppendBinary); the copy builds them
// from the text and a type map the source computes in the chunk's SELECT
// (TypeMapExpr, TypeMapper). The target writes one through JSON_SET, which
// stores each patch's SQL value with its own type (AppendSQL).
package mysqljson

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Type is a JSON type whose values print like another type's.
type Type uint8

// The types a patch restores: what JSON_TYPE names them.
const (
	Decimal  Type = iota + 1 // printed as a number; text makes a DOUBLE or an INTEGER
	Integer                  // INTEGER above 2^32-1; text makes an UNSIGNED INTEGER
	Unsigned                 // UNSIGNED INTEGER up to 2^32-1; text makes an INTEGER
	Date                     // the rest print as strings
	Time
	Datetime
	Timestamp
	Bit    // opaque of a BIT value ("base64:type16:...")
	Blob   // opaque of a binary string value
	Opaque // opaque of any other field type
)

var typeNames = [...]string{Decimal: "DECIMAL", Integer: "INTEGER", Unsigned: "UNSIGNED INTEGER", Date: "DATE", Time: "TIME",
	Datetime: "DATETIME", Timestamp: "TIMESTAMP", Bit: "BIT", Blob: "BLOB", Opaque: "OPAQUE"}

// String is the type's JSON_TYPE name.
func (t Type) String() string {
	if int(t) < len(typeNames) && typeNames[t] != "" {
		return typeNames[t]
	}
	return fmt.Sprintf("Type(%d)", uint8(t))
}

// TypeOf returns the Type JSON_TYPE names name, or false for a type whose
// text always says it (OBJECT, ARRAY, STRING, DOUBLE, BOOLEAN, NULL).
func TypeOf(name string) (Type, bool) {
	for t, n := range typeNames {
		if n != "" && n == name {
			return Type(t), true
		}
	}
	return 0, false
}

// Patch is one scalar whose type its text does not tell.
type Patch struct {
	// Path is where it is, as a MySQL JSON path with every member name
	// quoted: $."a"[3]."b c".
	Path []byte
	Type Type
	// Value is the scalar as SELECT prints it, a string's quotes and escapes
	// removed: 1.50, 18446744073709551615, 2020-01-02, -838:59:59.000000,
	// 2020-01-02 03:04:05.123456, base64:type15:AQI= (the base64 broken into
	// lines of 76 characters, as MySQL prints it).
	Value []byte
}

// Split returns a typed value's text and its encoded patches (empty when it
// has none).
func Split(v []byte) (text, patches []byte) {
	if i := bytes.IndexByte(v, 0); i >= 0 {
		return v[:i], v[i+1:]
	}
	return v, nil
}

// AppendPatch appends p to a typed value; the first patch adds the NUL that
// ends the text. Patches must come in the order their scalars appear in the
// text.
func AppendPatch(v []byte, p Patch, first bool) []byte {
	if first {
		v = append(v, 0)
	}
	v = binary.AppendUvarint(v, uint64(len(p.Path)))
	v = append(v, p.Path...)
	v = append(v, byte(p.Type))
	v = binary.AppendUvarint(v, uint64(len(p.Value)))
	return append(v, p.Value...)
}

// Patches decodes the patches Split returned, calling each with each in
// order; the patch's slices alias patches. It stops at each's first error.
func Patches(patches []byte, each func(Patch) error) error {
	for len(patches) > 0 {
		var p Patch
		var err error
		if p.Path, patches, err = lengthPrefixed(patches); err != nil {
			return fmt.Errorf("JSON patch path: %w", err)
		}
		if len(patches) == 0 {
			return fmt.Errorf("JSON patch at %s has no type", p.Path)
		}
		p.Type, patches = Type(patches[0]), patches[1:]
		if p.Type < Decimal || p.Type > Opaque {
			return fmt.Errorf("JSON patch at %s has unknown type %d", p.Path, p.Type)
		}
		if p.Value, patches, err = lengthPrefixed(patches); err != nil {
			return fmt.Errorf("JSON patch value at %s: %w", p.Path, err)
		}
		if err := each(p); err != nil {
			return err
		}
	}
	return nil
}

func lengthPrefixed(b []byte) (field, rest []byte, err error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return nil, nil, fmt.Errorf("truncated (%d bytes left)", len(b))
	}
	return b[k : k+int(n)], b[k+int(n):], nil
}
