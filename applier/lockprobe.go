package applier

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"
)

// lockProbe asks the target which connections wait for locks held by which,
// the evidence the stuck-group rule (schedule.Unstick) decides on. What each
// flavor offers:
//
//   - MariaDB 10.11: information_schema.INNODB_TRX joined through
//     INNODB_LOCK_WAITS names the holder of every wait (PROCESS privilege).
//   - MySQL 8.4/9.x with performance_schema on (its default):
//     performance_schema.data_lock_waits joined to threads names them too
//     (SELECT on performance_schema), read live.
//   - MySQL with performance_schema off: information_schema.INNODB_TRX shows
//     who waits (trx_state LOCK WAIT) but not for whom (PROCESS privilege),
//     and nothing at all while some statement's text is not valid utf8mb3.
//
// Metadata lock waits come from SHOW PROCESSLIST on every flavor.
//
// The information_schema tables are a snapshot the server refreshes only when
// it was last read over 100 ms ago (both flavors), and reads within that keep
// the old one, however old: each probe names itself in a comment and trusts
// the snapshot only if it shows its own transaction running that very query.
// A target user without the privilege gets no probe: the rule then falls back
// to timing, which the applier logs once with the GRANT that avoids it.
type lockProbe struct {
	conn *sql.Conn
	// liveWaits: the answer is read live (performance_schema), with no
	// snapshot to check.
	liveWaits bool
	// named: the answer names the holders.
	named bool
	// every is the least time between probes: an information_schema snapshot
	// read again sooner is not refreshed.
	every time.Duration
	nonce uint64
	last  time.Time
}

// infoSchemaRefresh is how long the servers keep an information_schema
// INNODB_TRX snapshot after it was read (CACHE_MIN_IDLE_TIME_US in both).
const infoSchemaRefresh = 100 * time.Millisecond

// newLockProbe opens a connection of its own and tries one probe; it returns
// nil, and says why in the log, when the target user may not see lock waits.
func newLockProbe(ctx context.Context, db *sql.DB, log *zap.Logger) (*lockProbe, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock probe connection: %w", err)
	}
	p := &lockProbe{conn: conn, named: true, every: infoSchemaRefresh + infoSchemaRefresh/2}
	var version string
	var perfSchema int
	if err := conn.QueryRowContext(ctx, "SELECT VERSION(), @@performance_schema").Scan(&version, &perfSchema); err != nil {
		conn.Close()
		return nil, fmt.Errorf("lock probe: read the target's version: %w", err)
	}
	if !strings.Contains(version, "MariaDB") {
		p.liveWaits = perfSchema == 1
		p.named = p.liveWaits
	}
	if p.liveWaits {
		p.every = 0
	}
	if _, _, err := p.waits(ctx); err != nil {
		conn.Close()
		if denied(err) {
			grant := "GRANT PROCESS ON *.* TO <the applier's user>"
			if p.liveWaits {
				grant = "GRANT SELECT ON performance_schema.* TO <the applier's user>"
			}
			log.Info("the target user cannot see lock waits: a replay group that runs long is taken for stuck by timing "+
				"(a multiple of recent groups' execution times) instead of by the server's evidence", zap.String("fix", grant), zap.Error(err))
			return nil, nil
		}
		return nil, fmt.Errorf("lock probe: %w", err)
	}
	if !p.named {
		log.Info("performance_schema is off on the target: a replay group found waiting for a lock rolls back every later " +
			"group waiting to commit, as the server cannot name the lock's holder")
	}
	return p, nil
}

// denied reports an error of a missing privilege.
func denied(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1227 || me.Number == 1142 || me.Number == 1044 || me.Number == 1143)
}

// due reports whether a probe now would be answered afresh.
func (p *lockProbe) due(now time.Time) bool { return now.Sub(p.last) >= p.every }

// waits returns, for each connection waiting for a lock, the connections
// holding it (0: one the server cannot name); known is false when the
// server's snapshot was stale.
func (p *lockProbe) waits(ctx context.Context) (waits map[uint64][]uint64, known bool, err error) {
	p.last = time.Now()
	if p.liveWaits {
		waits, _, err = p.read(ctx, "SELECT IFNULL(r.PROCESSLIST_ID, 0), IFNULL(b.PROCESSLIST_ID, 0), 1, 0 FROM performance_schema.data_lock_waits w "+
			"LEFT JOIN performance_schema.threads r ON r.THREAD_ID = w.REQUESTING_THREAD_ID "+
			"LEFT JOIN performance_schema.threads b ON b.THREAD_ID = w.BLOCKING_THREAD_ID")
		if err == nil {
			err = p.metadataWaits(ctx, waits)
		}
		return waits, err == nil, err
	}
	p.nonce++
	mark := fmt.Sprintf("rowlift lock probe %d */", p.nonce)
	holder, join := "0", ""
	if p.named {
		holder = "IFNULL(b.trx_mysql_thread_id, 0)"
		join = "LEFT JOIN information_schema.INNODB_LOCK_WAITS w ON w.requesting_trx_id = r.trx_id " +
			"LEFT JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id "
	}
	// The probe's own transaction must be running for the snapshot to show it.
	if _, err := p.conn.ExecContext(ctx, "START TRANSACTION WITH CONSISTENT SNAPSHOT"); err != nil {
		return nil, false, fmt.Errorf("lock probe: %w", err)
	}
	defer p.conn.ExecContext(context.WithoutCancel(ctx), "COMMIT") //nolint:errcheck // a read-only transaction; the connection goes if this fails
	waits, fresh, err := p.read(ctx, "SELECT /* "+mark+" r.trx_mysql_thread_id, "+holder+", r.trx_state = 'LOCK WAIT', "+
		"r.trx_mysql_thread_id = CONNECTION_ID() AND IFNULL(r.trx_query LIKE '%"+mark+"%', 0) "+
		"FROM information_schema.INNODB_TRX r "+join+"WHERE r.trx_state = 'LOCK WAIT' OR r.trx_mysql_thread_id = CONNECTION_ID()")
	if isMySQLError(err, cannotConvertString) {
		// MySQL fills INNODB_TRX whole, trx_query included, into utf8mb3: while
		// some transaction runs a statement of binary data or 4-byte UTF-8 the
		// table cannot be read at all. The server cannot tell, this time.
		return nil, false, nil
	}
	if err == nil {
		err = p.metadataWaits(ctx, waits)
	}
	return waits, fresh, err
}

// cannotConvertString is MySQL's ER_CANNOT_CONVERT_STRING, which reading a
// statement's text into an information_schema table fails with.
const cannotConvertString = 3854

// metadataWaits adds to waits the connections waiting for a table's metadata
// lock, with a holder the server does not name. InnoDB's lock tables do not
// show them, and a commit-order deadlock can run through one: an ALTER (the
// deferred keys an applier adds, or an operator's) queues for the table's
// exclusive lock behind a later replay group that wrote the table and waits
// for its commit turn, and the head group that writes the table next queues
// behind the ALTER. Rolling back the later groups lets both through.
//
// It reads SHOW PROCESSLIST, not information_schema.PROCESSLIST: MySQL copies
// every statement's text into that table's utf8mb3 column, and one holding
// binary data or 4-byte UTF-8 fails the whole query with error 3854.
func (p *lockProbe) metadataWaits(ctx context.Context, waits map[uint64][]uint64) error {
	rows, err := p.conn.QueryContext(ctx, "SHOW PROCESSLIST")
	if err != nil {
		return fmt.Errorf("lock probe: %w", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return fmt.Errorf("lock probe: %w", err)
	}
	id, state := slices.Index(cols, "Id"), slices.Index(cols, "State")
	if id < 0 || state < 0 {
		return fmt.Errorf("lock probe: SHOW PROCESSLIST has no Id or State column (it has %s)", strings.Join(cols, ", "))
	}
	vals := make([]sql.RawBytes, len(cols))
	dest := make([]any, len(cols))
	for i := range vals {
		dest[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return fmt.Errorf("lock probe: %w", err)
		}
		if string(vals[state]) != "Waiting for table metadata lock" {
			continue
		}
		waiter, err := strconv.ParseUint(string(vals[id]), 10, 64)
		if err != nil {
			return fmt.Errorf("lock probe: SHOW PROCESSLIST Id %q: %w", vals[id], err)
		}
		if _, ok := waits[waiter]; !ok {
			waits[waiter] = []uint64{0}
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("lock probe: %w", err)
	}
	return nil
}

// read runs a probe query of rows (waiter, holder, waiting, self) and returns
// the waits; self marks the probe's own transaction running the query, which
// proves a snapshot fresh.
func (p *lockProbe) read(ctx context.Context, query string) (waits map[uint64][]uint64, sawSelf bool, err error) {
	rows, err := p.conn.QueryContext(ctx, query)
	if err != nil {
		return nil, false, fmt.Errorf("lock probe: %w", err)
	}
	defer rows.Close()
	waits = map[uint64][]uint64{}
	for rows.Next() {
		var waiter, holder uint64
		var waiting, self bool
		if err := rows.Scan(&waiter, &holder, &waiting, &self); err != nil {
			return nil, false, fmt.Errorf("lock probe: %w", err)
		}
		sawSelf = sawSelf || self
		if waiting && waiter != 0 && waiter != holder {
			waits[waiter] = append(waits[waiter], holder)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("lock probe: %w", err)
	}
	return waits, sawSelf, nil
}

func (p *lockProbe) close() { p.conn.Close() }
