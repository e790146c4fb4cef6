package streamer

import (
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/schema"
)

// TestTableMapKeepsItsConverter: each transaction logs its tables' maps
// again; the reader keeps a streamed table's converter while the maps
// describe the table alike, and builds a new one once they do not (here a
// renamed column, which the new converter reports).
func TestTableMapKeepsItsConverter(t *testing.T) {
	cols := []schema.Column{{Name: "id", DataType: "int", ColumnType: "int(11)"}, {Name: "v", DataType: "int", ColumnType: "int(11)"}}
	plan := &tablePlan{table: &schema.Table{Database: "d", Name: "t", Columns: cols, Key: []string{"id"}}, cols: cols}
	r := newBinlogReader(nil, "d", []*tablePlan{plan}, mustSet(t, "0-1-1"))
	tableMap := func(names ...string) *replication.TableMapEvent {
		tm := &replication.TableMapEvent{TableID: 7, Schema: []byte("d"), Table: []byte("t"), ColumnCount: 2,
			ColumnType: []byte{mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_LONG}, ColumnMeta: []uint16{0, 0}, SignednessBitmap: []byte{0}}
		for _, n := range names {
			tm.ColumnName = append(tm.ColumnName, []byte(n))
		}
		return tm
	}

	r.mapTable(tableMap("id", "v"))
	first := r.mapped[7]
	require.NotNil(t, first)
	require.NoError(t, first.err)
	r.mapTable(tableMap("id", "v"))
	require.Same(t, first, r.mapped[7], "the same definition keeps its converter")

	r.mapTable(tableMap("id", "w"))
	require.NotSame(t, first, r.mapped[7])
	require.ErrorContains(t, r.mapped[7].err, "streamed column v is not in the binlog image of d.t")
	r.mapTable(tableMap("id", "v"))
	require.NoError(t, r.mapped[7].err, "and back")

	other := tableMap("id", "v")
	other.TableID, other.Table = 8, []byte("other")
	r.mapTable(other)
	require.Nil(t, r.mapped[8], "a table the stream does not carry")
}

// BenchmarkBinlogReader reads sbtest-like transactions (a GTID, the table's
// map, one UPDATE row, the commit) through the binlog reader, as a catch-up
// does: the streamer's own cost per transaction, without go-mysql's parsing.
func BenchmarkBinlogReader(b *testing.B) {
	cols := []schema.Column{{Name: "id", DataType: "int", ColumnType: "int(11)"}, {Name: "k", DataType: "int", ColumnType: "int(11)"},
		{Name: "c", DataType: "char", ColumnType: "char(120)"}, {Name: "pad", DataType: "char", ColumnType: "char(60)"}}
	plan := &tablePlan{table: &schema.Table{Database: "d", Name: "sbtest1", Columns: cols, Key: []string{"id"}}, cols: cols}
	start, err := gtid.Parse("0-1-1")
	require.NoError(b, err)
	r := newBinlogReader(nil, "d", []*tablePlan{plan}, start)
	before := []any{int32(7), int32(5), strings.Repeat("c", 119), strings.Repeat("p", 59)}
	after := []any{int32(7), int32(6), strings.Repeat("d", 119), strings.Repeat("p", 59)}
	b.ReportAllocs()
	for i := range b.N {
		tm := &replication.TableMapEvent{TableID: 7, Schema: []byte("d"), Table: []byte("sbtest1"), ColumnCount: 4,
			ColumnType: []byte{mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_STRING, mysql.MYSQL_TYPE_STRING},
			ColumnMeta: []uint16{0, 0, uint16(mysql.MYSQL_TYPE_STRING)<<8 | 120, uint16(mysql.MYSQL_TYPE_STRING)<<8 | 60}, SignednessBitmap: []byte{0},
			ColumnName: [][]byte{[]byte("id"), []byte("k"), []byte("c"), []byte("pad")}}
		events := []*replication.BinlogEvent{
			{Header: &replication.EventHeader{}, Event: &replication.MariadbGTIDEvent{GTID: mysql.MariadbGTID{ServerID: 1, SequenceNumber: uint64(i + 2)}}},
			{Header: &replication.EventHeader{}, Event: tm},
			{Header: &replication.EventHeader{EventType: replication.UPDATE_ROWS_EVENTv2}, Event: &replication.RowsEvent{TableID: 7, Table: tm, Rows: [][]any{before, after}}},
			{Header: &replication.EventHeader{}, Event: &replication.XIDEvent{}},
		}
		for _, ev := range events {
			res, _, err := r.handle(ev)
			if err != nil {
				b.Fatal(err)
			}
			if res.tx != nil && len(res.tx.item.GetTransaction().GetEvents()) != 1 {
				b.Fatal("the update was not read")
			}
		}
	}
}
