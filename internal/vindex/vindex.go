// Package vindex maps a sharding column's value to its 64-bit keyspace ID, by
// named functions that never change once released: a row's shard is decided
// by them on every source and every target, in every version of rowlift. The
// functions are bit-compatible with Vitess's vindexes of the same names, so a
// fleet sharded by Vitess can be resharded by rowlift and back. Values come as
// the streamer sends them: integers as decimal text, strings as their bytes,
// nil for NULL. It does no I/O.
package vindex

import (
	"crypto/cipher"
	"crypto/des"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// Func is a keyspace ID function's name, as a workflow's spec stores it.
type Func string

// The functions.
const (
	// Hash is Vitess's `hash`: the integer's 8 big-endian bytes (a negative
	// one's two's complement) encrypted with 3DES under an all-zero key, so
	// consecutive keys spread evenly. Integers only.
	Hash Func = "hash"
	// XXHash is Vitess's `xxhash`: xxHash64 of the value's bytes, stored
	// little-endian as the keyspace ID. Any column type.
	XXHash Func = "xxhash"
	// Numeric is Vitess's `numeric`: the unsigned integer itself, for keys that
	// are already hashed or that are sharded by range. Integers only.
	Numeric Func = "numeric"
)

// block3DES is Vitess hash's cipher: 3DES with a 24-byte zero key.
var block3DES = func() cipher.Block {
	b, err := des.NewTripleDESCipher(make([]byte, 24))
	if err != nil {
		panic(err) // a fixed key of the right size never fails
	}
	return b
}()

// Parse checks a function name from a request; empty is hash, the default
// a spec documents.
func Parse(name string) (Func, error) {
	if name == "" {
		return Hash, nil
	}
	switch f := Func(name); f {
	case Hash, XXHash, Numeric:
		return f, nil
	}
	return "", fmt.Errorf("unknown keyspace ID function %q: use hash (integers, as Vitess's hash vindex), xxhash (any type) or numeric (the integer itself)", name)
}

// IntegerOnly reports whether the function hashes integers only, so creation
// can refuse a column of another type.
func (f Func) IntegerOnly() bool { return f != XXHash }

// ID is the keyspace ID of a value. NULL has none under hash and numeric (as
// in Vitess, such a row belongs to no shard, so it is an error here).
func (f Func) ID(v []byte) (uint64, error) {
	switch f {
	case XXHash:
		return binary.BigEndian.Uint64(xxhashBytes(v)), nil
	case Hash, Numeric:
		if v == nil {
			return 0, fmt.Errorf("%s: a NULL sharding key has no keyspace ID", f)
		}
		n, err := integer(v)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", f, err)
		}
		if f == Numeric {
			return n, nil
		}
		var in, out [8]byte
		binary.BigEndian.PutUint64(in[:], n)
		block3DES.Encrypt(out[:], in[:])
		return binary.BigEndian.Uint64(out[:]), nil
	}
	return 0, fmt.Errorf("unknown keyspace ID function %q", string(f))
}

// xxhashBytes is the keyspace ID's bytes under xxhash: the sum little-endian,
// as Vitess writes it.
func xxhashBytes(v []byte) []byte {
	out := make([]byte, 8)
	binary.LittleEndian.PutUint64(out, xxhash.Sum64(v))
	return out
}

// integer reads an integer's decimal text as 64 bits, a negative value as its
// two's complement (Vitess's conversion of a signed key).
func integer(v []byte) (uint64, error) {
	if u, err := strconv.ParseUint(string(v), 10, 64); err == nil {
		return u, nil
	}
	i, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("sharding key %q is not a 64-bit integer", v)
	}
	return uint64(i), nil
}
