package streamer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/grants"
	"github.com/rowlift/rowlift/internal/rowcodec"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// fencer opens chunk snapshots and tells their fences (docs/design.md, "How
// each flavor gets F").
type fencer interface {
	// begin opens a consistent snapshot on conn for a chunk of table and
	// returns its fence: the snapshot holds every transaction of the table at
	// or before it, and none after.
	begin(ctx context.Context, conn *sql.Conn, table string) (*rowliftv1.Position, error)
	// hold opens table in the snapshot begun on conn, which then keeps its
	// metadata lock, and returns the source's position once it has: a schema
	// change of the table is either in that position or waits for the
	// snapshot's end. One in it but not in the fence (the lock is released
	// before the snapshot holds the table) may have swapped another table in,
	// whose rows the snapshot would read (merger.voids).
	hold(ctx context.Context, conn *sql.Conn, table string) (string, error)
	// visible returns the source's position, for the stream's start and the
	// merger's probes. On MySQL every transaction in it is visible to later
	// snapshots; on MariaDB some may still be committing, which no chunk
	// misses: begin's table lock waits for every writer of its table.
	visible(ctx context.Context, conn *sql.Conn) (string, error)
	// close releases what the fencer holds on the source.
	close()
}

// newFencer returns the fence of one row streamer; db gives it its second
// connection.
func newFencer(flavor dbconn.Flavor, db *sql.DB, database string, stats *fenceStats) fencer {
	return &lockFencer{flavor: flavor, db: db, database: database, stats: stats, budget: lockBudget, wait: lockWait}
}

// lockFencer is the fence of both flavors: a second connection holds LOCK
// TABLES t WRITE while it reads the source's GTID position and the chunk's
// connection opens its snapshot. The lock waits until every transaction that
// wrote t has finished committing (a writer holds its metadata lock until
// then), and no transaction writes t until UNLOCK TABLES: the snapshot holds
// exactly the transactions of t in the position. MySQL has no lock-free
// snapshot position, and MariaDB's (binlog_snapshot_position) can run ahead
// of the snapshot it belongs to: under concurrent commits a snapshot misses
// transactions its position names (TestFenceIsExactUnderConcurrentCommits),
// and a chunk read in it misses their changes for good. The two connections
// are needed because START TRANSACTION releases a session's table locks.
//
// A WRITE lock, not a READ one: a pending READ lock lets new writers of t
// through, so under constant writes it waits for a moment when no
// transaction on t is open, which at 1,650 transactions/s came in 12 of 33
// tries of a second each. A pending WRITE lock holds new writers back (not
// readers), so it is granted as soon as the transactions open on t commit,
// usually within milliseconds. Writers wait for that and for the three short
// statements the lock is held. A transaction on t that stays open would hold
// them back as long as the lock waits, so a try that is not granted within
// budget is withdrawn (KILL QUERY of the lock's statement, from another
// connection of the same user) and tried again after a pause: the writers
// wait at most budget per try.
type lockFencer struct {
	flavor   dbconn.Flavor
	db       *sql.DB
	database string
	stats    *fenceStats
	// budget is how long one try at the lock may wait (lockBudget), and wait
	// the server's bound on it (lockWait).
	budget, wait time.Duration
	// lock is the connection that takes the table locks, opened at the first
	// chunk and kept for the row streamer's life; lockID is its connection ID.
	lock   *sql.Conn
	lockID uint64
	// readLock: the source is read-only (a replica), where LOCK TABLES ...
	// WRITE needs SUPER; a READ lock holds its writer, the replication
	// applier, back as well, only without getting ahead of it.
	readLock bool
}

const (
	// lockBudget bounds how long one try at a chunk's table lock holds the
	// table's writers back: enough for the transactions open on the table
	// to commit under load, short beside an application's timeouts.
	lockBudget = 50 * time.Millisecond
	// lockWait is the server's own bound on a try (lock_wait_timeout, whole
	// seconds), should the withdrawal fail.
	lockWait = time.Second
	// maxLockPause is the longest pause between tries: while a long
	// transaction holds the table, writers are held back budget per pause.
	maxLockPause = time.Second
)

func (f *lockFencer) begin(ctx context.Context, conn *sql.Conn, table string) (*rowliftv1.Position, error) {
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, maxLockPause) {
		pos, err := f.tryBegin(ctx, conn, table)
		if !errors.Is(err, errLockNotGranted) {
			return pos, err
		}
		f.stats.timedOut()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pause):
		}
	}
}

// errLockNotGranted is a try at the chunk's table lock that was not granted
// within its budget.
var errLockNotGranted = errors.New("the fence's table lock was not granted within its budget")

func (f *lockFencer) tryBegin(ctx context.Context, conn *sql.Conn, table string) (*rowliftv1.Position, error) {
	if f.lock == nil {
		lock, err := f.db.Conn(ctx)
		if err != nil {
			return nil, fmt.Errorf("open the fence's lock connection: %w", err)
		}
		if _, err := lock.ExecContext(ctx, fmt.Sprintf("SET SESSION lock_wait_timeout = %d", int(f.wait/time.Second))); err != nil {
			lock.Close()
			return nil, fmt.Errorf("set the fence's lock wait: %w", err)
		}
		if err := lock.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&f.lockID); err != nil {
			lock.Close()
			return nil, fmt.Errorf("the fence's lock connection: %w", err)
		}
		f.lock = lock
	}
	asked := time.Now()
	withdrawn, err := f.lockWithin(ctx, table)
	switch {
	case err == nil && withdrawn:
		// Granted as the withdrawal went out: the KILL may still hit the next
		// statement, so this try ends here. An unlock that fails closes the
		// connection, which releases the lock; the next try opens another.
		_ = f.unlock(ctx)
		return nil, errLockNotGranted
	case err != nil && (withdrawn || isLockWaitTimeout(err)) && ctx.Err() == nil:
		return nil, errLockNotGranted
	case err != nil && isMySQLError(err, readOnlyServer) && !f.readLock:
		f.readLock = true
		return f.tryBegin(ctx, conn, table)
	case err != nil:
		g := lockGrant(f.database)
		if isMySQLError(err, tableAccessDenied) {
			// LOCK TABLES needs SELECT on the table too.
			g = selectGrant(f.database, table)
		}
		err = grants.Refused(ctx, f.lock, "source", err, g)
		f.drop()
		return nil, fmt.Errorf("lock %s for the chunk's fence: %w", table, err)
	}
	locked := time.Now()
	pos, err := f.fence(ctx, conn)
	if uerr := f.unlock(ctx); err == nil {
		err = uerr
	}
	f.stats.record(locked.Sub(asked), time.Since(locked))
	if err != nil {
		return nil, err
	}
	return pos, nil
}

// lockWithin asks for the table's lock and withdraws the request once
// f.budget has passed: withdrawn reports that the KILL QUERY went out, and it
// has landed when lockWithin returns, so it cannot hit a later statement
// unseen.
func (f *lockFencer) lockWithin(ctx context.Context, table string) (withdrawn bool, err error) {
	done := make(chan struct{})
	timer := time.AfterFunc(f.budget, func() {
		defer close(done)
		// Its own connection's query: a user may kill those without PROCESS.
		// A failed kill leaves the try to lock_wait_timeout.
		_, _ = f.db.ExecContext(context.WithoutCancel(ctx), fmt.Sprintf("KILL QUERY %d", f.lockID))
	})
	mode := " WRITE"
	if f.readLock {
		mode = " READ"
	}
	_, err = f.lock.ExecContext(ctx, "LOCK TABLES "+rowcodec.QualifiedIdent(f.database, table)+mode)
	if !timer.Stop() {
		<-done
		return true, err
	}
	return false, err
}

// fence reads the position and opens the chunk's snapshot while the table is
// locked.
func (f *lockFencer) fence(ctx context.Context, conn *sql.Conn) (*rowliftv1.Position, error) {
	set, err := f.flavor.Position(ctx, f.lock)
	if err != nil {
		return nil, fmt.Errorf("the chunk's fence: %w", err)
	}
	if _, err := conn.ExecContext(ctx, "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"); err != nil {
		return nil, fmt.Errorf("start snapshot: %w", err)
	}
	return &rowliftv1.Position{GtidSet: set}, nil
}

func (f *lockFencer) hold(ctx context.Context, conn *sql.Conn, table string) (string, error) {
	// The statement opens its tables, taking their metadata locks, before it
	// reads the variable.
	q := fmt.Sprintf("SELECT %s, (SELECT 1 FROM %s LIMIT 0)", f.flavor.PositionVar(), rowcodec.QualifiedIdent(f.database, table))
	var pos string
	var none sql.NullInt64
	if err := conn.QueryRowContext(ctx, q).Scan(&pos, &none); err != nil {
		return "", fmt.Errorf("hold %s for the chunk: %w", table, err)
	}
	return dbconn.CleanPosition(pos), nil
}

// unlock ends the lock even when ctx is done: a connection must not go back
// to the pool holding table locks. A connection that cannot unlock is closed.
func (f *lockFencer) unlock(ctx context.Context) error {
	if _, err := f.lock.ExecContext(context.WithoutCancel(ctx), "UNLOCK TABLES"); err != nil {
		f.drop()
		return fmt.Errorf("unlock after the chunk's fence: %w", err)
	}
	return nil
}

// drop closes the lock connection; the next chunk opens another.
func (f *lockFencer) drop() {
	if f.lock != nil {
		discard(f.lock)
		f.lock = nil
	}
}

// visible is MySQL's gtid_executed, to which a GTID is added only after the
// engine commit, or MariaDB's gtid_binlog_pos, to which it is added when the
// transaction is written to the binlog, just before.
func (f *lockFencer) visible(ctx context.Context, conn *sql.Conn) (string, error) {
	return f.flavor.Position(ctx, conn)
}

func (f *lockFencer) close() {
	if f.lock != nil {
		f.lock.Close()
		f.lock = nil
	}
}

func isLockWaitTimeout(err error) bool { return isMySQLError(err, lockWaitTimeout) }

// fenceStats sums what the fence costs the source, for the stream's log
// and the benchmarks: how long locks waited and were held.
type fenceStats struct {
	mu       sync.Mutex
	chunks   int
	timeouts int
	wait     time.Duration
	held     time.Duration
	maxHeld  time.Duration
}

func (s *fenceStats) record(wait, held time.Duration) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.chunks++
	s.wait += wait
	s.held += held
	s.maxHeld = max(s.maxHeld, held)
}

func (s *fenceStats) timedOut() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.timeouts++
	s.mu.Unlock()
}

// newFencers makes a fencer per row streamer, all summing into stats.
func newFencers(flavor dbconn.Flavor, db *sql.DB, database string, stats *fenceStats) func() fencer {
	return func() fencer { return newFencer(flavor, db, database, stats) }
}

// fields are the stats as log fields, none before the first chunk.
func (s *fenceStats) fields() []zap.Field {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.chunks == 0 {
		return nil
	}
	return []zap.Field{zap.Int("fence_locks", s.chunks), zap.Int("fence_lock_timeouts", s.timeouts),
		zap.Duration("fence_lock_wait", s.wait), zap.Duration("fence_lock_held", s.held),
		zap.Duration("fence_lock_held_max", s.maxHeld)}
}
