package mysqljson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// TypeMapExpr is the SQL, in a SELECT from its table, of the type map of a
// MySQL JSON column (quoted: `c`): NULL when the document's text tells every
// scalar's type, else a JSON array of [where, ordinal, JSON_TYPE, value] for
// each scalar it does not. MySQL has no function that walks a document with
// paths, so the map places a scalar by where it is found: 0 for the document
// itself, 1 for the members of objects and 2 for the elements of arrays, each
// numbered in the order the paths '$**.*' and '$**[*]' enumerate them (every
// container in pre-order gives its children in stored order), and
// AppendTypeMap finds each in the text. The map's values print as in the
// document, so a map and a text that disagree are caught, not merged. One
// JSON_TABLE with both paths nested costs about half of two; it has no
// column of the document itself, which it would copy into every row (a
// document of n values would cost n²). Its paths are
// utf8mb4 literals: under SET NAMES binary, as the streamer reads, JSON_TABLE
// refuses binary ones ("Cannot create a JSON value from a string with
// CHARACTER SET 'binary'").
func TypeMapExpr(col string) string {
	const v = "COALESCE(_rl_mv, _rl_av)"
	return "CASE WHEN JSON_TYPE(" + col + ") IN ('OBJECT', 'ARRAY') THEN" +
		" (SELECT JSON_ARRAYAGG(JSON_ARRAY(IF(_rl_mo IS NULL, 2, 1), COALESCE(_rl_mo, _rl_ao), JSON_TYPE(" + v + "), " + v + "))" +
		" FROM JSON_TABLE(" + col + ", _utf8mb4'$' COLUMNS(" +
		"NESTED PATH _utf8mb4'$**.*' COLUMNS(_rl_mo FOR ORDINALITY, _rl_mv JSON PATH _utf8mb4'$')," +
		" NESTED PATH _utf8mb4'$**[*]' COLUMNS(_rl_ao FOR ORDINALITY, _rl_av JSON PATH _utf8mb4'$'))) AS _rl_t" +
		" WHERE " + hidden(v) + ")" +
		" WHEN " + hidden(col) + " THEN JSON_ARRAY(JSON_ARRAY(0, 0, JSON_TYPE(" + col + "), " + col + ")) END"
}

// hidden is the SQL condition that the JSON value v is a scalar whose type
// its text does not tell.
func hidden(v string) string {
	return "CASE JSON_TYPE(" + v + ") WHEN 'INTEGER' THEN " + v + " > 4294967295 WHEN 'UNSIGNED INTEGER' THEN " + v + " <= 4294967295" +
		" WHEN 'DECIMAL' THEN TRUE WHEN 'DATE' THEN TRUE WHEN 'TIME' THEN TRUE WHEN 'DATETIME' THEN TRUE WHEN 'TIMESTAMP' THEN TRUE" +
		" WHEN 'BIT' THEN TRUE WHEN 'BLOB' THEN TRUE WHEN 'OPAQUE' THEN TRUE ELSE FALSE END"
}

// TypeMapper makes typed values of documents and their type maps, reusing
// its buffers from one document to the next: the streamer runs one per
// chunk scan, over every copied document that holds typed values. Its zero
// value is ready.
type TypeMapper struct {
	doc     scanned
	counts  []int
	entries []entry
}

// entry is one [where, ordinal, type, value] of a type map; value is the
// scalar's JSON text, as in the document.
type entry struct {
	node  int
	typ   Type
	value []byte
}

// AppendTypeMap appends the typed value of a document from its text and its
// type map (TypeMapExpr; nil when the text tells every type).
func (m *TypeMapper) AppendTypeMap(dst, text, typeMap []byte) ([]byte, error) {
	dst = append(dst, text...)
	if typeMap == nil {
		return dst, nil
	}
	if err := m.doc.scan(text, &m.counts); err != nil {
		return dst, err
	}
	m.entries = m.entries[:0]
	p := mapParser{in: typeMap}
	p.expect('[')
	for first := true; p.err == nil && !p.peek(']'); first = false {
		if !first {
			p.expect(',')
		}
		p.expect('[')
		where, ordinal := p.int(), 0
		p.expect(',')
		ordinal = p.int()
		p.expect(',')
		name := p.token()
		p.expect(',')
		value := p.token()
		p.expect(']')
		if p.err != nil {
			break
		}
		typ, ok := TypeOf(strings.Trim(string(name), `"`))
		if !ok || name[0] != '"' {
			return dst, fmt.Errorf("JSON type map names type %s, which its text tells", name)
		}
		node, err := m.doc.find(where, ordinal)
		if err != nil {
			return dst, err
		}
		n := m.doc.nodes[node]
		if !bytes.Equal(text[n.start:n.end], value) {
			return dst, fmt.Errorf("JSON type map places %s %s where the document holds %s", typ, value, text[n.start:n.end])
		}
		m.entries = append(m.entries, entry{node, typ, value})
	}
	p.expect(']')
	if p.err == nil && p.pos != len(p.in) {
		p.fail("bytes after its end")
	}
	if p.err != nil {
		return dst, p.err
	}
	slices.SortFunc(m.entries, func(a, b entry) int { return a.node - b.node }) // nodes are in text order
	for i, e := range m.entries {
		value := e.value
		if value[0] == '"' {
			var s string
			if err := json.Unmarshal(value, &s); err != nil {
				return dst, fmt.Errorf("JSON type map value %s: %w", value, err)
			}
			value = []byte(s)
		}
		dst = AppendPatch(dst, Patch{Path: m.doc.path(text, e.node), Type: e.typ, Value: value}, i == 0)
	}
	return dst, nil
}

// mapParser reads a type map as MySQL prints it; the first error sticks.
type mapParser struct {
	in  []byte
	pos int
	err error
}

func (p *mapParser) fail(what string) {
	if p.err == nil {
		p.err = fmt.Errorf("JSON type map %q: %s at byte %d", cut(p.in), what, p.pos)
	}
}

func (p *mapParser) space() {
	p.pos = skipSpace(p.in, p.pos)
}

func (p *mapParser) peek(c byte) bool {
	p.space()
	return p.pos < len(p.in) && p.in[p.pos] == c
}

func (p *mapParser) expect(c byte) {
	if !p.peek(c) {
		p.fail(fmt.Sprintf("no %q", c))
		return
	}
	p.pos++
}

// token reads one scalar: a quoted string or a bare word.
func (p *mapParser) token() []byte {
	p.space()
	start := p.pos
	var end int
	var err error
	if p.pos < len(p.in) && p.in[p.pos] == '"' {
		end, err = stringEnd(p.in, p.pos)
	} else {
		end = scalarEnd(p.in, p.pos)
	}
	if err != nil || end == start {
		p.fail("no value")
		return nil
	}
	p.pos = end
	return p.in[start:end]
}

func (p *mapParser) int() int {
	t := p.token()
	n, err := strconv.Atoi(string(t))
	if err != nil && p.err == nil {
		p.fail(fmt.Sprintf("%q is not a whole number", t))
	}
	return n
}

// cut shortens text for an error message.
func cut(text []byte) string {
	if len(text) > 80 {
		return string(text[:80]) + "..."
	}
	return string(text)
}

// node is one value of a scanned document: where its text is, and where it
// is in its parent (the key's text, or the index).
type node struct {
	start, end         int
	parent             int // -1 for the document
	keyStart, keyEnd   int // a member's key, quoted; keyEnd 0 for an element
	index              int
	container, isArray bool
}

// scanned is a document's values, in the order their text starts.
type scanned struct {
	nodes []node
	// members and elements list the values the paths '$**.*' and '$**[*]'
	// enumerate, in their order.
	members, elements []int
}

// scan reads a document as MySQL prints it, reusing s's storage; counts is
// scratch space.
func (s *scanned) scan(text []byte, counts *[]int) error {
	s.nodes, s.members, s.elements = s.nodes[:0], s.members[:0], s.elements[:0]
	end, err := s.value(text, skipSpace(text, 0), -1)
	if err != nil {
		return err
	}
	if skipSpace(text, end) != len(text) {
		return fmt.Errorf("JSON text %q has bytes after its value", cut(text))
	}
	// Every container in pre-order gives its children in stored order.
	// Nodes are in pre-order and follow their parents, so ordering the
	// children by their parent's index, then their own, is that order: a
	// counting sort by parent.
	c := slices.Grow((*counts)[:0], len(s.nodes)+1)[:len(s.nodes)+1]
	clear(c)
	for _, n := range s.nodes[1:] {
		c[n.parent+1]++
	}
	for i := 1; i < len(c); i++ {
		c[i] += c[i-1]
	}
	order := slices.Grow(s.members, len(s.nodes))[:len(s.nodes)-1]
	for i, n := range s.nodes[1:] {
		order[c[n.parent]] = i + 1
		c[n.parent]++
	}
	*counts = c
	s.elements = append(s.elements, order...)
	s.members = order[:0]
	elements := s.elements[:0]
	for _, i := range s.elements {
		if s.nodes[s.nodes[i].parent].isArray {
			elements = append(elements, i)
		} else {
			s.members = append(s.members, i)
		}
	}
	s.elements = elements
	return nil
}

// find returns the node a type map entry places: the document (where 0), or
// the ordinal-th (from 1) member (1) or element (2).
func (s *scanned) find(where, ordinal int) (int, error) {
	var list []int
	switch where {
	case 0:
		return 0, nil
	case 1:
		list = s.members
	case 2:
		list = s.elements
	default:
		return 0, fmt.Errorf("JSON type map entry places a value at %d, neither 0, 1 nor 2", where)
	}
	if ordinal < 1 || ordinal > len(list) {
		return 0, fmt.Errorf("JSON type map entry %d of %d values of kind %d is out of the document", ordinal, len(list), where)
	}
	return list[ordinal-1], nil
}

// path is the JSON path of node i.
func (s *scanned) path(text []byte, i int) []byte {
	var steps []int
	for ; i > 0; i = s.nodes[i].parent {
		steps = append(steps, i)
	}
	path := []byte{'$'}
	for j := len(steps) - 1; j >= 0; j-- {
		n := s.nodes[steps[j]]
		if n.keyEnd == 0 {
			path = AppendIndexPath(path, n.index)
			continue
		}
		var key string
		_ = json.Unmarshal(text[n.keyStart:n.keyEnd], &key) // scan checked it
		path = AppendMemberPath(path, key)
	}
	return path
}

func skipSpace(text []byte, i int) int {
	for i < len(text) && (text[i] == ' ' || text[i] == '\n' || text[i] == '\t' || text[i] == '\r') {
		i++
	}
	return i
}

// value scans the value at text[i:] as a child of parent and returns where it
// ends.
func (s *scanned) value(text []byte, i, parent int) (int, error) {
	if i >= len(text) {
		return 0, fmt.Errorf("JSON text %q ends where a value should be", cut(text))
	}
	me := len(s.nodes)
	s.nodes = append(s.nodes, node{start: i, parent: parent})
	var end int
	var err error
	switch c := text[i]; {
	case c == '{' || c == '[':
		end, err = s.container(text, i, me)
	case c == '"':
		end, err = stringEnd(text, i)
	default:
		end = scalarEnd(text, i)
		if end == i {
			err = fmt.Errorf("JSON text %q has %q where a value should be", cut(text), text[i])
		}
	}
	if err != nil {
		return 0, err
	}
	s.nodes[me].end = end
	return end, nil
}

func (s *scanned) container(text []byte, i, me int) (int, error) {
	isArray := text[i] == '['
	s.nodes[me].container, s.nodes[me].isArray = true, isArray
	closing := byte('}')
	if isArray {
		closing = ']'
	}
	i = skipSpace(text, i+1)
	for index := 0; ; index++ {
		if i < len(text) && text[i] == closing && index == 0 {
			return i + 1, nil
		}
		keyStart, keyEnd := 0, 0
		if !isArray {
			var err error
			if keyEnd, err = stringEnd(text, i); err != nil {
				return 0, err
			}
			keyStart = i
			i = skipSpace(text, keyEnd)
			if i >= len(text) || text[i] != ':' {
				return 0, fmt.Errorf("JSON text %q has no ':' after a key", cut(text))
			}
			i = skipSpace(text, i+1)
		}
		child := len(s.nodes)
		end, err := s.value(text, i, me)
		if err != nil {
			return 0, err
		}
		s.nodes[child].keyStart, s.nodes[child].keyEnd, s.nodes[child].index = keyStart, keyEnd, index
		i = skipSpace(text, end)
		if i < len(text) && text[i] == ',' {
			i = skipSpace(text, i+1)
			continue
		}
		if i < len(text) && text[i] == closing {
			return i + 1, nil
		}
		return 0, fmt.Errorf("JSON text %q has no ',' or %q after a value", cut(text), closing)
	}
}

// scalarEnd returns where the number or literal that starts at text[i] ends.
func scalarEnd(text []byte, i int) int {
	for i < len(text) && !strings.ContainsRune(",]} \n\t\r", rune(text[i])) {
		i++
	}
	return i
}

// stringEnd returns where the string that starts at text[i] ends.
func stringEnd(text []byte, i int) (int, error) {
	if i >= len(text) || text[i] != '"' {
		return 0, fmt.Errorf("JSON text %q has no string where one should be", cut(text))
	}
	for j := i + 1; j < len(text); j++ {
		switch text[j] {
		case '\\':
			j++
		case '"':
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("JSON text %q ends inside a string", cut(text))
}
