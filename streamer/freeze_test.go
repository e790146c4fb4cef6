package streamer

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/frozen"
	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/schema"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// freezeSource starts a server (with extra options args) with d.t1, d.t2 and d.t3
// and a streamer Server on it.
func freezeSource(t *testing.T, args ...string) (*Server, *sql.DB) {
	t.Helper()
	srv := sandboxtest.Start(t, sandbox.Options{Args: args})
	admin := sandboxtest.Open(t, srv, "")
	sandboxtest.Exec(t, admin, "CREATE DATABASE d",
		"CREATE TABLE d.t1 (id INT PRIMARY KEY, v INT)", "CREATE TABLE d.t2 (id INT PRIMARY KEY, v INT)", "CREATE TABLE d.t3 (id INT PRIMARY KEY)",
		"INSERT INTO d.t1 VALUES (1, 1)", "INSERT INTO d.t2 VALUES (1, 1)")
	s, err := New(Config{SourceDSN: srv.DSN(""), Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s, admin
}

func gtidSet(t testing.TB, text string) *gtid.Set {
	t.Helper()
	set, err := gtid.Parse(text)
	require.NoError(t, err)
	return set
}

// lastRenameGTID finds the GTID of the last RENAME TABLE in the source's binlog.
func lastRenameGTID(t *testing.T, db *sql.DB) string {
	t.Helper()
	var file string
	var pos int64
	var doDB, ignoreDB sql.NullString
	require.NoError(t, db.QueryRow("SHOW MASTER STATUS").Scan(&file, &pos, &doDB, &ignoreDB))
	rows, err := db.Query("SHOW BINLOG EVENTS IN '" + file + "'")
	require.NoError(t, err)
	defer rows.Close()
	var gtid, found string
	for rows.Next() {
		var log, typ, info string
		var p, serverID, end int64
		require.NoError(t, rows.Scan(&log, &p, &typ, &serverID, &end, &info))
		switch {
		case typ == "Gtid":
			gtid = strings.Fields(info)[len(strings.Fields(info))-1]
		case typ == "Query" && strings.HasPrefix(info, "RENAME TABLE"):
			found = gtid
		}
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, found, "no RENAME TABLE in %s", file)
	return found
}

func currentPos(t *testing.T, db *sql.DB) string {
	t.Helper()
	var pos string
	require.NoError(t, db.QueryRow("SELECT @@gtid_binlog_pos").Scan(&pos))
	return pos
}

func TestFreezeRenameRoundTrip(t *testing.T) {
	s, admin := freezeSource(t)
	ctx := context.Background()
	req := &rowliftv1.FreezeRequest{Workflow: "wf", Database: "d", Tables: []string{"t1", "t2"}}

	// A long transaction on a table: the rename gives up in bounded time
	// and renames nothing, rather than queueing every writer behind it.
	s.lockWait = time.Second
	holder, err := admin.Conn(ctx)
	require.NoError(t, err)
	defer holder.Close()
	_, err = holder.ExecContext(ctx, "BEGIN")
	require.NoError(t, err)
	_, err = holder.ExecContext(ctx, "SELECT COUNT(*) FROM d.t2")
	require.NoError(t, err)
	_, err = s.Freeze(ctx, req)
	require.Equal(t, codes.Aborted, status.Code(err), "%v", err)
	require.ErrorContains(t, err, "could not rename d.t1, d.t2")
	_, err = holder.ExecContext(ctx, "COMMIT")
	require.NoError(t, err)
	sandboxtest.Exec(t, admin, "SELECT COUNT(*) FROM d.t1")

	resp, err := s.Freeze(ctx, req)
	require.NoError(t, err)
	require.True(t, resp.GetChanged())
	rename := lastRenameGTID(t, admin)
	require.True(t, gtidSet(t, resp.GetPosition().GetGtidSet()).Contains(gtidSet(t, rename)),
		"freeze position %s covers the rename %s", resp.GetPosition().GetGtidSet(), rename)
	_, err = admin.Exec("INSERT INTO d.t1 VALUES (2, 2)")
	require.ErrorContains(t, err, "doesn't exist", "writers of a frozen table fail")
	var n int
	require.NoError(t, admin.QueryRow("SELECT COUNT(*) FROM d._t1_frozen").Scan(&n))
	require.Equal(t, 1, n)

	// A stream that starts while the tables are frozen describes them from
	// their twins, once their copy is done.
	validate := func(copied bool) (*rowliftv1.ValidateResponse, error) {
		return s.Validate(ctx, &rowliftv1.StreamRequest{Protocol: rowcodec.StreamProtocol, Workflow: "wf", Database: "d",
			Tables: []*rowliftv1.TableRequest{{Name: "t1", Copy: &rowliftv1.CopyProgress{Done: copied}}}})
	}
	described, err := validate(true)
	require.NoError(t, err)
	require.Equal(t, "t1", described.GetTables()[0].GetTable())
	require.Contains(t, string(described.GetTables()[0].GetCreateTable()), "CREATE TABLE `t1`")
	_, err = validate(false)
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	require.ErrorContains(t, err, "d.t1 is frozen by a cutover (renamed to _t1_frozen) and its copy is not done")

	again, err := s.Freeze(ctx, req)
	require.NoError(t, err)
	require.False(t, again.GetChanged(), "frozen already")
	require.Equal(t, currentPos(t, admin), again.GetPosition().GetGtidSet())

	// Partly frozen: refused both ways, naming every table.
	sandboxtest.Exec(t, admin, "RENAME TABLE d._t1_frozen TO d.t1")
	for _, call := range []func(context.Context, *rowliftv1.FreezeRequest) (*rowliftv1.FreezeResponse, error){s.Freeze, s.Unfreeze} {
		_, err = call(ctx, req)
		require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
		require.ErrorContains(t, err, "frozen d.t2 (as _t2_frozen); not frozen d.t1")
	}
	sandboxtest.Exec(t, admin, "RENAME TABLE d.t1 TO d._t1_frozen")

	// An application re-created the table while it was frozen.
	sandboxtest.Exec(t, admin, "CREATE TABLE d.t1 (id INT PRIMARY KEY, v INT)")
	_, err = s.Unfreeze(ctx, req)
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	require.ErrorContains(t, err, "both d.t1 and d._t1_frozen exist")
	sandboxtest.Exec(t, admin, "DROP TABLE d.t1")

	// The unfreeze answers the position right before its rename, which a
	// workflow starting there streams as a freeze: a writer that gets into
	// the unfrozen tables before the answer is streamed all the same.
	sandboxtest.Exec(t, admin, "INSERT INTO d.t3 VALUES (1)")
	beforeUnfreeze := currentPos(t, admin)
	resp, err = s.Unfreeze(ctx, req)
	require.NoError(t, err)
	require.True(t, resp.GetChanged())
	require.True(t, gtidSet(t, resp.GetPosition().GetGtidSet()).Contains(gtidSet(t, beforeUnfreeze)), "the unfreeze position covers what came before")
	require.False(t, gtidSet(t, resp.GetPosition().GetGtidSet()).Contains(gtidSet(t, lastRenameGTID(t, admin))),
		"the unfreeze position %s is before its rename", resp.GetPosition().GetGtidSet())
	sandboxtest.Exec(t, admin, "INSERT INTO d.t1 VALUES (2, 2)")
	again, err = s.Unfreeze(ctx, req)
	require.NoError(t, err)
	require.False(t, again.GetChanged())

	_, err = s.Freeze(ctx, &rowliftv1.FreezeRequest{Workflow: "wf", Database: "d", Tables: []string{"t1", "nope"}})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	require.ErrorContains(t, err, "d.nope")
	_, err = s.Freeze(ctx, &rowliftv1.FreezeRequest{Workflow: "wf", Database: "nodb", Tables: []string{"t1"}})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	require.ErrorContains(t, err, "nodb")
	_, err = s.Freeze(ctx, &rowliftv1.FreezeRequest{Workflow: "wf", Database: "d", Tables: []string{strings.Repeat("x", 60)}})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)

	none, err := s.Freeze(ctx, &rowliftv1.FreezeRequest{Workflow: "wf", Database: "d", Tables: []string{"t1"}, Mode: rowliftv1.FreezeMode_FREEZE_MODE_NONE})
	require.NoError(t, err)
	require.False(t, none.GetChanged())
	require.Equal(t, currentPos(t, admin), none.GetPosition().GetGtidSet())
	sandboxtest.Exec(t, admin, "INSERT INTO d.t1 VALUES (3, 3)")
}

// waitLocked waits until a statement on the source waits for a table lock.
func waitLocked(t *testing.T, db *sql.DB) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		err := db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE LIKE 'Waiting for table%lock'").Scan(&n)
		return err == nil && n > 0
	}, 20*time.Second, 20*time.Millisecond, "a writer waiting for the lock")
}

// write runs an INSERT in the background and reports its result.
func write(db *sql.DB, stmt string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := db.Exec(stmt)
		done <- err
	}()
	return done
}

func TestFreezeLock(t *testing.T) {
	s, admin := freezeSource(t)
	ctx := context.Background()
	lock := &rowliftv1.FreezeRequest{Workflow: "wf", Database: "d", Tables: []string{"t1", "t2"},
		Mode: rowliftv1.FreezeMode_FREEZE_MODE_LOCK, LeaseMs: 20000}

	resp, err := s.Freeze(ctx, lock)
	require.NoError(t, err)
	require.True(t, resp.GetChanged())
	require.Equal(t, currentPos(t, admin), resp.GetPosition().GetGtidSet())
	written := write(admin, "INSERT INTO d.t1 VALUES (2, 2)")
	waitLocked(t, admin)
	select {
	case err := <-written:
		t.Fatalf("a write went through the freeze lock: %v", err)
	default:
	}
	again, err := s.Freeze(ctx, lock)
	require.NoError(t, err)
	require.False(t, again.GetChanged(), "a refresh of the lease")
	other := &rowliftv1.FreezeRequest{Workflow: "wf", Database: "d", Tables: []string{"t1"}, Mode: rowliftv1.FreezeMode_FREEZE_MODE_LOCK}
	_, err = s.Freeze(ctx, other)
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)

	resp, err = s.Unfreeze(ctx, lock)
	require.NoError(t, err)
	require.True(t, resp.GetChanged())
	require.NoError(t, <-written)
	resp, err = s.Unfreeze(ctx, lock)
	require.NoError(t, err)
	require.False(t, resp.GetChanged(), "nothing held")

	// A lease that runs out releases the lock by itself.
	short := &rowliftv1.FreezeRequest{Workflow: "wf", Database: "d", Tables: []string{"t1"}, Mode: rowliftv1.FreezeMode_FREEZE_MODE_LOCK, LeaseMs: 300}
	resp, err = s.Freeze(ctx, short)
	require.NoError(t, err)
	require.True(t, resp.GetChanged())
	written = write(admin, "INSERT INTO d.t1 VALUES (3, 3)")
	select {
	case err := <-written:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("the lease did not release the lock")
	}
	resp, err = s.Unfreeze(ctx, short)
	require.NoError(t, err)
	require.False(t, resp.GetChanged(), "released by the lease")

	// A freeze that cannot get the lock fails in bounded time.
	holder, err := admin.Conn(ctx)
	require.NoError(t, err)
	defer holder.Close()
	_, err = holder.ExecContext(ctx, "LOCK TABLES d.t2 WRITE")
	require.NoError(t, err)
	_, err = s.Freeze(ctx, &rowliftv1.FreezeRequest{Workflow: "wf2", Database: "d", Tables: []string{"t2"},
		Mode: rowliftv1.FreezeMode_FREEZE_MODE_LOCK, LeaseMs: 1000})
	require.Equal(t, codes.Aborted, status.Code(err), "%v", err)
	require.ErrorContains(t, err, "could not lock d.t2")
	_, err = holder.ExecContext(ctx, "UNLOCK TABLES")
	require.NoError(t, err)

	_, err = s.Freeze(ctx, &rowliftv1.FreezeRequest{Workflow: "wf3", Database: "d", Tables: []string{"nope"}, Mode: rowliftv1.FreezeMode_FREEZE_MODE_LOCK})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	require.ErrorContains(t, err, "nope")
}

// TestFreezeLeaseCap: a LOCK freeze's lease is capped, so a lost coordinator
// cannot leave writers blocked for long; other modes hold no lease.
func TestFreezeLeaseCap(t *testing.T) {
	capMs := frozen.MaxLockLease.Milliseconds()
	req := func(mode rowliftv1.FreezeMode, leaseMs int64) *rowliftv1.FreezeRequest {
		return &rowliftv1.FreezeRequest{Workflow: "wf", Database: "d", Tables: []string{"t1"}, Mode: mode, LeaseMs: leaseMs}
	}
	require.NoError(t, checkFreezeRequest(req(rowliftv1.FreezeMode_FREEZE_MODE_LOCK, capMs)))
	require.NoError(t, checkFreezeRequest(req(rowliftv1.FreezeMode_FREEZE_MODE_RENAME, capMs+1)))
	require.NoError(t, checkFreezeRequest(req(rowliftv1.FreezeMode_FREEZE_MODE_NONE, capMs+1)))
	for _, over := range []int64{capMs + 1, 1 << 62} {
		err := checkFreezeRequest(req(rowliftv1.FreezeMode_FREEZE_MODE_LOCK, over))
		require.ErrorContains(t, err, fmt.Sprintf("lease_ms %d is over the cap of 5m0s for a LOCK freeze", over))
	}
	// Refused as a bad request, before the source is asked for anything.
	s, err := New(Config{SourceDSN: "rowlift@tcp(127.0.0.1:1)/"})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Freeze(context.Background(), req(rowliftv1.FreezeMode_FREEZE_MODE_LOCK, capMs+1))
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
}

// TestFreezeLockSession: a LOCK freeze outlives the server's wait_timeout (one
// second here) while its lease runs, and a refresh answers the position at
// which the lock was taken; once its session is killed, writers go through,
// and the next freeze notices, locks again and answers a position that covers
// what they wrote.
func TestFreezeLockSession(t *testing.T) {
	s, admin := freezeSource(t, "--wait-timeout=1")
	ctx := context.Background()
	lock := &rowliftv1.FreezeRequest{Workflow: "wf", Database: "d", Tables: []string{"t1"},
		Mode: rowliftv1.FreezeMode_FREEZE_MODE_LOCK, LeaseMs: 60000}
	first, err := s.Freeze(ctx, lock)
	require.NoError(t, err)
	require.True(t, first.GetChanged())

	// A session opened after the lock's last statement, closed by the server
	// for idling: the lock's session has idled longer.
	canary, err := admin.Conn(ctx)
	require.NoError(t, err)
	var canaryID int64
	require.NoError(t, canary.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&canaryID))
	require.Eventually(t, func() bool {
		var n int
		err := admin.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", canaryID).Scan(&n)
		return err == nil && n == 0
	}, 30*time.Second, 50*time.Millisecond, "the server closes an idle session")
	canary.Close()
	probe, err := admin.Conn(ctx)
	require.NoError(t, err)
	defer probe.Close()
	_, err = probe.ExecContext(ctx, "SET SESSION lock_wait_timeout = 1")
	require.NoError(t, err)
	_, err = probe.ExecContext(ctx, "INSERT INTO d.t1 VALUES (2, 2)")
	require.ErrorContains(t, err, "Lock wait timeout exceeded", "the lock holds past the server's wait_timeout")

	sandboxtest.Exec(t, admin, "INSERT INTO d.t2 VALUES (2, 2)") // not locked: the position moves
	again, err := s.Freeze(ctx, lock)
	require.NoError(t, err)
	require.False(t, again.GetChanged(), "a refresh of the lease")
	require.Equal(t, first.GetPosition().GetGtidSet(), again.GetPosition().GetGtidSet(), "the position at which the lock was taken")

	s.locks.mu.Lock()
	held := s.locks.byWorkflow["wf"]
	s.locks.mu.Unlock()
	var lockID int64
	require.NoError(t, held.conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&lockID))
	sandboxtest.Exec(t, admin, fmt.Sprintf("KILL %d", lockID))
	sandboxtest.Exec(t, admin, "INSERT INTO d.t1 VALUES (3, 3)") // the lock went with its session
	written := currentPos(t, admin)
	relocked, err := s.Freeze(ctx, lock)
	require.NoError(t, err)
	require.True(t, relocked.GetChanged(), "locked again")
	require.True(t, gtidSet(t, relocked.GetPosition().GetGtidSet()).Contains(gtidSet(t, written)),
		"the new position %s covers the write made while unlocked (%s)", relocked.GetPosition().GetGtidSet(), written)
	_, err = probe.ExecContext(ctx, "INSERT INTO d.t1 VALUES (4, 4)")
	require.ErrorContains(t, err, "Lock wait timeout exceeded", "locked again")
	resp, err := s.Unfreeze(ctx, lock)
	require.NoError(t, err)
	require.True(t, resp.GetChanged())
	sandboxtest.Exec(t, admin, "INSERT INTO d.t1 VALUES (4, 4)")
}

func TestFreezeUnreachableSource(t *testing.T) {
	port, err := sandbox.FreePort()
	require.NoError(t, err)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s, err := New(Config{SourceDSN: fmt.Sprintf("rowlift:s3cret@tcp(%s)/", addr)})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Freeze(context.Background(), &rowliftv1.FreezeRequest{Workflow: "wf", Database: "d", Tables: []string{"t1"}})
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	require.ErrorContains(t, err, addr)
	require.NotContains(t, err.Error(), "s3cret")
}

// TestBinlogMarksFreezeRenames: the binlog reader sends Freeze's and
// Unfreeze's renames as freeze DDL, and a rename to another name as a schema
// change.
func TestBinlogMarksFreezeRenames(t *testing.T) {
	s, admin := freezeSource(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := gtidSet(t, currentPos(t, admin))
	var plans []*tablePlan
	for _, name := range []string{"t1", "t2"} {
		tbl, err := schema.Load(ctx, s.db, "d", name)
		require.NoError(t, err)
		p, err := newTablePlan(tbl, nil, false)
		require.NoError(t, err)
		plans = append(plans, p)
	}
	req := &rowliftv1.FreezeRequest{Workflow: "wf", Database: "d", Tables: []string{"t1", "t2"}}
	_, err := s.Freeze(ctx, req)
	require.NoError(t, err)
	// The reverse workflow's writes go to the frozen twins: not streamed.
	sandboxtest.Exec(t, admin, "INSERT INTO d._t1_frozen VALUES (7, 7)")
	_, err = s.Unfreeze(ctx, req)
	require.NoError(t, err)
	sandboxtest.Exec(t, admin, "USE d", "RENAME TABLE t1 TO t1_old", "INSERT INTO d.t2 VALUES (8, 8)")

	syncer, events, err := s.startBinlog(context.Background(), start, dbconn.MariaDB, newDumpWatch(start, true, s.log), s.log)
	require.NoError(t, err)
	defer syncer.Close()
	r := newBinlogReader(events, "d", plans, start.Clone())
	var freeze []bool
	var statements []string
	for {
		res, err := r.next(ctx)
		require.NoError(t, err)
		if res.tx == nil {
			continue
		}
		if ddl := res.tx.item.GetDdl(); ddl != nil {
			freeze = append(freeze, ddl.GetFreeze())
			statements = append(statements, ddl.GetStatement())
			continue
		}
		trx := res.tx.item.GetTransaction()
		require.Len(t, trx.GetEvents(), 1)
		require.Equal(t, "t2", trx.GetEvents()[0].GetTable(), "only the live tables' rows are streamed")
		break
	}
	require.Equal(t, []bool{true, true, false}, freeze, "%q", statements)
}

// TestFreezeLockThenRename: a RENAME freeze of a workflow that holds a LOCK
// freeze renames the tables while the lock holds, then releases it; a writer
// queued behind the lock gets "doesn't exist" instead of writing into the
// table. A lock already gone (its session killed) is renamed all the same.
func TestFreezeLockThenRename(t *testing.T) {
	s, admin := freezeSource(t)
	ctx := context.Background()
	lock := &rowliftv1.FreezeRequest{Workflow: "wf", Database: "d", Tables: []string{"t1", "t2"},
		Mode: rowliftv1.FreezeMode_FREEZE_MODE_LOCK, LeaseMs: 20000}
	rename := &rowliftv1.FreezeRequest{Workflow: "wf", Database: "d", Tables: []string{"t1", "t2"},
		Mode: rowliftv1.FreezeMode_FREEZE_MODE_RENAME}
	_, err := s.Freeze(ctx, lock)
	require.NoError(t, err)
	written := write(admin, "INSERT INTO d.t1 VALUES (2, 2)")
	// One RENAME TABLE of both would wait for t1 only, letting this in first.
	written2 := write(admin, "INSERT INTO d.t2 VALUES (2, 2)")
	require.Eventually(t, func() bool {
		var n int
		err := admin.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE = 'Waiting for table metadata lock'").Scan(&n)
		return err == nil && n == 2
	}, 20*time.Second, 20*time.Millisecond, "both writers wait for the lock")

	_, err = s.Freeze(ctx, &rowliftv1.FreezeRequest{Workflow: "wf", Database: "d", Tables: []string{"t1"}, Mode: rowliftv1.FreezeMode_FREEZE_MODE_RENAME})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "other tables than the lock's: %v", err)
	resp, err := s.Freeze(ctx, rename)
	require.NoError(t, err)
	require.True(t, resp.GetChanged())
	for i, w := range []<-chan error{written, written2} {
		err = <-w
		require.Error(t, err, "the queued write to t%d must not commit", i+1)
		require.Contains(t, err.Error(), "doesn't exist")
		var n int
		require.NoError(t, admin.QueryRow(fmt.Sprintf("SELECT COUNT(*) FROM d._t%d_frozen", i+1)).Scan(&n))
		require.Equal(t, 1, n, "only the row written before the lock")
	}
	require.True(t, gtidSet(t, resp.GetPosition().GetGtidSet()).Contains(gtidSet(t, lastRenameGTID(t, admin))), "the position covers the renames")
	s.locks.mu.Lock()
	require.Empty(t, s.locks.byWorkflow, "the lock is released")
	s.locks.mu.Unlock()
	again, err := s.Freeze(ctx, rename)
	require.NoError(t, err)
	require.False(t, again.GetChanged())
	_, err = s.Unfreeze(ctx, rename)
	require.NoError(t, err)
	sandboxtest.Exec(t, admin, "INSERT INTO d.t1 VALUES (2, 2)")

	// The lock's session killed: the rename does not wait for it.
	_, err = s.Freeze(ctx, lock)
	require.NoError(t, err)
	s.locks.mu.Lock()
	held := s.locks.byWorkflow["wf"]
	s.locks.mu.Unlock()
	var lockID int64
	require.NoError(t, held.conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&lockID))
	sandboxtest.Exec(t, admin, fmt.Sprintf("KILL %d", lockID))
	resp, err = s.Freeze(ctx, rename)
	require.NoError(t, err)
	require.True(t, resp.GetChanged())
	_, err = admin.Exec("INSERT INTO d.t1 VALUES (3, 3)")
	require.ErrorContains(t, err, "doesn't exist")
}
