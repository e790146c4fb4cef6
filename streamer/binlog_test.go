package streamer

import (
	"context"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/rowlift/rowlift/internal/binlogrow"
	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/schema"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
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

// BenchmarkBinlogCatchUp replays, per transaction, what a catch-up costs the
// streamer up to the send: go-mysql parses the events' bytes, captured from a
// real MariaDB, the reader reads them and the merger emits the transaction.
// The transactions are the apply benchmark's (sysbench oltp_write_only): an
// UPDATE of k, an UPDATE of c, a DELETE and an INSERT of one key, each on a
// table drawn from four.
func BenchmarkBinlogCatchUp(b *testing.B) {
	const tables, txs = 4, 1000
	srv := sandboxtest.Start(b, sandbox.Options{})
	admin := sandboxtest.Open(b, srv, "")
	sandboxtest.Exec(b, admin, "CREATE DATABASE d")
	req := &rowliftv1.StreamRequest{Database: "d"}
	for i := 1; i <= tables; i++ {
		name := fmt.Sprintf("sbtest%d", i)
		sandboxtest.Exec(b, admin, "CREATE TABLE d."+name+" (id INT NOT NULL, k INT NOT NULL DEFAULT 0, c CHAR(120) NOT NULL DEFAULT '', "+
			"pad CHAR(60) NOT NULL DEFAULT '', PRIMARY KEY (id), KEY k_1 (k))",
			"INSERT INTO d."+name+" SELECT a.n + 10 * b.n + 100 * c.n + 1, a.n, REPEAT('c', 119), REPEAT('p', 59) FROM "+
				digits("a")+", "+digits("b")+", "+digits("c"))
		req.Tables = append(req.Tables, &rowliftv1.TableRequest{Name: name})
	}
	ctx := context.Background()
	s, err := New(Config{SourceDSN: srv.DSN(""), Logger: zap.NewNop()})
	require.NoError(b, err)
	b.Cleanup(func() { s.Close() })
	plans, err := s.plan(ctx, req)
	require.NoError(b, err)
	pos, err := dbconn.MariaDB.Position(ctx, admin)
	require.NoError(b, err)
	start := gtidSet(b, pos)

	rnd := rand.New(rand.NewPCG(1, 2))
	table := func() string { return fmt.Sprintf("d.sbtest%d", 1+rnd.IntN(tables)) }
	id := func() int { return 1 + rnd.IntN(1000) }
	text := func(n int) string { return strconv.FormatUint(rnd.Uint64(), 10) + strings.Repeat("-", n-20) }
	conn, err := admin.Conn(ctx)
	require.NoError(b, err)
	defer conn.Close()
	for range txs {
		del, delID := table(), id()
		for _, q := range []string{"BEGIN",
			fmt.Sprintf("UPDATE %s SET k = k + 1 WHERE id = %d", table(), id()),
			fmt.Sprintf("UPDATE %s SET c = '%s' WHERE id = %d", table(), text(119), id()),
			fmt.Sprintf("DELETE FROM %s WHERE id = %d", del, delID),
			fmt.Sprintf("INSERT INTO %s (id, k, c, pad) VALUES (%d, %d, '%s', '%s')", del, delID, id(), text(119), text(59)),
			"COMMIT"} {
			_, err := conn.ExecContext(ctx, q)
			require.NoError(b, err)
		}
	}
	pos, err = dbconn.MariaDB.Position(ctx, admin)
	require.NoError(b, err)
	end := gtidSet(b, pos)

	syncer, events, err := s.startBinlog(ctx, start, dbconn.MariaDB, newDumpWatch(start, true, s.log), s.log)
	require.NoError(b, err)
	defer syncer.Close()
	var raw [][]byte
	for r := newBinlogReader(nil, "d", plans, start.Clone()); !r.pos.Contains(end); {
		ev, err := events.GetEvent(ctx)
		require.NoError(b, err)
		raw = append(raw, slices.Clone(ev.RawData))
		_, _, err = r.handle(ev)
		require.NoError(b, err)
	}

	var (
		parser *replication.BinlogParser
		r      *binlogReader
		m      *merger
		next   = len(raw)
	)
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; {
		if next == len(raw) {
			parser = replication.NewBinlogParser()
			parser.SetFlavor(mysql.MariaDBFlavor)
			parser.SetTimestampStringLocation(time.UTC)
			parser.SetRenderJSONAsMySQLText(true)
			parser.SetRowsEventDecodeFunc(binlogrow.DecodeRows)
			r = newBinlogReader(nil, "d", plans, start.Clone())
			m = newMerger(gtidPos{start.Clone()})
			for _, p := range plans {
				m.addTable(p.table.Name, &mergeTable{})
			}
			next = 0
		}
		ev, err := parser.Parse(raw[next])
		if err != nil {
			b.Fatal(err)
		}
		next++
		res, done, err := r.handle(ev)
		if err != nil {
			b.Fatal(err)
		}
		if !done {
			continue
		}
		if err := apply(m, mergeInput{read: &res}); err != nil {
			b.Fatal(err)
		}
		out, err := m.drain()
		if err != nil {
			b.Fatal(err)
		}
		if len(out) != 1 || len(out[0].GetTransaction().GetEvents()) == 0 {
			b.Fatalf("transaction %d was not emitted", n)
		}
		n++
	}
}

// TestReaderTransaction: the reader gathers a transaction's changes per table,
// in the order the tables first changed and each table's in binlog order,
// also past the tables it looks up without an index; every row keeps its
// values while later rows, small ones and a large one among them, are
// converted after it.
func TestReaderTransaction(t *testing.T) {
	cols := []schema.Column{{Name: "id", DataType: "int", ColumnType: "int(11)"}, {Name: "v", DataType: "varchar", ColumnType: "varchar(9000)"}}
	var plans []*tablePlan
	tables := indexedEvents + 3
	for i := range tables {
		plans = append(plans, &tablePlan{table: &schema.Table{Database: "d", Name: fmt.Sprintf("t%d", i), Columns: cols, Key: []string{"id"}}, cols: cols})
	}
	r := newBinlogReader(nil, "d", plans, mustSet(t, "0-1-4"))
	handle := func(e replication.Event, typ replication.EventType) {
		t.Helper()
		res, done, err := r.handle(&replication.BinlogEvent{Header: &replication.EventHeader{EventType: typ}, Event: e})
		require.NoError(t, err)
		require.False(t, done)
		require.Nil(t, res.tx)
	}
	tableMap := func(i int) *replication.TableMapEvent {
		tm := &replication.TableMapEvent{TableID: uint64(100 + i), Schema: []byte("d"), Table: []byte(fmt.Sprintf("t%d", i)), ColumnCount: 2,
			ColumnType: []byte{mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_VARCHAR}, ColumnMeta: []uint16{0, 9000}, SignednessBitmap: []byte{0},
			ColumnName: [][]byte{[]byte("id"), []byte("v")}}
		handle(tm, replication.TABLE_MAP_EVENT)
		return tm
	}
	// want are the changes expected of each table, as "before>after" values.
	want := make([][]string, tables)
	value := func(id int) string { return strings.Repeat(strconv.Itoa(id%10), 1+id%50) }
	row := func(id int, v string) []any { return []any{int32(id), v} }
	rows := func(i int, typ replication.EventType, images ...[]any) {
		handle(&replication.RowsEvent{TableID: uint64(100 + i), Table: tableMap(i), Rows: images}, typ)
	}

	handle(&replication.MariadbGTIDEvent{GTID: mysql.MariadbGTID{DomainID: 0, ServerID: 2, SequenceNumber: 5}}, replication.MARIADB_GTID_EVENT)
	for i := range tables {
		rows(i, replication.WRITE_ROWS_EVENTv1, row(2*i, value(2*i)), row(2*i+1, value(2*i+1)))
		want[i] = append(want[i], fmt.Sprintf(">%d %s", 2*i, value(2*i)), fmt.Sprintf(">%d %s", 2*i+1, value(2*i+1)))
		if i == 2 {
			rows(1, replication.DELETE_ROWS_EVENTv1, row(3, value(3)))
			want[1] = append(want[1], fmt.Sprintf("%d %s>", 3, value(3)))
		}
	}
	big := strings.Repeat("b", 8<<10)
	rows(0, replication.UPDATE_ROWS_EVENTv1, row(0, value(0)), row(0, big), row(1, value(1)), row(1, "x"))
	want[0] = append(want[0], fmt.Sprintf("%d %s>%d %s", 0, value(0), 0, big), fmt.Sprintf("%d %s>%d x", 1, value(1), 1))
	last := tables - 1
	rows(last, replication.DELETE_ROWS_EVENTv1, row(2*last, value(2*last)))
	want[last] = append(want[last], fmt.Sprintf("%d %s>", 2*last, value(2*last)))

	res, done, err := r.handle(&replication.BinlogEvent{Header: &replication.EventHeader{}, Event: &replication.XIDEvent{}})
	require.NoError(t, err)
	require.True(t, done)
	trx := res.tx.item.GetTransaction()
	require.Equal(t, "0-2-5", trx.GetGtid())
	require.Equal(t, "0-2-5", trx.GetPosition().GetGtidSet())
	require.Equal(t, "0-2-5", res.pos.(gtidPos).String())
	require.Equal(t, "0-2-5", res.tx.pos.(gtidPos).String())
	text := func(row *rowliftv1.Row) string {
		if row == nil {
			return ""
		}
		values, err := rowcodec.Values(nil, row)
		require.NoError(t, err)
		return string(values[0]) + " " + string(values[1])
	}
	require.Len(t, trx.GetEvents(), tables)
	for i, ev := range trx.GetEvents() {
		require.Equal(t, fmt.Sprintf("t%d", i), ev.GetTable())
		require.Equal(t, ev.GetTable(), res.tx.tables[i])
		var got []string
		for _, ch := range ev.GetChanges() {
			got = append(got, text(ch.GetBefore())+">"+text(ch.GetAfter()))
		}
		require.Equal(t, want[i], got, ev.GetTable())
	}
}

// TestMariaDBGTID: the reader writes a GTID as go-mysql does.
func TestMariaDBGTID(t *testing.T) {
	for _, g := range []mysql.MariadbGTID{{}, {DomainID: 0, ServerID: 1, SequenceNumber: 1}, {DomainID: 7, ServerID: 0, SequenceNumber: 0},
		{DomainID: math.MaxUint32, ServerID: math.MaxUint32, SequenceNumber: math.MaxUint64}} {
		require.Equal(t, g.String(), mariaDBGTID(g))
	}
}

// TestReaderPositionText: a transaction carries the position after it, as
// the position's set writes itself, whether the position holds more than the
// transaction or not.
func TestReaderPositionText(t *testing.T) {
	const uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	sid, err := hex.DecodeString(strings.ReplaceAll(uuid, "-", ""))
	require.NoError(t, err)
	mariaDB := &replication.MariadbGTIDEvent{GTID: mysql.MariadbGTID{DomainID: 0, ServerID: 2, SequenceNumber: 5}}
	mySQL := &replication.GTIDEvent{SID: sid, GNO: 5}
	for _, c := range []struct {
		start string
		gtid  replication.Event
		want  string
	}{
		{"", mariaDB, "0-2-5"},
		{"0-1-4", mariaDB, "0-2-5"},
		{"0-1-4,1-1-9", mariaDB, "0-2-5,1-1-9"},
		{"1-1-9", mariaDB, "0-2-5,1-1-9"},
		{"0-1-9", mariaDB, "0-2-5"}, // out of order: the domain moves to it all the same
		{"", mySQL, uuid + ":5"},
		{uuid + ":1-4", mySQL, uuid + ":1-5"},
		{uuid + ":7", mySQL, uuid + ":5:7"},
	} {
		cols := []schema.Column{{Name: "id", DataType: "int", ColumnType: "int(11)"}}
		plan := &tablePlan{table: &schema.Table{Database: "d", Name: "t", Columns: cols, Key: []string{"id"}}, cols: cols}
		r := newBinlogReader(nil, "d", []*tablePlan{plan}, mustSet(t, c.start))
		tm := &replication.TableMapEvent{TableID: 1, Schema: []byte("d"), Table: []byte("t"), ColumnCount: 1,
			ColumnType: []byte{mysql.MYSQL_TYPE_LONG}, ColumnMeta: []uint16{0}, SignednessBitmap: []byte{0}, ColumnName: [][]byte{[]byte("id")}}
		var res readResult
		for _, e := range []*replication.BinlogEvent{
			{Header: &replication.EventHeader{}, Event: c.gtid},
			{Header: &replication.EventHeader{}, Event: tm},
			{Header: &replication.EventHeader{EventType: replication.WRITE_ROWS_EVENTv1}, Event: &replication.RowsEvent{TableID: 1, Table: tm, Rows: [][]any{{int32(1)}}}},
			{Header: &replication.EventHeader{}, Event: &replication.XIDEvent{}},
		} {
			var err error
			res, _, err = r.handle(e)
			require.NoError(t, err)
		}
		require.Equal(t, c.want, r.pos.String(), c.start)
		require.Equal(t, c.want, res.tx.item.GetTransaction().GetPosition().GetGtidSet(), c.start)
		require.Equal(t, c.want, res.pos.(gtidPos).String(), c.start)
	}
}
