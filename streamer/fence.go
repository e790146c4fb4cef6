package streamer

import (
	"context"
	"database/sql"
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
	return &lockFencer{flavor: flavor, db: db, database: database, stats: stats}
}

// lockFencer is the fence of both flavors: a second connection holds LOCK
// TABLES t READ while it reads the source's GTID position and the chunk's
// connection opens its snapshot. The lock waits until every transaction that
// wrote t has finished committing (a writer holds its metadata lock until
// then), and no transaction writes t until UNLOCK TABLES: the snapshot holds
// exactly the transactions of t in the position. MySQL has no lock-free
// snapshot position, and MariaDB's (binlog_snapshot_position) can run ahead
// of the snapshot it belongs to: under concurrent commits a snapshot misses
// transactions its position names (TestFenceIsExactUnderConcurrentCommits),
// and a chunk read in it misses their changes for good. The two connections
// are needed because START TRANSACTION releases a session's table locks. The
// cost to the source is this lock, held for three short statements per
// chunk; writers of t queue behind it for that long, and behind a long
// transaction on t that the lock itself waits for, at most lockWait per try.
type lockFencer struct {
	flavor   dbconn.Flavor
	db       *sql.DB
	database string
	stats    *fenceStats
	// lock is the connection that takes the table locks, opened at the first
	// chunk and kept for the row streamer's life.
	lock *sql.Conn
}

// lockWait bounds one try at a chunk's table lock: while the lock waits for a
// long transaction on the table, new writers of the table wait behind it, so a
// try gives up quickly and the next one comes after a pause.
const lockWait = time.Second

func (f *lockFencer) begin(ctx context.Context, conn *sql.Conn, table string) (*rowliftv1.Position, error) {
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, 5*time.Second) {
		pos, err := f.tryBegin(ctx, conn, table)
		if err == nil || !isLockWaitTimeout(err) {
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

func (f *lockFencer) tryBegin(ctx context.Context, conn *sql.Conn, table string) (*rowliftv1.Position, error) {
	if f.lock == nil {
		lock, err := f.db.Conn(ctx)
		if err != nil {
			return nil, fmt.Errorf("open the fence's lock connection: %w", err)
		}
		if _, err := lock.ExecContext(ctx, fmt.Sprintf("SET SESSION lock_wait_timeout = %d", int(lockWait/time.Second))); err != nil {
			lock.Close()
			return nil, fmt.Errorf("set the fence's lock wait: %w", err)
		}
		f.lock = lock
	}
	asked := time.Now()
	if _, err := f.lock.ExecContext(ctx, "LOCK TABLES "+rowcodec.QualifiedIdent(f.database, table)+" READ"); err != nil {
		if isLockWaitTimeout(err) {
			return nil, err
		}
		g := lockGrant(f.database)
		if isMySQLError(err, tableAccessDenied) {
			// LOCK TABLES ... READ needs SELECT on the table too.
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
