package streamer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/keyrange"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/schema"
	"github.com/rowlift/rowlift/internal/vindex"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// numericFilter keeps rows whose first column, as a numeric keyspace ID, is
// below 0x80...: "1" is in range, "9223372036854775808" (0x80...) is not.
func numericFilter(t *testing.T) *shardFilter {
	kr, err := keyrange.Parse("-80")
	require.NoError(t, err)
	return &shardFilter{table: "t", column: "k", idx: 0, fn: vindex.Numeric, kr: kr}
}

const outOfRange = "9223372036854775808"

func shardRow(values ...any) *rowliftv1.Row {
	vals := make([][]byte, len(values))
	for i, v := range values {
		if v != nil {
			vals[i] = []byte(v.(string))
		}
	}
	r := &rowliftv1.Row{}
	rowcodec.Pack(r, vals)
	return r
}

func TestFilterChangeEveryCombination(t *testing.T) {
	f := numericFilter(t)
	in1, in2 := shardRow("1", "a"), shardRow("2", "b")
	out1, out2 := shardRow(outOfRange, "c"), shardRow("18446744073709551615", "d")
	for _, c := range []struct {
		name          string
		before, after *rowliftv1.Row
		want          *rowliftv1.RowChange // nil: dropped
	}{
		{"insert in range", nil, in1, &rowliftv1.RowChange{After: in1}},
		{"insert out of range", nil, out1, nil},
		{"delete in range", in1, nil, &rowliftv1.RowChange{Before: in1}},
		{"delete out of range", out1, nil, nil},
		{"update staying in range", in1, in2, &rowliftv1.RowChange{Before: in1, After: in2}},
		{"update leaving the range becomes a delete", in1, out1, &rowliftv1.RowChange{Before: in1}},
		{"update entering the range becomes an insert", out1, in1, &rowliftv1.RowChange{After: in1}},
		{"update staying out of range", out1, out2, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := f.filterChange(&rowliftv1.RowChange{Before: c.before, After: c.after})
			require.NoError(t, err)
			require.Equal(t, fmt.Sprint(c.want), fmt.Sprint(got))
		})
	}
}

func TestFilterChangeWithoutKeyspaceIDStops(t *testing.T) {
	f := numericFilter(t)
	for _, c := range []struct {
		row  *rowliftv1.Row
		want string
	}{
		{shardRow(nil, "a"), "table t: sharding column k has value NULL, which has no keyspace ID"},
		{shardRow("abc", "a"), `table t: sharding column k has value "abc", which has no keyspace ID`},
	} {
		for _, ch := range []*rowliftv1.RowChange{{After: c.row}, {Before: c.row}, {Before: shardRow("1", "x"), After: c.row}} {
			_, err := f.filterChange(ch)
			require.ErrorContains(t, err, c.want)
			wrapped := fmt.Errorf("copy t: %w", err)
			require.Equal(t, codes.FailedPrecondition, status.Code(wrapped), "however wrapped: %v", wrapped)
			var noID *keyspaceIDError
			require.True(t, errors.As(wrapped, &noID))
		}
	}
	st, ok := status.FromError(binlogError(fmt.Errorf("x: %w", &keyspaceIDError{table: "t", column: "k", err: errors.New("boom")}), stringer("0-1-5")))
	require.True(t, ok)
	require.Equal(t, codes.FailedPrecondition, st.Code())
	require.Contains(t, st.Message(), "binlog after position 0-1-5: x: table t: sharding column k has value NULL")
}

type stringer string

func (s stringer) String() string { return string(s) }

func TestPackedValue(t *testing.T) {
	r := shardRow("ab", nil, "", "cde")
	for i, want := range []any{"ab", nil, "", "cde"} {
		v, err := packedValue(r, i)
		require.NoError(t, err)
		if want == nil {
			require.Nil(t, v)
			continue
		}
		require.NotNil(t, v)
		require.Equal(t, want, string(v))
	}
	_, err := packedValue(r, 4)
	require.ErrorContains(t, err, "packed row has 4 values")
	_, err = packedValue(&rowliftv1.Row{Lengths: []int64{3}, Values: []byte("a")}, 0)
	require.ErrorContains(t, err, "truncated")
}

func shardRequest(kr *rowliftv1.KeyRange, tables ...*rowliftv1.TableRequest) *rowliftv1.StreamRequest {
	return &rowliftv1.StreamRequest{Database: "d", KeyRange: kr, Tables: tables}
}

func TestCheckRequestKeyRange(t *testing.T) {
	half := &rowliftv1.KeyRange{End: []byte{0x80}}
	for _, ok := range []*rowliftv1.StreamRequest{
		shardRequest(nil, &rowliftv1.TableRequest{Name: "t"}),
		shardRequest(&rowliftv1.KeyRange{}, &rowliftv1.TableRequest{Name: "t"}),
		shardRequest(half, &rowliftv1.TableRequest{Name: "t", ShardingColumn: "id"}),
		shardRequest(half, &rowliftv1.TableRequest{Name: "t", ShardingColumn: "id", ShardingFunction: "xxhash"}),
		// A verify filters its chunks like the copy; a reference table is sent whole.
		shardRequest(half, &rowliftv1.TableRequest{Name: "t", ShardingColumn: "id", Verify: &rowliftv1.VerifyProgress{}}),
		shardRequest(half, &rowliftv1.TableRequest{Name: "t", ShardingColumn: "id"}, &rowliftv1.TableRequest{Name: "u", Reference: true}),
	} {
		_, err := checkRequest(ok)
		require.NoError(t, err, "%v", ok)
	}
	for msg, req := range map[string]*rowliftv1.StreamRequest{
		"table u has no sharding_column": shardRequest(half, &rowliftv1.TableRequest{Name: "t", ShardingColumn: "id"},
			&rowliftv1.TableRequest{Name: "u"}),
		`table t: unknown keyspace ID function "md5"`: shardRequest(half,
			&rowliftv1.TableRequest{Name: "t", ShardingColumn: "id", ShardingFunction: "md5"}),
		"start is not below end": shardRequest(&rowliftv1.KeyRange{Start: []byte{0x80}, End: []byte{0x40}},
			&rowliftv1.TableRequest{Name: "t", ShardingColumn: "id"}),
		"up to 16 hexadecimal digits": shardRequest(&rowliftv1.KeyRange{Start: make([]byte, 9)},
			&rowliftv1.TableRequest{Name: "t", ShardingColumn: "id"}),
	} {
		_, err := checkRequest(req)
		require.ErrorContains(t, err, msg)
	}
}

func TestPlanShard(t *testing.T) {
	kr, err := keyrange.Parse("-80")
	require.NoError(t, err)
	plan := func() *tablePlan {
		p, err := newTablePlan(testTable(), nil, false)
		require.NoError(t, err)
		return p
	}
	p := plan()
	require.Nil(t, p.filter, "no key range, no filter")
	require.NoError(t, p.shard("ID", vindex.Hash, kr))
	require.Equal(t, &shardFilter{table: "orders", column: "id", idx: 1, fn: vindex.Hash, kr: kr}, p.filter)
	require.NoError(t, plan().shard("region", vindex.XXHash, kr), "xxhash takes any type")

	err = plan().shard("total", vindex.XXHash, kr)
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.ErrorContains(t, err, "table orders: sharding column total is not among its streamed columns")
	for _, fn := range []vindex.Func{vindex.Hash, vindex.Numeric} {
		err = plan().shard("region", fn, kr)
		require.Equal(t, codes.FailedPrecondition, status.Code(err))
		require.ErrorContains(t, err, "table orders: sharding column region is varchar, but "+string(fn)+" takes integer columns only")
	}
	for _, typ := range []string{"tinyint", "smallint", "mediumint", "int", "bigint"} {
		tbl := &schema.Table{Database: "d", Name: "t", Columns: []schema.Column{{Name: "id", DataType: typ}}, Key: []string{"id"}}
		p, err := newTablePlan(tbl, nil, false)
		require.NoError(t, err)
		require.NoError(t, p.shard("id", vindex.Hash, kr), typ)
	}
}

// TestNumericIntervals: a value is in the intervals exactly when its numeric
// keyspace ID is in the range, for signed and unsigned columns, at the edges
// and at random.
func TestNumericIntervals(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	inIntervals := func(ivs []valueInterval, v *big.Int) bool {
		for _, iv := range ivs {
			lo, hi := true, true
			if iv.lo != "" {
				b, _ := new(big.Int).SetString(iv.lo, 10)
				lo = v.Cmp(b) >= 0
			}
			if iv.hi != "" {
				b, _ := new(big.Int).SetString(iv.hi, 10)
				hi = v.Cmp(b) < 0
			}
			if lo && hi {
				return true
			}
		}
		return false
	}
	ranges := []string{"-", "-80", "80-", "-40", "40-80", "80-c0", "c0-", "7f-81", "00ff-0100", "ffff-"}
	for range 200 {
		a, b := rng.Uint64(), rng.Uint64()
		if a > b {
			a, b = b, a
		}
		r := keyrange.Range{Start: binary.BigEndian.AppendUint64(nil, a), End: binary.BigEndian.AppendUint64(nil, b)}
		if a < b {
			ranges = append(ranges, r.String())
		}
	}
	edges := []int64{0, 1, -1, math.MaxInt64, math.MinInt64, math.MinInt64 + 1, 1 << 62, -(1 << 62)}
	for _, kr := range ranges {
		r, err := keyrange.Parse(kr)
		require.NoError(t, err, kr)
		for _, unsigned := range []bool{false, true} {
			ivs := numericIntervals(r, unsigned)
			values := []string{}
			for _, e := range edges {
				if !unsigned || e >= 0 {
					values = append(values, strconv.FormatInt(e, 10))
				}
			}
			start, end, hasEnd := r.Bounds()
			for _, b := range []uint64{start, start - 1, end, end - 1} {
				if unsigned {
					values = append(values, strconv.FormatUint(b, 10))
				} else if hasEnd || b != end {
					values = append(values, strconv.FormatInt(int64(b), 10))
				}
			}
			for range 200 {
				if unsigned {
					values = append(values, strconv.FormatUint(rng.Uint64(), 10))
				} else {
					values = append(values, strconv.FormatInt(int64(rng.Uint64()), 10))
				}
			}
			for _, v := range values {
				id, err := vindex.Numeric.ID([]byte(v))
				require.NoError(t, err)
				n, _ := new(big.Int).SetString(v, 10)
				require.Equal(t, r.Contains(id), inIntervals(ivs, n), "value %s in %s (unsigned %v): intervals %v", v, kr, unsigned, ivs)
			}
		}
	}
	require.Equal(t, "(`k` >= 4611686018427387904 OR `k` < 0)", numericCond("`k`", mustRange(t, "40-"), false),
		"a signed column: the non-negative half from 0x40…, then every negative value")
}

func mustRange(t *testing.T, kr string) keyrange.Range {
	t.Helper()
	r, err := keyrange.Parse(kr)
	require.NoError(t, err)
	return r
}
