package streamer

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"go.uber.org/zap"

	"github.com/rowlift/rowlift/internal/binlogrow"
	"github.com/rowlift/rowlift/internal/ddlscope"
	"github.com/rowlift/rowlift/internal/frozen"
	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/mysqljson"
	"github.com/rowlift/rowlift/internal/rowcodec"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// binlogReader tails the source's binlog from a GTID position and turns it into
// merger inputs: transactions of the streamed tables with rows converted to the
// stream's encoding, DDL that names them, and the reader's position. It keeps no
// state across streams; a stream starts where the applier's committed state says.
type binlogReader struct {
	events   *replication.BinlogStreamer
	database string
	plans    map[string]*tablePlan
	// scope tells the DDL that changes streamed tables; its names also serve
	// to recognise a cutover's renames.
	scope *ddlscope.Scope
	// mapped holds, by table ID, what a table map event said: nil for tables
	// that are not streamed.
	mapped map[uint64]*mappedTable
	// pos is the GTID set after the last complete transaction.
	pos *gtid.Set
	tx  *openTx
	// watch, when set, sees every event the dump delivers (its liveness).
	watch *dumpWatch
	log   *zap.Logger
	// skipRows, once a schema change of a streamed table is read, leaves
	// every later row unconverted: only positions are sent (ddlscope.ReopensStream).
	skipRows bool
}

// mappedTable is a streamed table as its table map event describes it; err is
// why its rows cannot be converted, reported when rows arrive.
type mappedTable struct {
	// tm is the table map conv was made from.
	tm   *replication.TableMapEvent
	name string
	conv *binlogrow.Converter
	err  error
	// filter is the table's key range filter (nil: no key range).
	filter *shardFilter
	// textJSON are the MySQL JSON columns whose values go as their text
	// (StreamOptions.json_as_text): the converter's patches are dropped.
	textJSON []int
}

// savepoint is a statement on a savepoint, which the servers log inside the
// transaction that set it.
var savepoint = regexp.MustCompile(`(?i)^(?:SAVEPOINT|ROLLBACK\s+(?:WORK\s+)?TO|RELEASE\s+SAVEPOINT)\b`)

// openTx is the transaction being read.
type openTx struct {
	gtid     string
	commitUS int64
	events   []*rowliftv1.RowEvent
	// byTable indexes events once there are more than indexedEvents: until
	// then looking through them costs less than a map per transaction.
	byTable map[string]*rowliftv1.RowEvent
}

// indexedEvents is how many tables a transaction's changes are looked up
// among without a map.
const indexedEvents = 8

// event returns the transaction's event of table, created with room for n
// changes on the table's first change.
func (tx *openTx) event(table string, n int) *rowliftv1.RowEvent {
	if tx.byTable != nil {
		if re := tx.byTable[table]; re != nil {
			return re
		}
	} else {
		for _, re := range tx.events {
			if re.Table == table {
				return re
			}
		}
	}
	re := &rowliftv1.RowEvent{Table: table, Changes: make([]*rowliftv1.RowChange, 0, n)}
	if tx.events == nil {
		tx.events = make([]*rowliftv1.RowEvent, 0, 4)
	}
	tx.events = append(tx.events, re)
	switch {
	case tx.byTable != nil:
		tx.byTable[table] = re
	case len(tx.events) > indexedEvents:
		tx.byTable = make(map[string]*rowliftv1.RowEvent, 2*len(tx.events))
		for _, e := range tx.events {
			tx.byTable[e.Table] = e
		}
	}
	return re
}

// readResult is one step of the reader: a transaction the target may need (tx
// set), or only the reader's new position.
type readResult struct {
	tx  *mergeTx
	pos position
}

func newBinlogReader(events *replication.BinlogStreamer, database string, plans []*tablePlan, start *gtid.Set) *binlogReader {
	r := &binlogReader{events: events, database: database, plans: map[string]*tablePlan{},
		mapped: map[uint64]*mappedTable{}, pos: start, log: zap.NewNop()}
	var names []string
	for _, p := range plans {
		r.plans[strings.ToLower(p.table.Name)] = p
		names = append(names, p.table.Name)
	}
	r.scope = ddlscope.New(database, names)
	return r
}

// position is where the reader is: after its last complete transaction.
func (r *binlogReader) position() position { return gtidPos{r.pos.Clone()} }

// next reads events until a transaction ends and returns it, or the position
// after it when the target does not need it.
func (r *binlogReader) next(ctx context.Context) (readResult, error) {
	for {
		ev, err := r.events.GetEvent(ctx)
		if err != nil {
			return readResult{}, fmt.Errorf("read binlog: %w", err)
		}
		if r.watch != nil {
			r.watch.event(ev)
		}
		// A compressed transaction (MySQL's binlog_transaction_compression)
		// carries its events, commit included, in one event.
		events := binlogrow.Unwrap(ev)
		for i, inner := range events {
			res, done, err := r.handle(inner)
			if err != nil {
				return res, err
			}
			if done && i != len(events)-1 {
				return readResult{}, fmt.Errorf("compressed transaction payload has %d events after its commit", len(events)-1-i)
			}
			if done {
				return res, nil
			}
		}
	}
}

func (r *binlogReader) handle(ev *replication.BinlogEvent) (readResult, bool, error) {
	switch e := ev.Event.(type) {
	case *replication.MariadbGTIDEvent:
		// A GTID while a transaction is open means the open one was cut off
		// (a reconnect, a crashed source): it never committed, so it is dropped.
		r.begin(mariaDBGTID(e.GTID), int64(ev.Header.Timestamp)*1e6)
	case *replication.GTIDEvent:
		return readResult{}, false, r.beginMySQL(e, ev.Header.Timestamp)
	case *replication.GtidTaggedLogEvent:
		// A tagged GTID (uuid:tag:n, MySQL 8.3+) comes in an event of its own type.
		return readResult{}, false, r.beginMySQL(&e.GTIDEvent, ev.Header.Timestamp)
	case *replication.TableMapEvent:
		r.mapTable(e)
	case *replication.RowsEvent:
		return readResult{}, false, r.rows(ev.Header.EventType, e)
	case *replication.XIDEvent:
		return r.commit()
	case *replication.QueryEvent:
		return r.query(e)
	}
	return readResult{}, false, nil
}

// mariaDBGTID is g as go-mysql's MariadbGTID.String writes it, without fmt:
// it is written for every transaction.
func mariaDBGTID(g mysql.MariadbGTID) string {
	if g == (mysql.MariadbGTID{}) {
		return ""
	}
	b := make([]byte, 0, 48)
	b = strconv.AppendUint(b, uint64(g.DomainID), 10)
	b = append(b, '-')
	b = strconv.AppendUint(b, uint64(g.ServerID), 10)
	b = append(b, '-')
	b = strconv.AppendUint(b, g.SequenceNumber, 10)
	return string(b)
}

// beginMySQL opens the transaction a MySQL GTID event starts, timed by its
// commit in microseconds where the event has it.
func (r *binlogReader) beginMySQL(e *replication.GTIDEvent, headerSeconds uint32) error {
	next, err := e.GTIDNext()
	if err != nil {
		return fmt.Errorf("binlog GTID event: %w", err)
	}
	commitUS := int64(e.ImmediateCommitTimestamp)
	if commitUS == 0 {
		commitUS = int64(headerSeconds) * 1e6
	}
	r.begin(next.String(), commitUS)
	return nil
}

func (r *binlogReader) begin(gtid string, commitUS int64) {
	r.tx = &openTx{gtid: gtid, commitUS: commitUS}
}

// mapTable builds the converter of a streamed table from its table map event;
// each event describes the table as its rows that follow were written, and
// the converter of the last one is kept while they describe it alike.
func (r *binlogReader) mapTable(e *replication.TableMapEvent) {
	if m := r.mapped[e.TableID]; m != nil && binlogrow.SameTable(m.tm, e) {
		return
	}
	p := r.plans[strings.ToLower(string(e.Table))]
	if p == nil || r.skipRows || !strings.EqualFold(string(e.Schema), r.database) {
		r.mapped[e.TableID] = nil
		return
	}
	conv, err := binlogrow.NewConverter(e, p.cols)
	m := &mappedTable{tm: e, name: p.table.Name, conv: conv, err: err, filter: p.filter}
	if p.jsonText {
		m.textJSON = p.jsonIdx
	}
	r.mapped[e.TableID] = m
}

func (r *binlogReader) rows(typ replication.EventType, e *replication.RowsEvent) error {
	t := r.mapped[e.TableID]
	if t == nil {
		return nil
	}
	if r.tx == nil {
		// Fail closed: rows the reader cannot place in a transaction would be
		// lost (an event type that starts transactions this reader does not know).
		return fmt.Errorf("binlog rows of %s outside a transaction: no GTID event before them", t.name)
	}
	if t.err != nil {
		return fmt.Errorf("binlog rows of %s: %w", t.name, t.err)
	}
	for i := range e.Rows {
		var skipped []int
		if i < len(e.SkippedColumns) {
			skipped = e.SkippedColumns[i]
		}
		if err := t.conv.CheckSkipped(skipped); err != nil {
			return fmt.Errorf("binlog rows of %s: %w", t.name, err)
		}
	}
	// Each change has a before image, an after image or, in an update, both,
	// as a pair of the event's images.
	var before, after bool
	switch typ {
	case replication.WRITE_ROWS_EVENTv0, replication.WRITE_ROWS_EVENTv1, replication.WRITE_ROWS_EVENTv2:
		after = true
	case replication.DELETE_ROWS_EVENTv0, replication.DELETE_ROWS_EVENTv1, replication.DELETE_ROWS_EVENTv2:
		before = true
	case replication.UPDATE_ROWS_EVENTv0, replication.UPDATE_ROWS_EVENTv1, replication.UPDATE_ROWS_EVENTv2,
		// binlog_row_value_options=PARTIAL_JSON: binlogrow.DecodeRows
		// applied its JSON diffs, its after images are whole.
		replication.PARTIAL_UPDATE_ROWS_EVENT:
		before, after = true, true
	default:
		// Fail closed: a rows event this reader does not understand could carry
		// changes the target needs (MariaDB's compressed row events).
		return fmt.Errorf("binlog rows event %s of %s is not supported", typ, t.name)
	}
	images := 1
	if before && after {
		images = 2
	}
	// The event is created with the first change kept, so a transaction
	// whose changes are all out of the key range has none and is not sent.
	var re *rowliftv1.RowEvent
	for i := 0; i+images <= len(e.Rows); i += images {
		ch := &rowliftv1.RowChange{}
		var err error
		if before {
			if ch.Before, err = r.convert(t, e.Rows[i]); err != nil {
				return err
			}
		}
		if after {
			if ch.After, err = r.convert(t, e.Rows[i+images-1]); err != nil {
				return err
			}
		}
		if t.filter != nil {
			if ch, err = t.filter.filterChange(ch); err != nil {
				return err
			}
			if ch == nil {
				continue
			}
		}
		if re == nil {
			re = r.tx.event(t.name, len(e.Rows)/images)
		}
		re.Changes = append(re.Changes, ch)
	}
	return nil
}

// convert converts one image of t's rows.
func (r *binlogReader) convert(t *mappedTable, image []any) (*rowliftv1.Row, error) {
	row := &rowliftv1.Row{}
	if err := t.conv.Convert(row, image); err != nil {
		return nil, fmt.Errorf("binlog row of %s: %w", t.name, err)
	}
	if len(t.textJSON) > 0 {
		return textOnly(row, t.textJSON)
	}
	return row, nil
}

// commit ends the open transaction (at its XID or COMMIT) and advances the
// position; the GTID set then includes the transaction.
func (r *binlogReader) commit() (readResult, bool, error) {
	tx := r.tx
	r.tx = nil
	if tx == nil {
		return readResult{}, false, nil
	}
	if err := r.pos.Add(tx.gtid); err != nil {
		return readResult{}, false, fmt.Errorf("advance position past %s: %w", tx.gtid, err)
	}
	res := readResult{pos: r.position()}
	if len(tx.events) == 0 {
		return res, true, nil
	}
	own, err := gtid.Parse(tx.gtid)
	if err != nil {
		return readResult{}, false, fmt.Errorf("parse GTID: %w", err)
	}
	c := &committed{}
	// A position that holds the transaction alone (on MariaDB, the usual
	// one of a single domain) is written as its GTID, which costs no
	// formatting of the set for every transaction.
	c.position.GtidSet = tx.gtid
	if !own.Contains(r.pos) {
		c.position.GtidSet = r.pos.String()
	}
	c.trx.Gtid, c.trx.Position, c.trx.CommitTimeUs, c.trx.Events = tx.gtid, &c.position, tx.commitUS, tx.events
	c.wrap.Transaction = &c.trx
	c.item.Item = &c.wrap
	res.tx = &c.tx
	res.tx.pos, res.tx.item, res.tx.tables = gtidPos{own}, &c.item, make([]string, 0, len(tx.events))
	for _, ev := range tx.events {
		res.tx.tables = append(res.tx.tables, ev.GetTable())
		for _, ch := range ev.GetChanges() {
			res.tx.bytes += rowBytes(ch.GetBefore()) + rowBytes(ch.GetAfter())
		}
	}
	return res, true, nil
}

// committed is what commit makes of a transaction, in one allocation rather
// than five: the parts are dropped together, once the transaction is sent.
type committed struct {
	tx       mergeTx
	item     rowliftv1.StreamItem
	wrap     rowliftv1.StreamItem_Transaction
	trx      rowliftv1.Transaction
	position rowliftv1.Position
}

// query handles a QUERY event: BEGIN and COMMIT frame transactions of
// non-transactional engines; anything else in a GTID of its own is a DDL, sent on
// when it changes a streamed table (ddlscope), marked as a cutover's freeze
// when it only renames streamed tables to their frozen names or back, or when
// it is on an online schema change tool's shadow of one. Other statements
// only advance the position.
func (r *binlogReader) query(e *replication.QueryEvent) (readResult, bool, error) {
	q := strings.TrimSpace(string(e.Query))
	switch strings.ToUpper(q) {
	case "BEGIN":
		return readResult{}, false, nil
	case "COMMIT":
		return r.commit()
	}
	if savepoint.MatchString(q) {
		// Inside a transaction, which goes on: its rows rolled back to a
		// savepoint were taken out of it before it was logged.
		return readResult{}, false, nil
	}
	tx := r.tx
	if tx == nil {
		return readResult{}, false, nil
	}
	r.tx = nil
	if err := r.pos.Add(tx.gtid); err != nil {
		return readResult{}, false, fmt.Errorf("advance position past %s: %w", tx.gtid, err)
	}
	res := readResult{pos: r.position()}
	change := r.scope.Classify(q, string(e.Schema))
	tables := change.Tables
	if len(tables) == 0 && change.Shadow.Kind == 0 {
		r.log.Debug("schema statement passed: it changes no streamed table", zap.String("statement", ddlscope.Loggable(q)), zap.String("gtid", tx.gtid))
		return res, true, nil
	}
	// The table may have changed: converters are rebuilt from the next table map.
	r.mapped = map[uint64]*mappedTable{}
	own, err := gtid.Parse(tx.gtid)
	if err != nil {
		return readResult{}, false, fmt.Errorf("parse GTID: %w", err)
	}
	ddl := &rowliftv1.DDL{Gtid: tx.gtid, Position: &rowliftv1.Position{GtidSet: r.pos.String()}, CommitTimeUs: tx.commitUS,
		Database: string(e.Schema), Statement: q, Tables: tables, Freeze: frozen.IsFreeze(q, string(e.Schema), r.database, r.scope.Names),
		Shadow: change.Shadow.Shadow}
	res.tx = &mergeTx{pos: gtidPos{own}, tables: tables, item: &rowliftv1.StreamItem{Item: &rowliftv1.StreamItem_Ddl{Ddl: ddl}}}
	return res, true, nil
}

// rowBytes is about what a row image holds in memory: its values and their
// lengths (nil: none).
func rowBytes(row *rowliftv1.Row) int {
	if row == nil {
		return 0
	}
	return len(row.GetValues()) + 8*len(row.GetLengths())
}

// textOnly drops the patches of the typed JSON values at idx, leaving their
// text.
func textOnly(row *rowliftv1.Row, idx []int) (*rowliftv1.Row, error) {
	values, err := rowcodec.Values(nil, row)
	if err != nil {
		return nil, err
	}
	for _, i := range idx {
		values[i], _ = mysqljson.Split(values[i])
	}
	out := &rowliftv1.Row{}
	rowcodec.Pack(out, values)
	return out, nil
}
