package streamer

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/schema"
	"github.com/rowlift/rowlift/internal/verify"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

func testTable() *schema.Table {
	return &schema.Table{
		Database: "shop",
		Name:     "orders",
		Columns: []schema.Column{
			{Name: "region", DataType: "varchar", Charset: "utf8mb4", Collation: "utf8mb4_general_ci"},
			{Name: "id", DataType: "bigint"},
			{Name: "at", DataType: "datetime"},
			{Name: "note", DataType: "text", Charset: "latin1", Nullable: true},
			{Name: "total", DataType: "decimal", Generated: true},
		},
		Key: []string{"region", "id", "at"},
	}
}

func TestChunkQueryFirstChunk(t *testing.T) {
	p, err := newTablePlan(testTable(), nil, false)
	require.NoError(t, err)
	q, err := p.chunkQuery(nil, nil, 1000)
	require.NoError(t, err)
	require.Equal(t, "SELECT `region`, `id`, `at`, `note` FROM `shop`.`orders` ORDER BY `region`, `id`, `at` LIMIT 1000", q,
		"generated columns are not streamed")
}

func TestChunkQueryCompositeKeyAfterLastPK(t *testing.T) {
	p, err := newTablePlan(testTable(), nil, false)
	require.NoError(t, err)
	q, err := p.chunkQuery([][]byte{[]byte("eu'"), []byte("42"), []byte("2024-01-02 03:04:05")}, nil, 500)
	require.NoError(t, err)
	require.Equal(t, "SELECT `region`, `id`, `at`, `note` FROM `shop`.`orders` WHERE `region` >= _utf8mb4 X'657527' AND "+
		"(`region` > _utf8mb4 X'657527' OR (`region` = _utf8mb4 X'657527' AND "+
		"(`id` > 42 OR (`id` = 42 AND (`at` > '2024-01-02 03:04:05'))))) "+
		"ORDER BY `region`, `id`, `at` LIMIT 500", q)
}

func TestChunkQuerySingleKey(t *testing.T) {
	tbl := &schema.Table{Database: "d", Name: "t", Columns: []schema.Column{{Name: "id", DataType: "int"}, {Name: "v", DataType: "blob"}}, Key: []string{"id"}}
	p, err := newTablePlan(tbl, nil, false)
	require.NoError(t, err)
	q, err := p.chunkQuery([][]byte{[]byte("-7")}, nil, 10)
	require.NoError(t, err)
	require.Equal(t, "SELECT `id`, `v` FROM `d`.`t` WHERE `id` >= -7 AND (`id` > -7) ORDER BY `id` LIMIT 10", q)
}

func TestChunkQueryWrongKeyWidth(t *testing.T) {
	p, err := newTablePlan(testTable(), nil, false)
	require.NoError(t, err)
	_, err = p.chunkQuery([][]byte{[]byte("x")}, nil, 10)
	require.ErrorContains(t, err, "has 1 values, key has 3 columns")
}

func TestColumnSubsetMustKeepKey(t *testing.T) {
	_, err := newTablePlan(testTable(), []string{"region", "note"}, false)
	require.ErrorIs(t, err, schema.ErrColumn)
	require.ErrorContains(t, err, "must include key column id")

	p, err := newTablePlan(testTable(), []string{"note", "at", "id", "region"}, false)
	require.NoError(t, err)
	require.Equal(t, []int{3, 2, 1}, p.keyIdx, "key positions follow the requested column order")
	key := p.keyOf([][]byte{[]byte("n"), []byte("2020-01-01 00:00:00"), []byte("9"), []byte("us")})
	require.Equal(t, []int64{2, 1, 19}, key.Lengths)
	require.Equal(t, "us92020-01-01 00:00:00", string(key.Values))
}

func TestChunkQuerySelectsFloatAndYearExactly(t *testing.T) {
	tbl := &schema.Table{Database: "d", Name: "t", Key: []string{"id"}, Columns: []schema.Column{
		{Name: "id", DataType: "int"}, {Name: "f", DataType: "float"}, {Name: "y", DataType: "year"}, {Name: "d", DataType: "double"}}}
	p, err := newTablePlan(tbl, nil, false)
	require.NoError(t, err)
	q, err := p.chunkQuery(nil, nil, 5)
	require.NoError(t, err)
	require.Equal(t, "SELECT `id`, CAST(`f` AS DOUBLE), CAST(`y` AS CHAR), `d` FROM `d`.`t` ORDER BY `id` LIMIT 5", q,
		"FLOAT text has 6 digits and the driver turns YEAR 0000 into 0: both are selected in exact forms")
}

func TestVerifyChunkQuery(t *testing.T) {
	tbl := &schema.Table{Database: "d", Name: "t", Key: []string{"id"}, Columns: []schema.Column{
		{Name: "v", DataType: "varchar", Charset: "binary"}, {Name: "id", DataType: "int"}, {Name: "f", DataType: "float"}}}
	p, err := newTablePlan(tbl, nil, false)
	require.NoError(t, err)
	vp, err := verify.NewPlan(context.Background(), nil, tbl, nil, false)
	require.NoError(t, err)
	hash := "SHA2(CONCAT_WS(',', IFNULL(LENGTH(`v`), 'n'), CAST(`v` AS BINARY), IFNULL(`id`, 'n'), IFNULL(CAST(`f` AS DOUBLE), 'n')), 256)"

	v := p.verifying(vp, false)
	q, err := v.chunkQuery([][]byte{[]byte("7")}, nil, 100)
	require.NoError(t, err)
	require.Equal(t, "SELECT CONCAT(`id`), "+hash+", `id` FROM `d`.`t` WHERE `id` >= 7 AND (`id` > 7) ORDER BY `id` LIMIT 100", q,
		"the key's sort form and the row hash, then the key as the copy selects it")
	require.Equal(t, 3, v.width)
	row := v.keyOf([][]byte{[]byte("7"), []byte("h"), []byte("7")})
	vals, _ := rowcodec.Values(nil, row)
	require.Equal(t, [][]byte{[]byte("7")}, vals, "the last key is the copy's form, after the verify columns")

	v = p.verifying(vp, true)
	q, err = v.chunkQuery(nil, nil, 100)
	require.NoError(t, err)
	require.Equal(t, "SELECT CONCAT(`id`), "+hash+", `v`, `id`, CAST(`f` AS DOUBLE) FROM `d`.`t` ORDER BY `id` LIMIT 100", q,
		"with repair, the whole streamed row follows")
	require.Equal(t, 5, v.width)
	row = v.keyOf([][]byte{[]byte("8"), []byte("h"), []byte("x"), []byte("8"), []byte("1.5")})
	vals, _ = rowcodec.Values(nil, row)
	require.Equal(t, [][]byte{[]byte("8")}, vals)
}

// TestPlanBehindTheSource: a target of the source's shape, or with columns of
// its own, leaves the plan as it is; a target the source's table has moved
// away from (a column added, retyped or renamed on the source) makes the plan
// the target's, named as the source's table, with the difference as the
// applier would word it.
func TestPlanBehindTheSource(t *testing.T) {
	tbl := func(cols ...schema.Column) *schema.Table {
		return &schema.Table{Database: "d", Name: "t", Columns: cols, Key: []string{"id"}, RowsEstimate: 7}
	}
	id := schema.Column{Name: "id", DataType: "int", ColumnType: "int"}
	v := schema.Column{Name: "v", DataType: "int", ColumnType: "int"}
	w := schema.Column{Name: "w", DataType: "varchar", ColumnType: "varchar(20)", Charset: "utf8mb4", Collation: "utf8mb4_general_ci"}
	fieldsOf := func(tb *schema.Table) *rowliftv1.TableFields {
		cols, err := tb.Streamed(nil)
		require.NoError(t, err)
		f := tb.Fields(cols)
		f.Table = "t2"
		return f
	}
	source, err := newTablePlan(tbl(id, v, w), nil, false)
	require.NoError(t, err)

	for name, target := range map[string]*schema.Table{"same": tbl(id, v, w), "a column of its own": tbl(id, v, w, schema.Column{Name: "x", DataType: "int", ColumnType: "int"})} {
		p, err := source.behind(fieldsOf(target), "d2", false)
		require.NoError(t, err)
		require.Same(t, source, p, name)
	}
	p, err := source.behind(nil, "d2", false)
	require.NoError(t, err)
	require.Same(t, source, p, "no target table")

	bigV := v
	bigV.DataType, bigV.ColumnType = "bigint", "bigint"
	renamed := w
	renamed.Name = "w0"
	for name, target := range map[string]*schema.Table{
		"added on the source":   tbl(id, v),
		"retyped on the source": tbl(id, bigV, w),
		"renamed on the source": tbl(id, v, renamed),
	} {
		p, err := source.behind(fieldsOf(target), "d2", false)
		require.NoError(t, err)
		require.NotSame(t, source, p, name)
		require.ErrorContains(t, p.ahead, "target table d2.t2 differs from the source", name)
		require.Equal(t, "t", p.fields.GetTable(), "%s: the fields are sent as the source's table", name)
		require.Equal(t, int64(7), p.fields.GetRowsEstimate(), name)
		var got []string
		for _, c := range p.cols {
			got = append(got, c.Name+" "+c.ColumnType)
		}
		var want []string
		for _, c := range target.Columns {
			want = append(want, c.Name+" "+c.ColumnType)
		}
		require.Equal(t, want, got, "%s: the binlog rows are read with the target's columns", name)
		require.Equal(t, []int{0}, p.keyIdx, name)
	}
}
