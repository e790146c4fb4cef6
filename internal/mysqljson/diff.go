package mysqljson

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Operations of a JSON diff (enum_json_diff_operation).
const (
	diffReplace = 0
	diffInsert  = 1
	diffRemove  = 2
)

var diffOps = [...]string{diffReplace: "REPLACE", diffInsert: "INSERT", diffRemove: "REMOVE"}

// ApplyDiffs appends to dst the typed value of the document a partial JSON
// update (binlog_row_value_options=PARTIAL_JSON) makes of the typed value
// before, so replay keeps exact types when the binlog logs only the changes:
// byte for byte what AppendBinary gives for the updated document. diffs is the
// column's diff vector as the binlog logs it without its 4-byte length: each
// diff an operation byte (0 REPLACE, 1 INSERT, 2 REMOVE), the path as a
// length-encoded string and, but for REMOVE, the new value as a length-encoded
// binary JSON document. They apply in order as MySQL's apply_json_diffs does;
// a diff MySQL would reject returns an error, and it never panics.
func ApplyDiffs(dst, before, diffs []byte) ([]byte, error) {
	root, err := parseTyped(before)
	if err != nil {
		return dst, fmt.Errorf("JSON document before a partial update: %w", err)
	}
	for i := 0; len(diffs) > 0; i++ {
		op := diffs[0]
		if op > diffRemove {
			return dst, fmt.Errorf("JSON diff %d has unknown operation %d", i, op)
		}
		var path, value []byte
		if path, diffs, err = netField(diffs[1:]); err != nil {
			return dst, fmt.Errorf("JSON diff %d (%s): path %w", i, diffOps[op], err)
		}
		var v *docNode
		if op != diffRemove {
			if value, diffs, err = netField(diffs); err != nil {
				return dst, fmt.Errorf("JSON diff %d (%s of %s): value %w", i, diffOps[op], path, err)
			}
			// Its own buffer: the tree's nodes alias it.
			typed, err := AppendBinary(nil, value)
			if err != nil {
				return dst, fmt.Errorf("JSON diff %d (%s of %s): %w", i, diffOps[op], path, err)
			}
			if v, err = parseTyped(typed); err != nil {
				return dst, fmt.Errorf("JSON diff %d (%s of %s): %w", i, diffOps[op], path, err)
			}
		}
		if err := root.apply(op, path, v); err != nil {
			return dst, fmt.Errorf("JSON diff %d (%s of %s): %w", i, diffOps[op], path, err)
		}
	}
	var pr printer
	dst = pr.print(dst, root)
	return append(dst, pr.patches...), nil
}

// netField reads a MySQL length-encoded string (net_field_length: one byte
// below 251, else 0xfc, 0xfd or 0xfe and 2, 3 or 8 bytes).
func netField(b []byte) (field, rest []byte, err error) {
	if len(b) == 0 {
		return nil, nil, errors.New("is missing")
	}
	n, k := uint64(b[0]), 1
	switch b[0] {
	case 0xfb, 0xff:
		return nil, nil, fmt.Errorf("has an invalid length byte %#x", b[0])
	case 0xfc, 0xfd, 0xfe:
		k = [...]int{3, 4, 9}[b[0]-0xfc]
		if len(b) < k {
			return nil, nil, errors.New("has a truncated length")
		}
		var buf [8]byte
		copy(buf[:], b[1:k])
		n = binary.LittleEndian.Uint64(buf[:])
	}
	if n > uint64(len(b)-k) {
		return nil, nil, fmt.Errorf("claims %d bytes, %d are left", n, len(b)-k)
	}
	return b[k : k+int(n)], b[k+int(n):], nil
}

// docNode is a JSON value of a typed value: a scalar keeps its printed text and
// its patch's type and value (typ 0 when it has none).
type docNode struct {
	kind  byte // 0 for a scalar, '{' or '['
	text  []byte
	typ   Type
	value []byte
	keys  [][]byte // an object's member names, in MySQL's order
	kids  []*docNode
}

// keyCompare orders object keys as MySQL's binary JSON stores and prints them:
// shorter first, then bytewise.
func keyCompare(a, b []byte) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	return bytes.Compare(a, b)
}

// parseTyped parses a typed value into its tree, each patch attached to the
// scalar at its path.
func parseTyped(v []byte) (*docNode, error) {
	text, patches := Split(v)
	p := parser{text: text, path: []byte{'$'}}
	if err := Patches(patches, func(pt Patch) error {
		p.patches = append(p.patches, pt)
		return nil
	}); err != nil {
		return nil, err
	}
	n, err := p.value(0)
	if err != nil {
		return nil, err
	}
	if p.skipSpace(); p.pos < len(p.text) {
		return nil, fmt.Errorf("JSON text has more after its value, at byte %d", p.pos)
	}
	if len(p.patches) > 0 {
		return nil, fmt.Errorf("JSON patch at %s is not at a scalar of the text", p.patches[0].Path)
	}
	return n, nil
}

// parser reads JSON text as MySQL prints it; path is the current value's.
type parser struct {
	text    []byte
	pos     int
	patches []Patch
	path    []byte
	slab    []docNode // nodes are allocated from, a few hundred at a time
}

func (p *parser) node() *docNode {
	if len(p.slab) == 0 {
		p.slab = make([]docNode, 256)
	}
	n := &p.slab[0]
	p.slab = p.slab[1:]
	return n
}

func (p *parser) skipSpace() {
	for p.pos < len(p.text) && (p.text[p.pos] == ' ' || p.text[p.pos] == '\n' || p.text[p.pos] == '\t' || p.text[p.pos] == '\r') {
		p.pos++
	}
}

func (p *parser) value(depth int) (*docNode, error) {
	if depth >= maxDepth {
		return nil, fmt.Errorf("JSON text is nested deeper than %d levels", maxDepth)
	}
	p.skipSpace()
	if p.pos >= len(p.text) {
		return nil, fmt.Errorf("JSON text ends where a value should be, at byte %d", p.pos)
	}
	switch c := p.text[p.pos]; c {
	case '{', '[':
		return p.container(c, depth)
	case '"':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		return p.scalar(s), nil
	}
	start := p.pos
	for p.pos < len(p.text) && !endsScalar(p.text[p.pos]) {
		p.pos++
	}
	if p.pos == start {
		return nil, fmt.Errorf("JSON text has %q where a value should be, at byte %d", p.text[p.pos], p.pos)
	}
	return p.scalar(p.text[start:p.pos]), nil
}

// endsScalar says whether c ends a number or a literal.
func endsScalar(c byte) bool {
	switch c {
	case ',', ']', '}', ' ', '\n', '\t', '\r':
		return true
	}
	return false
}

// scalar makes the node of a scalar printed as text, with the next patch if
// it is at this path.
func (p *parser) scalar(text []byte) *docNode {
	n := p.node()
	n.text = text
	if len(p.patches) > 0 && bytes.Equal(p.patches[0].Path, p.path) {
		n.typ, n.value = p.patches[0].Type, p.patches[0].Value
		p.patches = p.patches[1:]
	}
	return n
}

// str reads a quoted string, returning its text with the quotes.
func (p *parser) str() ([]byte, error) {
	start := p.pos
	for i := p.pos + 1; i < len(p.text); i++ {
		switch p.text[i] {
		case '\\':
			i++
		case '"':
			p.pos = i + 1
			return p.text[start:p.pos], nil
		}
	}
	return nil, fmt.Errorf("JSON string at byte %d is not closed", start)
}

func (p *parser) container(open byte, depth int) (*docNode, error) {
	n := p.node()
	n.kind = open
	closing := byte(']')
	if open == '{' {
		closing = '}'
	}
	p.pos++
	pathLen := len(p.path)
	for i := 0; ; i++ {
		p.skipSpace()
		if p.pos >= len(p.text) {
			return nil, fmt.Errorf("JSON text ends inside a container, at byte %d", p.pos)
		}
		if p.text[p.pos] == closing {
			p.pos++
			return n, nil
		}
		if i > 0 {
			if p.text[p.pos] != ',' {
				return nil, fmt.Errorf("JSON text has %q where ',' should be, at byte %d", p.text[p.pos], p.pos)
			}
			p.pos++
			p.skipSpace()
		}
		p.path = p.path[:pathLen]
		if open == '{' {
			if p.pos >= len(p.text) || p.text[p.pos] != '"' {
				return nil, fmt.Errorf("JSON object has no key at byte %d", p.pos)
			}
			quoted, err := p.str()
			if err != nil {
				return nil, err
			}
			key, err := unquote(quoted)
			if err != nil {
				return nil, fmt.Errorf("JSON key at byte %d: %w", p.pos-len(quoted), err)
			}
			if p.skipSpace(); p.pos >= len(p.text) || p.text[p.pos] != ':' {
				return nil, fmt.Errorf("JSON object has no ':' after its key at byte %d", p.pos)
			}
			p.pos++
			n.keys = append(n.keys, key)
			p.path = AppendMemberPath(p.path, str(key))
		} else {
			p.path = AppendIndexPath(p.path, i)
		}
		kid, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		n.kids = append(n.kids, kid)
	}
}

// unquote returns the string a quoted JSON string holds.
func unquote(q []byte) ([]byte, error) {
	s := q[1 : len(q)-1]
	if bytes.IndexByte(s, '\\') < 0 {
		return s, nil
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		if i++; i >= len(s) {
			return nil, errors.New("string ends in a backslash")
		}
		switch s[i] {
		case '"', '\\', '/':
			out = append(out, s[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, k, err := hexRune(s[i+1:])
			if err != nil {
				return nil, err
			}
			if utf16.IsSurrogate(r) {
				r2, k2, err := hexRune(s[i+1+k:])
				if err != nil || k2 != 6 {
					return nil, errors.New("string has a lone surrogate")
				}
				r = utf16.DecodeRune(r, r2)
				k += k2
			}
			out = utf8.AppendRune(out, r)
			i += k
		default:
			return nil, fmt.Errorf("string has unknown escape \\%c", s[i])
		}
	}
	return out, nil
}

// hexRune reads the 4 hex digits of a \u escape (b starts after the u, or,
// for a surrogate's second half, at its backslash), returning the bytes read.
func hexRune(b []byte) (rune, int, error) {
	k := 0
	if len(b) >= 2 && b[0] == '\\' && b[1] == 'u' {
		b, k = b[2:], 2
	}
	if len(b) < 4 {
		return 0, 0, errors.New("string has a truncated \\u escape")
	}
	v, err := strconv.ParseUint(string(b[:4]), 16, 16)
	if err != nil {
		return 0, 0, fmt.Errorf("string has a bad \\u escape %q", b[:4])
	}
	return rune(v), k + 4, nil
}

// printer prints a tree back into a typed value: the text, and the patches
// in text order with the scalars' new paths.
type printer struct {
	path    []byte
	patches []byte
}

func (pr *printer) print(dst []byte, n *docNode) []byte {
	if pr.path == nil {
		pr.path = []byte{'$'}
	}
	switch n.kind {
	case '{', '[':
		dst = append(dst, n.kind)
		pathLen := len(pr.path)
		for i, kid := range n.kids {
			if i > 0 {
				dst = append(dst, ',', ' ')
			}
			if n.kind == '{' {
				dst = AppendString(dst, str(n.keys[i]))
				dst = append(dst, ':', ' ')
				pr.path = AppendMemberPath(pr.path[:pathLen], str(n.keys[i]))
			} else {
				pr.path = AppendIndexPath(pr.path[:pathLen], i)
			}
			dst = pr.print(dst, kid)
		}
		pr.path = pr.path[:pathLen]
		if n.kind == '{' {
			return append(dst, '}')
		}
		return append(dst, ']')
	}
	if n.typ != 0 {
		pr.patches = AppendPatch(pr.patches, Patch{Path: pr.path, Type: n.typ, Value: n.value}, len(pr.patches) == 0)
	}
	return append(dst, n.text...)
}

// leg is one step of a diff's path: a member, or an array cell counted from
// the start or (last-n) from the end.
type leg struct {
	member  bool
	key     []byte
	index   int
	fromEnd bool
}

// position is the array index a cell leg names in an array of size elements,
// clamped to size, and whether it is an element (MySQL's Json_array_index).
func (l leg) position(size int) (int, bool) {
	if l.fromEnd {
		if l.index < size {
			return size - 1 - l.index, true
		}
		return 0, false
	}
	return min(l.index, size), l.index < size
}

// parsePath parses a diff's path as MySQL writes it ($, then .name, ."name"
// or [n], [last], [last-n]); wildcards and ranges never name one value.
func parsePath(path []byte) ([]leg, error) {
	i := 0
	skip := func() {
		for i < len(path) && path[i] == ' ' {
			i++
		}
	}
	if skip(); i >= len(path) || path[i] != '$' {
		return nil, errors.New("path does not start with $")
	}
	i++
	var legs []leg
	for skip(); i < len(path); skip() {
		switch path[i] {
		case '.':
			i++
			skip()
			if i < len(path) && path[i] == '"' {
				p := parser{text: path, pos: i}
				q, err := p.str()
				if err != nil {
					return nil, err
				}
				key, err := unquote(q)
				if err != nil {
					return nil, err
				}
				legs = append(legs, leg{member: true, key: key})
				i = p.pos
				continue
			}
			start := i
			for i < len(path) && !bytes.ContainsRune([]byte(".[ "), rune(path[i])) {
				i++
			}
			key := path[start:i]
			if len(key) == 0 || bytes.ContainsAny(key, `*"]`) {
				return nil, fmt.Errorf("path has a bad member name at byte %d", start)
			}
			legs = append(legs, leg{member: true, key: key})
		case '[':
			end := bytes.IndexByte(path[i:], ']')
			if end < 0 {
				return nil, fmt.Errorf("path's [ at byte %d is not closed", i)
			}
			cell := string(bytes.TrimSpace(path[i+1 : i+end]))
			l := leg{}
			if rest, ok := strings.CutPrefix(cell, "last"); ok {
				l.fromEnd = true
				cell = "0"
				if rest = strings.TrimSpace(rest); rest != "" {
					n, ok := strings.CutPrefix(rest, "-")
					if !ok {
						return nil, fmt.Errorf("path has a bad array cell [%s]", path[i+1:i+end])
					}
					cell = strings.TrimSpace(n)
				}
			}
			n, err := strconv.ParseUint(cell, 10, 31)
			if err != nil {
				return nil, fmt.Errorf("path has a bad array cell [%s]", path[i+1:i+end])
			}
			l.index = int(n)
			legs = append(legs, l)
			i += end + 1
		default:
			return nil, fmt.Errorf("path has %q at byte %d", path[i], i)
		}
	}
	return legs, nil
}

// apply applies one diff to the document rooted at n, as MySQL's
// apply_json_diffs does: the path's parent must exist (no auto-wrapping); a
// REPLACE needs the value, an INSERT a member not there yet or any array
// position (past the end appends), a REMOVE the member or element.
func (n *docNode) apply(op byte, path []byte, v *docNode) error {
	legs, err := parsePath(path)
	if err != nil {
		return err
	}
	if len(legs) == 0 {
		return errors.New("the path is the whole document, which MySQL never updates partially")
	}
	parent := n
	for i, l := range legs[:len(legs)-1] {
		at, ok := parent.child(l)
		if !ok {
			return fmt.Errorf("the document has no value at the path's first %d steps", i+1)
		}
		parent = parent.kids[at]
	}
	last := legs[len(legs)-1]
	switch {
	case parent.kind == '{' && last.member:
		at, found := slices.BinarySearchFunc(parent.keys, last.key, keyCompare)
		switch {
		case op == diffInsert && found:
			return errors.New("INSERT of a member the object already has")
		case op == diffInsert:
			parent.keys = slices.Insert(parent.keys, at, bytes.Clone(last.key))
			parent.kids = slices.Insert(parent.kids, at, v)
		case !found:
			return errors.New("the object has no such member")
		case op == diffReplace:
			parent.kids[at] = v
		default:
			parent.keys = slices.Delete(parent.keys, at, at+1)
			parent.kids = slices.Delete(parent.kids, at, at+1)
		}
		return nil
	case parent.kind == '[' && !last.member:
		at, within := last.position(len(parent.kids))
		switch {
		case op == diffInsert:
			parent.kids = slices.Insert(parent.kids, at, v)
		case !within:
			return fmt.Errorf("the array of %d elements has no such element", len(parent.kids))
		case op == diffReplace:
			parent.kids[at] = v
		default:
			parent.kids = slices.Delete(parent.kids, at, at+1)
		}
		return nil
	}
	return errors.New("the path's last step does not fit the value it is in (no auto-wrapping in a diff)")
}

// child returns the index of the value leg l names in n, if n has one.
func (n *docNode) child(l leg) (int, bool) {
	switch {
	case n.kind == '{' && l.member:
		return slices.BinarySearchFunc(n.keys, l.key, keyCompare)
	case n.kind == '[' && !l.member:
		return l.position(len(n.kids))
	}
	return 0, false
}
