package streamer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/grants"
	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// fenceSource starts a server of flavor with d.t (id, v) holding rows 1 to 3,
// and returns a source pool on it and an admin pool.
func fenceSource(t *testing.T, flavor sandbox.Flavor) (*sandbox.Server, *sql.DB, *sql.DB) {
	t.Helper()
	srv := sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
	admin := sandboxtest.Open(t, srv, "")
	sandboxtest.Exec(t, admin, "CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY, v INT)", "INSERT INTO d.t VALUES (1, 1), (2, 2), (3, 3)")
	db, _, err := dbconn.Open(srv.DSN(""), dbconn.Source)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return srv, db, admin
}

// chunkRows reads d.t's ids in the snapshot open on conn.
func chunkRows(t *testing.T, conn *sql.Conn) []int {
	t.Helper()
	rows, err := conn.QueryContext(context.Background(), "SELECT id FROM d.t ORDER BY id")
	require.NoError(t, err)
	defer rows.Close()
	var ids []int
	for rows.Next() {
		var id int
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	return ids
}

// TestLockFenceIsExact: the fence holds every transaction of the table
// committed before the chunk and none after, and the snapshot agrees with it.
func TestLockFenceIsExact(t *testing.T) {
	sandboxtest.EachFlavor(t, testLockFenceIsExact)
}

func testLockFenceIsExact(t *testing.T, flavor sandbox.Flavor) {
	_, db, admin := fenceSource(t, flavor)
	ctx := context.Background()
	sandboxtest.Exec(t, admin, "INSERT INTO d.t VALUES (4, 4)")
	before := gtidSet(t, serverPosition(t, admin))
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	stats := &fenceStats{}
	f := newFencer(dbconn.Flavor(flavor), db, "d", stats)
	defer f.close()
	fence, err := f.begin(ctx, conn, "t")
	require.NoError(t, err)
	sandboxtest.Exec(t, admin, "INSERT INTO d.t VALUES (5, 5)")
	after := gtidSet(t, serverPosition(t, admin))

	got := gtidSet(t, fence.GetGtidSet())
	require.True(t, got.Contains(before), "fence %s holds the insert of 4 (%s)", got, before)
	require.False(t, got.Contains(after), "fence %s holds the insert of 5 made after it (%s)", got, after)
	require.Equal(t, []int{1, 2, 3, 4}, chunkRows(t, conn), "the snapshot holds what the fence says")
	_, err = conn.ExecContext(ctx, "COMMIT")
	require.NoError(t, err)
	require.Equal(t, 1, stats.chunks)
	require.Positive(t, stats.held)
}

// TestLockFenceHoldsTheTable: an online schema change's rename that lands
// between a chunk's fence and the moment its snapshot opens the table swaps
// another table in under the snapshot. hold's position then holds the rename
// and the fence does not, which is how the merger knows to drop the chunk;
// once held, a rename of the table waits for the snapshot's end while
// writers of the table go on.
func TestLockFenceHoldsTheTable(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		_, db, admin := fenceSource(t, flavor)
		ctx := context.Background()
		f := newFencer(dbconn.Flavor(flavor), db, "d", nil)
		defer f.close()
		conn, err := db.Conn(ctx)
		require.NoError(t, err)
		defer conn.Close()

		fence, err := f.begin(ctx, conn, "t")
		require.NoError(t, err)
		sandboxtest.Exec(t, admin, "CREATE TABLE d._t_new LIKE d.t", "INSERT INTO d._t_new VALUES (7, 7)",
			"RENAME TABLE d.t TO d._t_old, d._t_new TO d.t")
		swapped := gtidSet(t, serverPosition(t, admin))
		held, err := f.hold(ctx, conn, "t")
		require.NoError(t, err)
		require.False(t, gtidSet(t, fence.GetGtidSet()).Contains(swapped), "the fence is before the swap")
		require.True(t, gtidSet(t, held).Contains(swapped), "the position once held (%s) holds the swap (%s)", held, swapped)
		if rows, err := conn.QueryContext(ctx, "SELECT id FROM d.t"); err == nil {
			var ids []int
			for rows.Next() {
				var id int
				require.NoError(t, rows.Scan(&id))
				ids = append(ids, id)
			}
			rows.Close()
			require.NotEqual(t, []int{1, 2, 3}, ids, "the snapshot reads the table swapped in, not the one at its fence")
		}
		_, err = conn.ExecContext(ctx, "COMMIT")
		require.NoError(t, err)

		_, err = f.begin(ctx, conn, "t")
		require.NoError(t, err)
		_, err = f.hold(ctx, conn, "t")
		require.NoError(t, err)
		w, err := admin.Conn(ctx)
		require.NoError(t, err)
		defer w.Close()
		_, err = w.ExecContext(ctx, "SET SESSION lock_wait_timeout = 1")
		require.NoError(t, err)
		_, err = w.ExecContext(ctx, "UPDATE d.t SET v = v + 1")
		require.NoError(t, err, "a writer of the held table waited")
		_, err = w.ExecContext(ctx, "RENAME TABLE d.t TO d._t_del, d._t_old TO d.t")
		require.True(t, isLockWaitTimeout(err), "a rename of the held table must wait for the snapshot: %v", err)
		_, err = conn.ExecContext(ctx, "COMMIT")
		require.NoError(t, err)
		_, err = w.ExecContext(ctx, "RENAME TABLE d.t TO d._t_del, d._t_old TO d.t")
		require.NoError(t, err)
	})
}

// TestLockFenceReleasesTheTable: once a chunk's snapshot is open, writers of
// the table do not wait for the chunk (a writer that had to would time out).
func TestLockFenceReleasesTheTable(t *testing.T) {
	sandboxtest.EachFlavor(t, testLockFenceReleasesTheTable)
}

func testLockFenceReleasesTheTable(t *testing.T, flavor sandbox.Flavor) {
	_, db, admin := fenceSource(t, flavor)
	ctx := context.Background()
	f := newFencer(dbconn.Flavor(flavor), db, "d", nil)
	defer f.close()
	for i := range 3 {
		conn, err := db.Conn(ctx)
		require.NoError(t, err)
		_, err = f.begin(ctx, conn, "t")
		require.NoError(t, err)
		w, err := admin.Conn(ctx)
		require.NoError(t, err)
		_, err = w.ExecContext(ctx, "SET SESSION lock_wait_timeout = 1")
		require.NoError(t, err)
		_, err = w.ExecContext(ctx, "UPDATE d.t SET v = v + 1 WHERE id = 1")
		require.NoError(t, err, "chunk %d: a writer of the table waited for the fence's lock", i)
		w.Close()
		_, err = conn.ExecContext(ctx, "COMMIT")
		require.NoError(t, err)
		conn.Close()
	}
}

// TestLockFenceWaitsForOpenTransactions: a transaction that wrote the table and
// has not committed keeps the fence from being taken (its lock tries time out
// and are retried), and once it commits, the fence and the snapshot hold it.
func TestLockFenceWaitsForOpenTransactions(t *testing.T) {
	sandboxtest.EachFlavor(t, testLockFenceWaitsForOpenTransactions)
}

func testLockFenceWaitsForOpenTransactions(t *testing.T, flavor sandbox.Flavor) {
	fb := startFenceBehindOpenInsert(t, flavor, lockWait)
	for {
		fb.stats.mu.Lock()
		timeouts := fb.stats.timeouts
		fb.stats.mu.Unlock()
		if timeouts > 0 {
			break
		}
		fb.notTaken(t)
		time.Sleep(20 * time.Millisecond)
	}
	fb.commitAndCheck(t)
}

// fenceBehind is a chunk's fence begun while a transaction that inserted row
// 9 of d.t is open.
type fenceBehind struct {
	admin *sql.DB
	open  *sql.Conn // the open transaction's
	conn  *sql.Conn // the chunk's
	f     *lockFencer
	stats *fenceStats
	done  chan fenceResult
}

type fenceResult struct {
	fence string
	err   error
}

// startFenceBehindOpenInsert opens the transaction and begins the fence, whose
// lock waits at most wait per try on the server's side, in the background.
func startFenceBehindOpenInsert(t *testing.T, flavor sandbox.Flavor, wait time.Duration) *fenceBehind {
	_, db, admin := fenceSource(t, flavor)
	ctx := context.Background()
	fb := &fenceBehind{admin: admin, stats: &fenceStats{}, done: make(chan fenceResult, 1)}
	var err error
	fb.open, err = admin.Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { fb.open.Close() })
	_, err = fb.open.ExecContext(ctx, "BEGIN")
	require.NoError(t, err)
	_, err = fb.open.ExecContext(ctx, "INSERT INTO d.t VALUES (9, 9)")
	require.NoError(t, err)
	fb.conn, err = db.Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { fb.conn.Close() })
	fb.f = newFencer(dbconn.Flavor(flavor), db, "d", fb.stats).(*lockFencer)
	fb.f.wait = wait
	t.Cleanup(fb.f.close)
	// Registered after f.close, so it runs first if the test fails: the fence
	// is then granted, and its try returns.
	t.Cleanup(func() { fb.open.ExecContext(ctx, "ROLLBACK") }) //nolint:errcheck // a ROLLBACK after COMMIT is a no-op
	go func() {
		pos, err := fb.f.begin(ctx, fb.conn, "t")
		fb.done <- fenceResult{pos.GetGtidSet(), err}
	}()
	return fb
}

// notTaken fails the test if the fence was taken.
func (fb *fenceBehind) notTaken(t *testing.T) {
	t.Helper()
	select {
	case r := <-fb.done:
		t.Fatalf("the fence was taken while a transaction on the table was open: %+v", r)
	default:
	}
}

// commitAndCheck commits the open transaction and checks that the fence is
// then taken, covers it, and that the chunk's snapshot holds its row.
func (fb *fenceBehind) commitAndCheck(t *testing.T) {
	t.Helper()
	_, err := fb.open.ExecContext(context.Background(), "COMMIT")
	require.NoError(t, err)
	committed := gtidSet(t, serverPosition(t, fb.admin))
	r := <-fb.done
	require.NoError(t, r.err)
	require.True(t, gtidSet(t, r.fence).Contains(committed))
	require.Equal(t, []int{1, 2, 3, 9}, chunkRows(t, fb.conn))
}

// TestLockFenceHoldsWritersBackOnlyItsBudget: a pending write lock holds new
// writers of the table back, so a try that a long open transaction keeps
// from being granted is withdrawn after its budget, and the writers go on
// while the fence tries again. With the server's own bound on the try set to
// an hour, only the withdrawal can let a writer through before the open
// transaction commits; afterwards the fence is taken and holds it.
func TestLockFenceHoldsWritersBackOnlyItsBudget(t *testing.T) {
	sandboxtest.EachFlavor(t, testLockFenceHoldsWritersBackOnlyItsBudget)
}

func testLockFenceHoldsWritersBackOnlyItsBudget(t *testing.T, flavor sandbox.Flavor) {
	fb := startFenceBehindOpenInsert(t, flavor, time.Hour)
	ctx := context.Background()
	for i := range 3 {
		require.Eventually(t, func() bool {
			fb.stats.mu.Lock()
			defer fb.stats.mu.Unlock()
			return fb.stats.timeouts > i
		}, time.Minute, 5*time.Millisecond, "try %d at the lock was not withdrawn", i+1)
		w, err := fb.admin.Conn(ctx)
		require.NoError(t, err)
		_, err = w.ExecContext(ctx, "SET SESSION lock_wait_timeout = 3600")
		require.NoError(t, err)
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		_, err = w.ExecContext(wctx, "UPDATE d.t SET v = v + 1 WHERE id = 1")
		cancel()
		require.NoError(t, err, "a writer waited for a try at the lock that was never withdrawn")
		w.Close()
	}
	fb.notTaken(t)
	fb.commitAndCheck(t)
}

// TestLockFenceNeedsTheLockTablesPrivilege: a source user without LOCK TABLES
// gets a message that names the privilege.
func TestLockFenceNeedsTheLockTablesPrivilege(t *testing.T) {
	sandboxtest.EachFlavor(t, testLockFenceNeedsTheLockTablesPrivilege)
}

func testLockFenceNeedsTheLockTablesPrivilege(t *testing.T, flavor sandbox.Flavor) {
	srv, _, admin := fenceSource(t, flavor)
	sandboxtest.Exec(t, admin, "CREATE USER 'nolock'@'127.0.0.1' IDENTIFIED BY 'pw'", "GRANT SELECT, RELOAD ON *.* TO 'nolock'@'127.0.0.1'")
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.AllowNativePasswords = "nolock", "pw", "tcp", srv.Addr(), true
	db, _, err := dbconn.Open(cfg.FormatDSN(), dbconn.Source)
	require.NoError(t, err)
	defer db.Close()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	f := newFencer(dbconn.Flavor(flavor), db, "d", nil)
	defer f.close()
	_, err = f.begin(ctx, conn, "t")
	require.ErrorContains(t, err, "source user 'nolock'@'127.0.0.1' lacks the LOCK TABLES privilege on `d`.*, "+
		"which rowlift needs to fence each chunk (a brief LOCK TABLES ... WRITE: neither flavor has an exact lock-free snapshot position): "+
		"run GRANT LOCK TABLES ON `d`.* TO 'nolock'@'127.0.0.1'")
	var ge *grants.Error
	require.True(t, errors.As(err, &ge), "%v", err)
}

func serverPosition(t *testing.T, db *sql.DB) string {
	t.Helper()
	pos, err := dbconn.Position(context.Background(), db)
	require.NoError(t, err)
	return pos
}

// TestStartPositionOfAnotherFlavorIsRefused: a stream whose position was taken
// on a server of the other flavor (a streamer pointed at another source) stops
// with a message that says to create the workflow again, before reading.
func TestStartPositionOfAnotherFlavorIsRefused(t *testing.T) {
	s, err := New(Config{SourceDSN: "rowlift@tcp(127.0.0.1:1)/"})
	require.NoError(t, err)
	defer s.Close()
	req := &rowliftv1.StreamRequest{Position: &rowliftv1.Position{GtidSet: "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"}}
	_, err = s.startPosition(context.Background(), req, dbconn.MariaDB)
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	require.ErrorContains(t, err, "is a mysql position but the source 127.0.0.1:1 runs mariadb: the workflow was created against another server; create it again for this source")
	set, err := s.startPosition(context.Background(), &rowliftv1.StreamRequest{Position: &rowliftv1.Position{GtidSet: "0-1-5"}}, dbconn.MariaDB)
	require.NoError(t, err)
	require.Equal(t, "0-1-5", set.String())
}

// TestFenceIsExactUnderConcurrentCommits: while many connections commit
// transactions of one to three row updates at once (group commit), every chunk
// snapshot holds exactly the transactions its fence names: none the fence
// lacks (their changes would come again from the binlog) and every one it has
// (the merger drops their changes as already copied). Each update bumps its
// row's version, which the writer reads back before it commits, so the
// version a snapshot must show is the highest of the transactions in its
// fence that wrote the row. Each writer learns its transaction's GTID
// (MariaDB's @@last_gtid; on MySQL the writer assigns it with gtid_next).
// MariaDB's lock-free snapshot position failed this: 9 of 3,557 snapshots
// missed transactions their position named (issue 29).
func TestFenceIsExactUnderConcurrentCommits(t *testing.T) {
	sandboxtest.EachFlavor(t, testFenceIsExactUnderConcurrentCommits)
}

func testFenceIsExactUnderConcurrentCommits(t *testing.T, flavor sandbox.Flavor) {
	const rows = 50
	srv := sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
	admin := sandboxtest.Open(t, srv, "")
	sandboxtest.Exec(t, admin, "CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY, ver INT NOT NULL)",
		fmt.Sprintf("INSERT INTO d.t WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < %d) SELECT i, 0 FROM s", rows))
	db, _, err := dbconn.Open(srv.DSN(""), dbconn.Source)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	var uuid string
	if flavor == sandbox.MySQL {
		require.NoError(t, admin.QueryRow("SELECT @@server_uuid").Scan(&uuid))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()

	var mu sync.Mutex
	var committed []versions
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := admin.Conn(context.Background())
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			rng := rand.New(rand.NewPCG(uint64(w), 29))
			for ctx.Err() == nil {
				v, err := commitUpdates(conn, rng, rows, uuid, next.Add(1))
				if err != nil {
					errs <- err
					return
				}
				if v.gtid != nil {
					mu.Lock()
					committed = append(committed, v)
					mu.Unlock()
				}
				// Writers that never pause keep the table's metadata lock
				// held by one of them at every moment: the fence's lock would
				// wait them out, not interleave with them.
				time.Sleep(time.Duration(rng.IntN(20000)) * time.Microsecond)
			}
		}()
	}
	type snap struct {
		fence string
		ver   map[int]int
	}
	var snaps []snap
	f := newFencer(dbconn.Flavor(flavor), db, "d", nil)
	defer f.close()
	conn, err := db.Conn(context.Background())
	require.NoError(t, err)
	defer conn.Close()
	for ctx.Err() == nil {
		fence, err := f.begin(context.Background(), conn, "t")
		require.NoError(t, err)
		s := snap{fence: fence.GetGtidSet(), ver: map[int]int{}}
		rs, err := conn.QueryContext(context.Background(), "SELECT id, ver FROM d.t")
		require.NoError(t, err)
		for rs.Next() {
			var id, ver int
			require.NoError(t, rs.Scan(&id, &ver))
			s.ver[id] = ver
		}
		require.NoError(t, rs.Err())
		_, err = conn.ExecContext(context.Background(), "COMMIT")
		require.NoError(t, err)
		snaps = append(snaps, s)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	for _, s := range snaps {
		fence := gtidSet(t, s.fence)
		want := map[int]int{}
		for _, v := range committed {
			if fence.Contains(v.gtid) {
				for id, ver := range v.rows {
					want[id] = max(want[id], ver)
				}
			}
		}
		for id := 1; id <= rows; id++ {
			require.Equal(t, want[id], s.ver[id], "fence %s, row %d: the snapshot shows version %d, the transactions in the fence wrote %d",
				s.fence, id, s.ver[id], want[id])
		}
	}
	t.Logf("%d snapshots checked against %d transactions", len(snaps), len(committed))
	require.Greater(t, len(snaps), 10)
	require.Greater(t, len(committed), 100)
}

// deadlock is ER_LOCK_DEADLOCK: the server rolled the transaction back.
const deadlock = 1213

// versions is what one committed transaction wrote: each row's new version.
type versions struct {
	gtid *gtid.Set
	rows map[int]int
}

// commitUpdates commits one transaction that bumps the version of one to
// three random rows, and returns its GTID (nil when a deadlock rolled it back)
// and the versions it wrote. On MySQL (uuid set) the GTID is assigned with
// gtid_next; on MariaDB it is read from @@last_gtid.
func commitUpdates(conn *sql.Conn, rng *rand.Rand, rows int, uuid string, seq int64) (versions, error) {
	ctx := context.Background()
	v := versions{rows: map[int]int{}}
	var g string
	if uuid != "" {
		g = fmt.Sprintf("%s:%d", uuid, seq)
		if _, err := conn.ExecContext(ctx, "SET gtid_next = '"+g+"'"); err != nil {
			return v, err
		}
	}
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		return v, err
	}
	for k := 1 + rng.IntN(3); k > 0; k-- {
		id, ver := 1+rng.IntN(rows), 0
		_, err := conn.ExecContext(ctx, "UPDATE d.t SET ver = ver + 1 WHERE id = ?", id)
		if err == nil {
			err = conn.QueryRowContext(ctx, "SELECT ver FROM d.t WHERE id = ?", id).Scan(&ver)
		}
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == deadlock {
			if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
				return v, err
			}
			return v, resetGTIDNext(ctx, conn, uuid)
		}
		if err != nil {
			return v, err
		}
		v.rows[id] = ver
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return v, err
	}
	if uuid == "" {
		if err := conn.QueryRowContext(ctx, "SELECT @@last_gtid").Scan(&g); err != nil {
			return v, err
		}
	}
	set, err := gtid.Parse(g)
	if err != nil {
		return v, err
	}
	v.gtid = set
	return v, resetGTIDNext(ctx, conn, uuid)
}

// resetGTIDNext gives a MySQL writer's session automatic GTIDs back.
func resetGTIDNext(ctx context.Context, conn *sql.Conn, uuid string) error {
	if uuid == "" {
		return nil
	}
	_, err := conn.ExecContext(ctx, "SET gtid_next = 'AUTOMATIC'")
	return err
}
