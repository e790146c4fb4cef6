package vindex

import (
	"math"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// Vectors from Vitess's own tests, so that rowlift and Vitess put every row in
// the same shard:
//   - hash: vitessio/vitess go/vt/vtgate/vindexes/hash_test.go (TestHashMap),
//     and pingcap/tidb util/vitess/vitess_hash_test.go, which checks TiDB's
//     vitess_hash() against Vitess;
//   - xxhash: vitessio/vitess go/vt/vtgate/vindexes/xxhash_test.go
//     (TestXXHashMap). Integers are hashed as their decimal text, as Vitess
//     hashes sqltypes.Value.ToBytes(); NULL as no bytes.
func TestVitessVectors(t *testing.T) {
	for _, c := range []struct {
		f   Func
		in  []byte
		out uint64
	}{
		{Hash, []byte("1"), 0x166b40b44aba4bd6},
		{Hash, []byte("2"), 0x06e7ea22ce92708f},
		{Hash, []byte("3"), 0x4eb190c9a2fa169c},
		{Hash, []byte("4"), 0xd2fd8867d50d2dfe},
		{Hash, []byte("5"), 0x70bb023c810ca87a},
		{Hash, []byte("6"), 0xf098480ac4c4be71},
		{Hash, []byte("30375298039"), 0x031265661e5f1133},
		{Hash, []byte("1123"), 0x031b565d41bdf8ca},
		{Hash, []byte("30573721600"), 0x1efd6439f2050ffd},
		{Hash, []byte("116"), 0x1e1788ff0fde093c},
		{Hash, []byte(strconv.FormatUint(math.MaxUint64, 10)), 0x355550b2150e2451},
		{XXHash, []byte("test1"), 0xd01ab7e4d6978f0b},
		{XXHash, []byte("test2"), 0x87eb11714c0a0e89},
		{XXHash, []byte("testaverylongvaluetomakesurethisworks"), 0x81d8c38e0d850e6a},
		{XXHash, []byte("1"), 0xd46405367612b4b7},
		{XXHash, nil, 0x99e9d85137db46ef},
		{XXHash, []byte("-1"), 0xd8e2a6a7c8c7623d},
		{XXHash, []byte("18446744073709551615"), 0x477cfa8d6d8f1f8d},
		{XXHash, []byte("9223372036854775807"), 0xb37eb01f7bffafd8},
		{XXHash, []byte("-9223372036854775808"), 0x102c27ddb26a609e},
		{Numeric, []byte("1"), 1},
		{Numeric, []byte("18446744073709551615"), math.MaxUint64},
	} {
		got, err := c.f.ID(c.in)
		require.NoError(t, err, "%s(%q)", c.f, c.in)
		require.Equal(t, c.out, got, "%s(%q): %016x, want %016x", c.f, c.in, got, c.out)
	}
}

func TestSignedKeysAreTwosComplement(t *testing.T) {
	neg, err := Hash.ID([]byte("-1"))
	require.NoError(t, err)
	max, err := Hash.ID([]byte(strconv.FormatUint(math.MaxUint64, 10)))
	require.NoError(t, err)
	require.Equal(t, max, neg, "-1 is hashed as 0xffffffffffffffff")
	n, err := Numeric.ID([]byte("-2"))
	require.NoError(t, err)
	require.Equal(t, uint64(math.MaxUint64-1), n)
}

func TestBadValuesAndNames(t *testing.T) {
	_, err := Hash.ID(nil)
	require.ErrorContains(t, err, "hash: a NULL sharding key has no keyspace ID")
	_, err = Numeric.ID([]byte("abc"))
	require.ErrorContains(t, err, `numeric: sharding key "abc" is not a 64-bit integer`)
	_, err = Hash.ID([]byte("18446744073709551616"))
	require.ErrorContains(t, err, "not a 64-bit integer")
	for _, name := range []string{"hash", "xxhash", "numeric"} {
		f, err := Parse(name)
		require.NoError(t, err)
		require.Equal(t, name != "xxhash", f.IntegerOnly())
	}
	f, err := Parse("")
	require.NoError(t, err)
	require.Equal(t, Hash, f, "empty is the default a spec documents")
	_, err = Parse("md5")
	require.ErrorContains(t, err, `unknown keyspace ID function "md5": use hash`)
}
