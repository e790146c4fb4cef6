package streamer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/binlogrow"
	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/keyorder"
	"github.com/rowlift/rowlift/internal/logging"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/schema"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// mergeInput is one message to the merge loop, which alone owns the merger.
type mergeInput struct {
	read    *readResult // from the binlog reader
	request string      // a chunk of this table is about to take its snapshot
	ack     chan struct{}
	table   string // with fence and held
	fence   position
	held    position
	// shared marks a fence offered by share: the merger takes it only if it
	// can place the chunk there, and answers on shared.
	shared  chan bool
	part    *rowliftv1.Chunk
	last    bool
	probed  bool     // a probe snapshot ended
	visible position // its position, nil when it failed
}

// mergeSink is how row streamers reach the merge loop.
type mergeSink struct{ inputs chan<- mergeInput }

func (s mergeSink) send(ctx context.Context, in mergeInput) error {
	select {
	case s.inputs <- in:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s mergeSink) request(ctx context.Context, table string) error {
	ack := make(chan struct{})
	if err := s.send(ctx, mergeInput{request: table, ack: ack}); err != nil {
		return err
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s mergeSink) fence(ctx context.Context, table string, fence, held position) error {
	return s.send(ctx, mergeInput{table: table, fence: fence, held: held})
}

func (s mergeSink) share(ctx context.Context, table string, fence, held position) (bool, error) {
	taken := make(chan bool, 1)
	if err := s.send(ctx, mergeInput{table: table, fence: fence, held: held, shared: taken}); err != nil {
		return false, err
	}
	select {
	case ok := <-taken:
		return ok, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

func (s mergeSink) part(ctx context.Context, part *rowliftv1.Chunk, last bool) error {
	return s.send(ctx, mergeInput{part: part, last: last})
}

// startPosition is where the binlog reader starts: the applier's committed
// position, or for a new workflow the position of a consistent snapshot (not
// @@gtid_binlog_pos, which counts transactions not yet visible to snapshots).
func (s *Server) startPosition(ctx context.Context, req *rowliftv1.StreamRequest, flavor dbconn.Flavor) (*gtid.Set, error) {
	text := req.GetPosition().GetGtidSet()
	if text == "" {
		var err error
		if text, err = s.visible(ctx, flavor); err != nil {
			return nil, status.Errorf(codes.Unavailable, "read the source's position: %v", err)
		}
	}
	set, err := gtid.Parse(text)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "stream position: %v", err)
	}
	if f := set.Flavor(); f != "" && f != string(flavor) {
		return nil, status.Errorf(codes.FailedPrecondition, "stream position %s is a %s position but the source %s runs %s: "+
			"the workflow was created against another server; create it again for this source", set, f, s.cfg.Addr, flavor)
	}
	return set, nil
}

// visible reads a position every later snapshot contains, on a connection of
// its own.
func (s *Server) visible(ctx context.Context, flavor dbconn.Flavor) (string, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return "", dbconn.Explain(err, s.cfg, "source")
	}
	defer conn.Close()
	f := newFencer(flavor, s.db, "", nil)
	defer f.close()
	return f.visible(ctx, conn)
}

// startBinlog opens the binlog dump from start, with the source DSN's TLS
// settings. go-mysql's own reconnect is off: a broken dump ends the stream and
// the applier reopens it from its committed position, the one truth for resuming.
// There is no read timeout: the server may take minutes to locate start in a
// large binlog file before it sends anything, and watch (see dumpLiveness)
// tells that from a dead dump by heartbeats, the processlist and TCP keepalive.
func (s *Server) startBinlog(ctx context.Context, start *gtid.Set, flavor dbconn.Flavor, watch *dumpWatch, log *zap.Logger) (*replication.BinlogSyncer, *replication.BinlogStreamer, error) {
	host, portText, err := net.SplitHostPort(s.cfg.Addr)
	if err != nil {
		return nil, nil, status.Errorf(codes.InvalidArgument, "source address %q: %v", s.cfg.Addr, err)
	}
	port, _ := strconv.Atoi(portText)
	tlsConfig, err := dbconn.BinlogTLS(ctx, s.db, s.cfg)
	if err != nil {
		return nil, nil, status.Error(codes.Unavailable, dbconn.Explain(err, s.cfg, "source").Error())
	}
	cfg := replication.BinlogSyncerConfig{
		// Unique among the source's replicas, and never 0.
		ServerID:                uint32(1<<31 + rand.Uint32N(1<<30)),
		Flavor:                  string(flavor),
		Host:                    host,
		Port:                    uint16(port),
		User:                    s.cfg.User,
		Password:                s.cfg.Passwd,
		TLSConfig:               tlsConfig,
		ParseTime:               false,
		UseDecimal:              false,
		TimestampStringLocation: time.UTC,
		// MySQL JSON arrives in its binary form, which binlogrow turns into
		// its typed value; go-mysql renders it as text only in the partial
		// update events binlogrow refuses.
		RowsEventDecodeFunc:   binlogrow.DecodeRows,
		RenderJSONAsMySQLText: true,
		// The reader keeps its own position; go-mysql would clone its GTID
		// set into every commit event.
		DiscardGTIDSet:  true,
		HeartbeatPeriod: binlogHeartbeat,
		Dialer:          watch.dial,
		Option: func(c *client.Conn) error {
			if _, err := c.Execute(fmt.Sprintf("SET SESSION net_write_timeout = %d", readerWriteTimeout)); err != nil {
				return fmt.Errorf("set the dump's net_write_timeout: %w", err)
			}
			return watch.connected(c)
		},
		DisableRetrySync: true,
		// Events parsed ahead of the reader, each at most one row event
		// (binlog_row_event_max_size, 8 KiB by default, or one wider row):
		// enough to keep the reader fed; go-mysql's 10,240 would hold 10 GiB
		// of 1 MiB rows while a slow target holds the reader back.
		EventCacheCount: 64,
		// go-mysql logs its whole config, password included, at info: this
		// logger keeps its warnings and errors only.
		Logger: logging.GoMySQL(log),
	}
	if err := binlogrow.CheckConfig(cfg); err != nil {
		return nil, nil, status.Error(codes.Internal, err.Error())
	}
	from, err := start.GoMySQL(string(flavor))
	if err != nil {
		return nil, nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	syncer := replication.NewBinlogSyncer(cfg)
	events, err := syncer.StartSyncGTID(from)
	if err != nil {
		syncer.Close()
		if isReplicationDenied(err) {
			return nil, nil, s.replicationDenied(ctx, err)
		}
		if tlsErr := dbconn.Explain(err, s.cfg, "source"); errors.Is(tlsErr, dbconn.ErrTLS) {
			return nil, nil, status.Errorf(codes.PermissionDenied, "start binlog dump at %s: %v", start, tlsErr)
		}
		return nil, nil, status.Errorf(codes.Unavailable, "start binlog dump at %s: %v", start, err)
	}
	return syncer, events, nil
}

// readerWriteTimeout is the net_write_timeout, in seconds, of the source
// connections whose reader waits for the target (chunk reads and the binlog
// dump): the server drops a connection whose write waits that long, and a
// slow target's backpressure can hold a reader past the 60 s default.
const readerWriteTimeout = 3600

// binlogError explains errors of the dump that an operator has to act on.
func binlogError(err error, start fmt.Stringer) error {
	var noID *keyspaceIDError
	if errors.As(err, &noID) {
		return status.Errorf(codes.FailedPrecondition, "binlog after position %s: %v", start, err)
	}
	var me *mysql.MyError
	if errors.As(err, &me) && me.Code == mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG {
		if strings.Contains(me.Message, "truncated") {
			return status.Errorf(codes.FailedPrecondition, "the source cannot send its binlog after position %s (%s): a binlog file "+
				"ends in a torn event, which a crash of the source server leaves; no replica of this source can read past it either. "+
				"Repair the source's replication first (see the server's error log); the workflow resumes once the source serves "+
				"its binlog from this position again, else its copy must start over", start, me.Message)
		}
		return status.Errorf(codes.FailedPrecondition, "the source no longer has the binlog at position %s (%s): it was purged "+
			"before the workflow caught up; the workflow cannot resume and its copy must start over "+
			"(delete the workflow, empty the target tables, create it again), and keep binlogs longer on the source", start, me.Message)
	}
	return status.Errorf(codes.Unavailable, "binlog: %v", err)
}

// mergeLoop owns the merger: it takes what the reader (on reads) and the row
// streamers (on inputs) produce, emits what can be placed, takes probe
// snapshots while transactions wait to be shown visible, and sends a heartbeat
// when there is nothing else. It stops taking reads while the merger holds the
// reader (maxQueuedTxBytes). throttled says why the copy waits and waiting why
// the binlog has not started; they go out with every heartbeat.
func (s *Server) mergeLoop(ctx context.Context, m *merger, inputs chan mergeInput, reads <-chan mergeInput, items chan<- *rowliftv1.StreamItem,
	readerAt *gtid.Set, flavor dbconn.Flavor, heartbeat time.Duration, throttled, waiting func() string, log *zap.Logger) error {
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	probe := time.NewTicker(20 * time.Millisecond)
	defer probe.Stop()
	probing := false
	pos := readerAt.String()
	// sentThrottled and sentWaiting are the reasons the applier last got.
	sentThrottled, sentWaiting := "", ""
	for {
		fromReader := reads
		if m.holdsReader(maxQueuedTxBytes) {
			fromReader = nil
		}
		var in mergeInput
		select {
		case <-ctx.Done():
			return ctx.Err()
		case in = <-fromReader:
		case in = <-inputs:
		case <-probe.C:
			if !probing && m.waitsForVisibility() {
				probing = true
				go s.probe(ctx, inputs, flavor)
			}
			continue
		case <-tick.C:
			reason, wait := throttled(), waiting()
			var hb *rowliftv1.Heartbeat
			switch {
			case m.idle():
				hb = &rowliftv1.Heartbeat{Position: &rowliftv1.Position{GtidSet: pos}, SourceTimeUs: time.Now().UnixMicro(), Throttled: reason,
					Waiting: wait}
			case reason != "" || sentThrottled != "" || wait != "" || sentWaiting != "":
				// Items are in flight (a chunk read before the pause, transactions
				// waiting for a snapshot): the reader's position is not one the
				// target may advance to, so this heartbeat carries only the reasons.
				hb = &rowliftv1.Heartbeat{Throttled: reason, Waiting: wait}
			}
			if hb != nil {
				if err := put(ctx, items, &rowliftv1.StreamItem{Item: &rowliftv1.StreamItem_Heartbeat{Heartbeat: hb}}); err != nil {
					return err
				}
				sentThrottled, sentWaiting = reason, wait
			}
			continue
		}
		if err := apply(m, in); err != nil {
			return err
		}
		if in.read != nil {
			pos = in.read.pos.(gtidPos).String()
		}
		if in.probed {
			probing = false
		}
		out, err := m.drain()
		if err != nil {
			return err
		}
		for _, table := range m.voided {
			log.Info("a chunk's snapshot held its table only after a schema change of it: its rows are dropped, and read again "+
				"once the stream reopens after the change", zap.String("table", table))
		}
		m.voided = m.voided[:0]
		for _, item := range out {
			if err := put(ctx, items, item); err != nil {
				return err
			}
		}
	}
}

func apply(m *merger, in mergeInput) error {
	switch {
	case in.read != nil && in.read.tx != nil:
		m.addTx(in.read.tx, in.read.pos)
	case in.read != nil:
		m.readTo(in.read.pos)
	case in.ack != nil:
		err := m.requestChunk(in.request)
		close(in.ack)
		return err
	case in.shared != nil:
		ok := m.canFence(in.table, in.fence)
		in.shared <- ok
		if ok {
			return m.fenceChunk(in.table, in.fence, in.held)
		}
	case in.fence != nil:
		return m.fenceChunk(in.table, in.fence, in.held)
	case in.part != nil:
		return m.addPart(in.part, in.last)
	case in.visible != nil:
		m.observeVisible(in.visible)
	}
	return nil
}

// probe takes a snapshot only to learn what is visible, so transactions of
// tables between chunks need not wait for the next chunk.
func (s *Server) probe(ctx context.Context, inputs chan<- mergeInput, flavor dbconn.Flavor) {
	visible, err := func() (position, error) {
		text, err := s.visible(ctx, flavor)
		if err != nil {
			return nil, err
		}
		set, err := gtid.Parse(text)
		return gtidPos{set}, err
	}()
	if err != nil {
		// The next probe tick tries again; the stream's other connections report
		// a source that is really gone.
		s.log.Warn("probe snapshot failed", zap.Error(err))
		visible = nil
	}
	select {
	case inputs <- mergeInput{probed: true, visible: visible}:
	case <-ctx.Done():
	}
}

func put(ctx context.Context, items chan<- *rowliftv1.StreamItem, item *rowliftv1.StreamItem) error {
	select {
	case items <- item:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// mergeTables describes each streamed table to the merger: how to find its key
// in a row, how keys order on the source, and how far its copy has got.
func (s *Server) mergeTables(ctx context.Context, m *merger, req *rowliftv1.StreamRequest, plans []*tablePlan, log *zap.Logger) error {
	for i, p := range plans {
		keyCols := p.keyIdx
		keyColumns := make([]schema.Column, len(keyCols))
		for i, idx := range keyCols {
			keyColumns[i] = p.cols[idx]
		}
		order, err := keyorder.New(ctx, s.db, keyColumns)
		if err != nil {
			return status.Errorf(codes.Unavailable, "key order of %s: %v", p.table.Name, err)
		}
		if !order.Exact() {
			log.Info("key comparison uses the source server", zap.String("table", p.table.Name), zap.String("why", order.Fallback()))
		}
		t := &mergeTable{
			keyOf: func(r *rowliftv1.Row) [][]byte {
				vals, _ := rowcodec.Values(nil, r)
				key := make([][]byte, len(keyCols))
				for i, idx := range keyCols {
					key[i] = vals[idx]
				}
				return key
			},
			compare:   func(a, b [][]byte) (int, error) { return order.Compare(ctx, a, b) },
			copying:   !req.GetTables()[i].GetCopy().GetDone(),
			verifying: verifies(req.GetTables()[i]),
		}
		if pk := req.GetTables()[i].GetCopy().GetLastPk(); pk != nil {
			t.lastPK = rowKey(pk)
		}
		m.addTable(p.table.Name, t)
	}
	return nil
}
