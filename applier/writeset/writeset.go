// Package writeset computes what a source transaction writes on the target, as a
// set of 64-bit hashes, so the applier can replay transactions in parallel: two
// transactions may run at once only when their writesets are disjoint.
//
// Each row image (before and after) of each change gives one hash per unique key
// of the target table whose parts are all non-NULL, the primary key always
// among them: a hash of the table, the key and the key's value. Values the
// server takes for equal must hash equal, or two transactions that write the
// same row, or the same unique value, would run at once and one of their
// writes would be lost or fail; values it takes for different should hash
// different, but a collision only costs parallelism. So a value is hashed in a
// canonical form only where equality follows from its bytes: numbers,
// temporals, binary strings, and strings under the byte-wise binary
// collations (see keyorder.Bytewise), trimmed of trailing spaces under PAD
// SPACE. A string under any other collation (case- or accent-insensitive ones)
// is left out of its key's hash, which makes its key coarser: when every part
// of a key is left out, every row of the table collides on it, and changes to
// the table run one after the other. Table.Coarse names such keys.
//
// Hashes are seeded once per process: they are for comparing writesets within
// one applier, never to be stored.
package writeset

import (
	"encoding/binary"
	"hash/maphash"
	"slices"

	"github.com/rowlift/rowlift/internal/rowcodec"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// MaxKeys is the most distinct hashes a transaction's writeset may have; a
// larger transaction is a barrier. Checking it against everything running
// costs more than running it alone, and it would block most others anyway.
const MaxKeys = 4096

// seed is fixed for the process, so every Table hashes alike.
var seed = maphash.MakeSeed()

// form is how a key part's value is made canonical before it is hashed.
type form uint8

const (
	// asIs hashes the value's bytes: integers, YEAR and temporals (one text
	// per value), VARBINARY and BLOB, ENUM and SET (one text per member), and
	// strings under NO PAD binary collations.
	asIs form = iota
	// number is DECIMAL, FLOAT and DOUBLE text, whose negative zero equals zero.
	number
	// bits is BIT's raw big-endian bytes, whose leading zero bytes do not count.
	bits
	// zeroPadded is BINARY, which the server stores padded with zero bytes:
	// trailing zero bytes do not count.
	zeroPadded
	// spacePadded is a string under a PAD SPACE binary collation: trailing
	// spaces do not count.
	spacePadded
	// leftOut is a value whose equality only the server knows: it is not
	// hashed at all.
	leftOut
)

// part is one part of a key.
type part struct {
	// pos is the column's position in the streamed fields.
	pos  int
	form form
	// prefix is the length of a prefix key part, 0 for the whole value: in
	// characters, which are UTF-8 ones when utf8 is set, or else bytes.
	prefix int
	utf8   bool
}

// key is one unique key of the target table.
type key struct {
	name string
	// id is the hash of the table's and the key's names, which starts the
	// hash of each of its values.
	id    uint64
	parts []part
}

// Table knows one target table's unique keys, and how to hash their values,
// so that changes to it get their writesets without a query. It does not change
// once loaded and is safe for concurrent use.
type Table struct {
	name  string
	width int // number of streamed fields: values per row image
	keys  []key
	// uniqueKeys is keys by their parts, for UniqueKeys.
	uniqueKeys [][]KeyPart
	barrier    string
	coarse     []string
	whole      bool
}

// Whole reports that every stored column of the target table is streamed, so
// that a row deleted and inserted again from its image loses nothing: what
// lets the applier write a replay group's changes of the table as one DELETE
// and one INSERT (applier/coalesce.go).
func (t *Table) Whole() bool { return t.whole }

// Barrier reports that changes to this table must not run in parallel with
// anything, and why: the table has or is referenced by foreign keys or
// triggers, whose writes to other rows its writeset cannot name, or a unique
// key whose values the applier cannot hash. Transaction makes every
// transaction that changes it a barrier.
func (t *Table) Barrier() (bool, string) {
	return t.barrier != "", t.barrier
}

// Coarse names the keys some of whose parts are left out of their hashes, with
// the columns left out and why, so status and logs can say why changes to the
// table run less in parallel than their keys would allow, for example
// "email (email: collation utf8mb4_general_ci; every change collides)". A key
// all of whose parts are left out is marked "every change collides": changes to
// the table that set it wait for each other.
func (t *Table) Coarse() []string {
	return slices.Clone(t.coarse)
}

// KeyPart is one column of a unique key: its position in the streamed fields
// and, for a prefix part, the prefix length (characters, or bytes for binary
// columns; 0 for the whole value).
type KeyPart struct{ Pos, Prefix int }

// UniqueKeys lists the table's unique keys, primary first, by their parts, for
// statements that must find the row holding a key's value: an idempotent rewrite
// clears a value a later transaction had already moved to another row.
// It is built once at Load and must not be changed.
func (t *Table) UniqueKeys() [][]KeyPart { return t.uniqueKeys }

// Append appends the hashes of one row image to dst and returns it: one for
// each unique key none of whose values is NULL, because the server enforces no
// uniqueness on the others. values are the image's values as rowcodec.Values
// gives them, one per streamed field; Append panics on fewer.
func (t *Table) Append(dst []uint64, values [][]byte) []uint64 {
	for i := range t.keys {
		if h, ok := t.keys[i].hash(values); ok {
			dst = append(dst, h)
		}
	}
	return dst
}

// hash returns the hash of the key's value in values, and false when a part is
// NULL.
func (k *key) hash(values [][]byte) (uint64, bool) {
	var h maphash.Hash
	h.SetSeed(seed)
	var buf [binary.MaxVarintLen64]byte
	h.Write(binary.LittleEndian.AppendUint64(buf[:0], k.id))
	for i := range k.parts {
		p := &k.parts[i]
		v := values[p.pos]
		if v == nil {
			return 0, false
		}
		if p.form == leftOut {
			continue
		}
		v = p.canonical(v)
		// The length first, so that ("ab", "c") and ("a", "bc") differ.
		h.Write(binary.AppendUvarint(buf[:0], uint64(len(v))))
		h.Write(v)
	}
	return h.Sum64(), true
}

// canonical returns the bytes of v that decide its equality: its key prefix,
// without what the server does not compare.
func (p *part) canonical(v []byte) []byte {
	if p.prefix > 0 {
		v = truncate(v, p.prefix, p.utf8)
	}
	switch p.form {
	case number:
		if len(v) > 0 && v[0] == '-' && isZero(v) {
			return v[1:]
		}
	case bits:
		for len(v) > 0 && v[0] == 0 {
			v = v[1:]
		}
	case zeroPadded:
		for len(v) > 0 && v[len(v)-1] == 0 {
			v = v[:len(v)-1]
		}
	case spacePadded:
		for len(v) > 0 && v[len(v)-1] == ' ' {
			v = v[:len(v)-1]
		}
	}
	return v
}

// truncate returns the first n characters of v: bytes, or UTF-8 characters.
func truncate(v []byte, n int, utf8 bool) []byte {
	if !utf8 {
		return v[:min(n, len(v))]
	}
	for i, b := range v {
		// Every byte but a continuation byte starts a character.
		if b&0xC0 != 0x80 {
			if n == 0 {
				return v[:i]
			}
			n--
		}
	}
	return v
}

// isZero reports whether number text has no digit but 0 before its exponent.
func isZero(v []byte) bool {
	for _, ch := range v {
		switch {
		case ch == 'e' || ch == 'E':
			return true
		case ch >= '1' && ch <= '9':
			return false
		}
	}
	return true
}

// Transaction returns the writeset of tx, sorted and without duplicates, reusing
// dst's storage: the hashes of both images of every change, by the Table of
// each event's table in tables. It reports a barrier instead, with no keys,
// when a table is a barrier or not in tables, when a row is not as wide as
// its table's fields (its apply will fail and say why), or when the writeset
// has more than MaxKeys hashes.
func Transaction(dst []uint64, tx *rowliftv1.Transaction, tables map[string]*Table) (keys []uint64, barrier bool) {
	keys = dst[:0]
	var stack [64][]byte
	values := stack[:0]
	for _, ev := range tx.GetEvents() {
		t := tables[ev.GetTable()]
		if t == nil || t.barrier != "" {
			return keys[:0], true
		}
		for _, c := range ev.GetChanges() {
			for _, image := range [2]*rowliftv1.Row{c.GetBefore(), c.GetAfter()} {
				if image == nil {
					continue
				}
				var err error
				values, err = rowcodec.Values(values[:0], image)
				if err != nil || len(values) != t.width {
					return keys[:0], true
				}
				keys = t.Append(keys, values)
			}
			// Duplicates are dropped only now and then, so a transaction that
			// changes a few rows many times is not taken for a large one.
			if len(keys) > 2*MaxKeys {
				if keys = compact(keys); len(keys) > MaxKeys {
					return keys[:0], true
				}
			}
		}
	}
	if keys = compact(keys); len(keys) > MaxKeys {
		return keys[:0], true
	}
	return keys, false
}

// compact sorts keys and drops duplicates.
func compact(keys []uint64) []uint64 {
	slices.Sort(keys)
	return slices.Compact(keys)
}
