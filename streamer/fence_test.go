package streamer

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/grants"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// mysqlSource starts a MySQL server with d.t (id, v) holding rows 1 to 3, and
// returns a source pool on it and an admin pool.
func mysqlSource(t *testing.T) (*sandbox.Server, *sql.DB, *sql.DB) {
	t.Helper()
	srv := sandboxtest.Start(t, sandbox.Options{Flavor: sandbox.MySQL})
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

// TestLockFenceIsExact: MySQL's fence holds every transaction of the table
// committed before the chunk and none after, and the snapshot agrees with it.
func TestLockFenceIsExact(t *testing.T) {
	_, db, admin := mysqlSource(t)
	ctx := context.Background()
	sandboxtest.Exec(t, admin, "INSERT INTO d.t VALUES (4, 4)")
	before := gtidSet(t, serverPosition(t, admin))
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	stats := &fenceStats{}
	f := newFencer(dbconn.MySQL, db, "d", stats)
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

// TestLockFenceReleasesTheTable: once a chunk's snapshot is open, writers of
// the table do not wait for the chunk (a writer that had to would time out).
func TestLockFenceReleasesTheTable(t *testing.T) {
	_, db, admin := mysqlSource(t)
	ctx := context.Background()
	f := newFencer(dbconn.MySQL, db, "d", nil)
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
	_, db, admin := mysqlSource(t)
	ctx := context.Background()
	writer, err := admin.Conn(ctx)
	require.NoError(t, err)
	defer writer.Close()
	_, err = writer.ExecContext(ctx, "BEGIN")
	require.NoError(t, err)
	_, err = writer.ExecContext(ctx, "INSERT INTO d.t VALUES (9, 9)")
	require.NoError(t, err)

	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	stats := &fenceStats{}
	f := newFencer(dbconn.MySQL, db, "d", stats)
	defer f.close()
	type result struct {
		fence string
		err   error
	}
	done := make(chan result, 1)
	go func() {
		pos, err := f.begin(ctx, conn, "t")
		done <- result{pos.GetGtidSet(), err}
	}()
	for {
		stats.mu.Lock()
		timeouts := stats.timeouts
		stats.mu.Unlock()
		if timeouts > 0 {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("the fence was taken while a transaction on the table was open: %+v", r)
		case <-time.After(20 * time.Millisecond):
		}
	}
	_, err = writer.ExecContext(ctx, "COMMIT")
	require.NoError(t, err)
	committed := gtidSet(t, serverPosition(t, admin))
	r := <-done
	require.NoError(t, r.err)
	require.True(t, gtidSet(t, r.fence).Contains(committed))
	require.Equal(t, []int{1, 2, 3, 9}, chunkRows(t, conn))
}

// TestLockFenceNeedsTheLockTablesPrivilege: a source user without LOCK TABLES
// gets a message that names the privilege.
func TestLockFenceNeedsTheLockTablesPrivilege(t *testing.T) {
	srv, _, admin := mysqlSource(t)
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
	f := newFencer(dbconn.MySQL, db, "d", nil)
	defer f.close()
	_, err = f.begin(ctx, conn, "t")
	require.ErrorContains(t, err, "source user 'nolock'@'127.0.0.1' lacks the LOCK TABLES privilege on `d`.*, "+
		"which rowlift needs to fence each chunk (a brief LOCK TABLES ... READ, MySQL has no lock-free snapshot position): "+
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
