package applier

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/rowcodec"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

func packed(values ...[]byte) *rowliftv1.Row {
	r := &rowliftv1.Row{}
	rowcodec.Pack(r, values)
	return r
}

// chunkOf is a copy chunk of rows, packed as the streamer packs them.
func chunkOf(rows ...*rowliftv1.Row) *rowliftv1.Chunk {
	c := &rowliftv1.Chunk{}
	for _, r := range rows {
		vals, err := rowcodec.Values(nil, r)
		if err != nil {
			panic(err)
		}
		c.PackedRows = rowcodec.AppendRow(c.PackedRows, vals)
		c.RowCount++
	}
	return c
}

var insertFields = []*rowliftv1.Field{
	{Name: "id", DataType: "bigint"},
	{Name: "name", DataType: "varchar"},
	{Name: "at", DataType: "datetime"},
	{Name: "flags", DataType: "bit"},
}

func collect(t *testing.T, b *insertBuilder, rows []*rowliftv1.Row) []string {
	stmts, err := b.build(&scratch{}, chunkOf(rows...))
	require.NoError(t, err)
	var out []string
	for _, s := range stmts {
		out = append(out, string(s))
	}
	return out
}

func TestInsertLiterals(t *testing.T) {
	b := newInsertBuilder(rowcodec.QualifiedIdent("d", "t"), insertFields, literalKinds("t", insertFields, nil), 1<<20)
	got := collect(t, b, []*rowliftv1.Row{
		packed([]byte("1"), []byte("it's\\a\x00\n\r\x1a"), []byte("2024-02-29 23:59:59.000001"), []byte{0xff, 0x01}),
		packed([]byte("-2"), []byte(""), nil, nil),
	})
	require.Equal(t, []string{"INSERT INTO `d`.`t` (`id`, `name`, `at`, `flags`) VALUES " +
		`(1,'it\'s\\a\0\n\r\Z','2024-02-29 23:59:59.000001',X'FF01'),(-2,'',NULL,NULL)`}, got)
}

func TestInsertSplitsAtMaxBytes(t *testing.T) {
	prefix := len("INSERT INTO `d`.`t` (`id`, `name`, `at`, `flags`) VALUES ")
	row := "(1,'x','2024-01-01',NULL)"
	b := newInsertBuilder(rowcodec.QualifiedIdent("d", "t"), insertFields, literalKinds("t", insertFields, nil), prefix+2*len(row)+1) // exactly two rows and a comma
	r := packed([]byte("1"), []byte("x"), []byte("2024-01-01"), nil)
	got := collect(t, b, []*rowliftv1.Row{r, r, r, r, r})
	require.Len(t, got, 3)
	require.Len(t, got[0], prefix+2*len(row)+1)
	require.Len(t, got[2], prefix+len(row))
}

func TestInsertRowLargerThanPacket(t *testing.T) {
	b := newInsertBuilder(rowcodec.QualifiedIdent("d", "t"), insertFields, literalKinds("t", insertFields, nil), 100)
	_, err := b.build(&scratch{}, chunkOf(packed([]byte("1"), make([]byte, 200), nil, nil)))
	require.ErrorContains(t, err, "raise max_allowed_packet on the target")
}

func TestInsertRejectsWrongWidth(t *testing.T) {
	b := newInsertBuilder(rowcodec.QualifiedIdent("d", "t"), insertFields, literalKinds("t", insertFields, nil), 1<<20)
	_, err := b.build(&scratch{}, chunkOf(packed([]byte("1"))))
	require.ErrorContains(t, err, "row 1 has 1 values, table has 4")
}

func TestInsertScratchIsReused(t *testing.T) {
	b := newInsertBuilder(rowcodec.QualifiedIdent("d", "t"), insertFields, literalKinds("t", insertFields, nil), 1<<20)
	var s scratch
	r := packed([]byte("1"), []byte("x"), nil, nil)
	c := chunkOf(r, r)
	first, err := b.build(&s, c)
	require.NoError(t, err)
	want := string(first[0])
	second, err := b.build(&s, c)
	require.NoError(t, err)
	require.Equal(t, want, string(second[0]))
	require.Empty(t, testing.AllocsPerRun(10, func() { _, _ = b.build(&s, c) }),
		"a warmed-up scratch builds without allocating")
}

func TestChunkMustHoldTheRowsItSays(t *testing.T) {
	b := newInsertBuilder(rowcodec.QualifiedIdent("d", "t"), insertFields, literalKinds("t", insertFields, nil), 1<<20)
	r := packed([]byte("1"), []byte("x"), nil, nil)
	c := chunkOf(r, r)
	c.RowCount = 3
	_, err := b.build(&scratch{}, c)
	require.ErrorContains(t, err, "chunk says it holds 3 rows and holds 2")
	c = chunkOf(r)
	c.PackedRows = c.PackedRows[:len(c.PackedRows)-1]
	_, err = b.build(&scratch{}, c)
	require.ErrorContains(t, err, "truncated")
}

// TestLoadBuildAllocatesNothingPerRow: once a worker's scratch has grown, the
// LOAD DATA input of a chunk is built without an allocation, however many
// rows it holds.
func TestLoadBuildAllocatesNothingPerRow(t *testing.T) {
	b := newLoadBuilder(rowcodec.QualifiedIdent("d", "t"), insertFields, literalKinds("t", insertFields, nil))
	var rows []*rowliftv1.Row
	for range 5000 {
		rows = append(rows, packed([]byte("12345"), []byte("a\tb"), []byte("2024-01-01 00:00:00"), nil))
	}
	c := chunkOf(rows...)
	var s scratch
	data, err := b.build(&s, c)
	require.NoError(t, err)
	require.Equal(t, 5000, bytes.Count(data, []byte("\n")))
	require.Zero(t, testing.AllocsPerRun(10, func() { _, _ = b.build(&s, c) }))
}
