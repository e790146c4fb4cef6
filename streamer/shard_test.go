package streamer

import (
	"errors"
	"fmt"
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
		p, err := newTablePlan(testTable(), nil)
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
		p, err := newTablePlan(tbl, nil)
		require.NoError(t, err)
		require.NoError(t, p.shard("id", vindex.Hash, kr), typ)
	}
}
