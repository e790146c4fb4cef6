package applier

import (
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

var insertFields = []*rowliftv1.Field{
	{Name: "id", DataType: "bigint"},
	{Name: "name", DataType: "varchar"},
	{Name: "at", DataType: "datetime"},
	{Name: "flags", DataType: "bit"},
}

func collect(t *testing.T, b *insertBuilder, rows []*rowliftv1.Row) []string {
	stmts, err := b.build(&scratch{}, rows)
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
	_, err := b.build(&scratch{}, []*rowliftv1.Row{packed([]byte("1"), make([]byte, 200), nil, nil)})
	require.ErrorContains(t, err, "raise max_allowed_packet on the target")
}

func TestInsertRejectsWrongWidth(t *testing.T) {
	b := newInsertBuilder(rowcodec.QualifiedIdent("d", "t"), insertFields, literalKinds("t", insertFields, nil), 1<<20)
	_, err := b.build(&scratch{}, []*rowliftv1.Row{packed([]byte("1"))})
	require.ErrorContains(t, err, "row has 1 values, table has 4")
}

func TestInsertScratchIsReused(t *testing.T) {
	b := newInsertBuilder(rowcodec.QualifiedIdent("d", "t"), insertFields, literalKinds("t", insertFields, nil), 1<<20)
	var s scratch
	r := packed([]byte("1"), []byte("x"), nil, nil)
	first, err := b.build(&s, []*rowliftv1.Row{r, r})
	require.NoError(t, err)
	want := string(first[0])
	second, err := b.build(&s, []*rowliftv1.Row{r, r})
	require.NoError(t, err)
	require.Equal(t, want, string(second[0]))
	require.Empty(t, testing.AllocsPerRun(10, func() { _, _ = b.build(&s, []*rowliftv1.Row{r, r}) }),
		"a warmed-up scratch builds without allocating")
}
