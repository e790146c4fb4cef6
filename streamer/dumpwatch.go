package streamer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/replication"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/gtid"
)

// Timing of the binlog dump's liveness (see dumpLiveness).
const (
	// binlogHeartbeat is the heartbeat period the dump asks the server for.
	binlogHeartbeat = time.Second
	// binlogMisses is how many heartbeat periods a dump that has shown it
	// sends heartbeats may stay silent before it is reopened.
	binlogMisses = 10
	// processlistEvery is how often the watch reads the dump thread's row.
	processlistEvery = 2 * time.Second
	// locatingShownAfter keeps the status quiet for the short locates of
	// every stream start.
	locatingShownAfter = 2 * time.Second
)

// Dump TCP keepalive: a source host that vanished (power, network) is found
// without any read timeout, even while the server sends nothing by design.
var dumpKeepAlive = net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 4}

// errDumpEnded refuses new connections of a syncer whose dump was declared
// dead: go-mysql's Close would otherwise wait on a server that does not answer
// to KILL the old dump.
var errDumpEnded = errors.New("binlog dump ended: its server does not answer")

// dumpWatch is the I/O around dumpLiveness for one binlog dump: it sees the
// dump's connection and events, reads the dump thread's processlist row, and
// ends the stream when the rule says the dump is dead.
type dumpWatch struct {
	start *gtid.Set
	log   *zap.Logger

	mu     sync.Mutex
	live   *dumpLiveness
	conn   *dumpConn
	connID uint64
	file   string // the binlog file the server reads, from its rotate and heartbeat events
	opened time.Time
	// finding is set once the binlog index is read to learn the file the
	// server scans (MariaDB says nothing until it has found the start),
	// indexFile is that file and indexErr why it is not known.
	finding   bool
	indexFile string
	indexErr  error

	ended atomic.Bool
}

func newDumpWatch(start *gtid.Set, heartbeatLocates bool, log *zap.Logger) *dumpWatch {
	return &dumpWatch{start: start, log: log, live: newDumpLiveness(binlogHeartbeat, binlogMisses, heartbeatLocates), opened: time.Now()}
}

// dial connects the dump (its first connection, which it watches) and any
// later connection of the syncer, with TCP keepalive.
func (w *dumpWatch) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if w.ended.Load() {
		return nil, errDumpEnded
	}
	d := net.Dialer{KeepAliveConfig: dumpKeepAlive}
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conn != nil {
		return conn, nil
	}
	w.conn = &dumpConn{Conn: conn}
	return w.conn, nil
}

// connected is go-mysql's Option hook: it runs on the dump's connection once
// logged in, and gives the ID the processlist shows it under.
func (w *dumpWatch) connected(c *client.Conn) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.connID = uint64(c.GetConnectionID())
	w.live.connected(w.connID)
	return nil
}

// event records what an event read from the dump says about it.
func (w *dumpWatch) event(ev *replication.BinlogEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch e := ev.Event.(type) {
	case *replication.RotateEvent:
		w.file = string(e.NextLogName)
	case *replication.HeartbeatEvent:
		if e.Filename != "" {
			w.file = e.Filename
		}
		w.live.heartbeat()
	case *replication.MariadbGTIDEvent, *replication.GTIDEvent, *replication.GtidTaggedLogEvent:
		w.live.transaction()
	}
}

// waiting is the stream's status while the server has not reached the start
// position, empty otherwise.
func (w *dumpWatch) waiting() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.live.verdict(time.Now()).locating || time.Since(w.opened) < locatingShownAfter {
		return ""
	}
	what := "the server reads the file from its start to find that position before it sends the first event, which takes long " +
		"on a large binlog file or a loaded server; nothing to do, the stream starts by itself once the position is found " +
		"(a smaller max_binlog_size on the source makes this shorter)"
	file := w.file
	if file == "" {
		file = w.indexFile
	}
	switch {
	case file != "":
		return fmt.Sprintf("source is locating GTID %s in binlog %s: %s", w.start, file, what)
	case w.indexErr != nil:
		return fmt.Sprintf("source is locating GTID %s in its binlog (which file is not known: %v; GRANT BINLOG MONITOR ON *.* "+
			"on MariaDB, REPLICATION CLIENT ON *.* on MySQL, to the streamer's source user lets it be shown): %s", w.start, w.indexErr, what)
	}
	return fmt.Sprintf("source is locating GTID %s in its binlog (which file is not known yet): %s", w.start, what)
}

// findFile reads the source's binlog index for the file the server scans.
func (w *dumpWatch) findFile(ctx context.Context, db *sql.DB) {
	file, err := scannedFile(ctx, db, w.start)
	if ctx.Err() != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.indexFile, w.indexErr = file, err
}

// scannedFile is the newest binlog file that begins at or before start: the
// one the server scans for it.
func scannedFile(ctx context.Context, db *sql.DB, start *gtid.Set) (string, error) {
	names, err := firstColumn(ctx, db, "SHOW BINARY LOGS")
	if err != nil {
		return "", fmt.Errorf("list the binlog files: %w", err)
	}
	for i := len(names) - 1; i >= 0; i-- {
		info, err := binlogHeader(ctx, db, names[i])
		if err != nil {
			return "", err
		}
		ok, err := beforeStart(info, start)
		if err != nil {
			return "", err
		}
		if ok {
			return names[i], nil
		}
	}
	return "", errors.New("no binlog file begins at or before it")
}

// binlogHeader is the Info of the event at the start of a binlog file that
// lists the GTIDs before it.
func binlogHeader(ctx context.Context, db *sql.DB, file string) (string, error) {
	rows, err := db.QueryContext(ctx, "SHOW BINLOG EVENTS IN '"+strings.ReplaceAll(file, "'", "''")+"' LIMIT 4")
	if err != nil {
		return "", fmt.Errorf("read the start of binlog %s: %w", file, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return "", fmt.Errorf("read the start of binlog %s: %w", file, err)
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return "", fmt.Errorf("read the start of binlog %s: %w", file, err)
		}
		var typ, info string
		for i, c := range cols {
			switch strings.ToLower(c) {
			case "event_type":
				typ = vals[i].String
			case "info":
				info = vals[i].String
			}
		}
		if typ == "Gtid_list" || typ == "Previous_gtids" {
			return info, nil
		}
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("read the start of binlog %s: %w", file, err)
	}
	return "", fmt.Errorf("binlog %s has no Gtid_list or Previous_gtids event at its start", file)
}

// firstColumn runs a statement and returns the first column of its rows.
func firstColumn(ctx context.Context, db *sql.DB, query string) ([]string, error) {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	ptrs := make([]any, len(cols))
	var first string
	ptrs[0] = &first
	for i := 1; i < len(ptrs); i++ {
		ptrs[i] = new(sql.RawBytes)
	}
	var out []string
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		out = append(out, first)
	}
	return out, rows.Err()
}

// run checks the dump twice per heartbeat period until ctx ends, and returns
// an Unavailable error, which the applier retries, once the dump is dead.
func (w *dumpWatch) run(ctx context.Context, db *sql.DB) error {
	go w.pollProcesslist(ctx, db)
	tick := time.NewTicker(binlogHeartbeat / 2)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case now := <-tick.C:
			w.mu.Lock()
			if w.conn != nil {
				w.live.reading(w.conn.waitingSince())
			}
			v := w.live.verdict(now)
			if v.locating && w.file == "" && !w.finding && now.Sub(w.opened) >= locatingShownAfter {
				w.finding = true
				go w.findFile(ctx, db)
			}
			w.mu.Unlock()
			if v.dead != "" {
				w.ended.Store(true)
				w.log.Warn("binlog dump is dead", zap.String("why", v.dead))
				return status.Errorf(codes.Unavailable, "binlog dump from %s: %s", w.start, v.dead)
			}
		}
	}
}

// pollProcesslist feeds the dump thread's processlist row to the rule. A read
// that fails or hangs (a stopped server) says nothing either way.
func (w *dumpWatch) pollProcesslist(ctx context.Context, db *sql.DB) {
	tick := time.NewTicker(processlistEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		w.mu.Lock()
		id := w.connID
		w.mu.Unlock()
		if id == 0 {
			continue
		}
		var state string
		err := db.QueryRowContext(ctx, "SELECT IFNULL(STATE, '') FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&state)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			if ctx.Err() == nil {
				w.log.Debug("read the binlog dump's processlist row", zap.Error(err))
			}
			continue
		}
		w.mu.Lock()
		w.live.processlist(err == nil, state)
		w.mu.Unlock()
	}
}

// dumpConn is the dump's network connection; it records since when the
// client waits on a read, so that only time spent listening counts as the
// server's silence.
type dumpConn struct {
	net.Conn
	// readSince is the start of the outstanding read in Unix nanoseconds; zero
	// when none is outstanding.
	readSince atomic.Int64
}

func (c *dumpConn) Read(b []byte) (int, error) {
	c.readSince.Store(time.Now().UnixNano())
	n, err := c.Conn.Read(b)
	c.readSince.Store(0)
	return n, err
}

// waitingSince is when the outstanding read began, zero when there is none.
func (c *dumpConn) waitingSince() time.Time {
	if ns := c.readSince.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}
