package streamer

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/frozen"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/schema"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

const (
	// defaultFreezeLease is how long a LOCK freeze holds when the request does
	// not say, so a lost coordinator never leaves the source frozen.
	defaultFreezeLease = 30 * time.Second
	// maxLockWait bounds how long a freeze waits for the tables' metadata locks
	// (lock_wait_timeout, a day by default), so a freeze behind a long
	// transaction fails instead of stalling the writes queued behind it.
	maxLockWait = 10 * time.Second
)

// Freeze stops writes to a workflow's tables for a cutover (see the proto).
func (s *Server) Freeze(ctx context.Context, req *rowliftv1.FreezeRequest) (*rowliftv1.FreezeResponse, error) {
	return s.freeze(ctx, req, true)
}

// Unfreeze undoes Freeze, so a rolled-back or reversed cutover gives the
// tables back to their writers.
func (s *Server) Unfreeze(ctx context.Context, req *rowliftv1.FreezeRequest) (*rowliftv1.FreezeResponse, error) {
	return s.freeze(ctx, req, false)
}

func (s *Server) freeze(ctx context.Context, req *rowliftv1.FreezeRequest, freeze bool) (*rowliftv1.FreezeResponse, error) {
	op := map[bool]string{true: "freeze", false: "unfreeze"}[freeze]
	log := s.log.With(zap.String("workflow", req.GetWorkflow()), zap.String("database", req.GetDatabase()),
		zap.Strings("tables", req.GetTables()), zap.Stringer("mode", req.GetMode()))
	if err := checkFreezeRequest(req); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%s: %v", op, err)
	}
	if err := s.ping(ctx); err != nil {
		return nil, err
	}
	var resp *rowliftv1.FreezeResponse
	var err error
	switch req.GetMode() {
	case rowliftv1.FreezeMode_FREEZE_MODE_NONE:
		var pos *rowliftv1.Position
		pos, err = s.position(ctx, s.db)
		resp = &rowliftv1.FreezeResponse{Position: pos}
	case rowliftv1.FreezeMode_FREEZE_MODE_LOCK:
		if freeze {
			resp, err = s.lockTables(ctx, req, log)
		} else {
			resp, err = s.unlockTables(ctx, req)
		}
	default:
		var held *tableLock
		if freeze {
			if held, err = s.takeLock(req); err != nil {
				break
			}
		}
		resp, err = s.renameTables(ctx, req, freeze, held, log)
	}
	if err != nil {
		log.Warn(op+" failed", zap.Error(err))
		return nil, err
	}
	log.Info(map[bool]string{true: "tables frozen", false: "tables unfrozen"}[freeze], zap.Bool("changed", resp.GetChanged()),
		zap.String("position", resp.GetPosition().GetGtidSet()))
	return resp, nil
}

func checkFreezeRequest(req *rowliftv1.FreezeRequest) error {
	switch {
	case req.GetWorkflow() == "":
		return errors.New("request names no workflow")
	case req.GetDatabase() == "":
		return errors.New("request names no database")
	case len(req.GetTables()) == 0:
		return errors.New("request names no tables")
	case req.GetLeaseMs() < 0:
		return fmt.Errorf("lease_ms %d is negative", req.GetLeaseMs())
	case req.GetMode() == rowliftv1.FreezeMode_FREEZE_MODE_LOCK && req.GetLeaseMs() > frozen.MaxLockLease.Milliseconds():
		return fmt.Errorf("lease_ms %d is over the cap of %s for a LOCK freeze: the lock blocks every writer of the tables until "+
			"its lease ends if the coordinator is lost; ask for a shorter lease (a switch's --timeout) or freeze with RENAME",
			req.GetLeaseMs(), frozen.MaxLockLease)
	}
	if _, known := rowliftv1.FreezeMode_name[int32(req.GetMode())]; !known {
		return fmt.Errorf("unknown freeze mode %d", req.GetMode())
	}
	seen := map[string]bool{}
	for _, t := range req.GetTables() {
		if t == "" || seen[strings.ToLower(t)] {
			return fmt.Errorf("table %q named twice or empty", t)
		}
		seen[strings.ToLower(t)] = true
		if mode := req.GetMode(); mode == rowliftv1.FreezeMode_FREEZE_MODE_RENAME || mode == rowliftv1.FreezeMode_FREEZE_MODE_UNSPECIFIED {
			if _, err := frozen.Name(t); err != nil {
				return err
			}
		}
	}
	return nil
}

// position reads the source's current GTID position.
func (s *Server) position(ctx context.Context, q schema.Queryer) (*rowliftv1.Position, error) {
	pos, err := dbconn.Position(ctx, q)
	if err != nil {
		return nil, s.sourceError("read the source's position", err)
	}
	return &rowliftv1.Position{GtidSet: pos}, nil
}

// sourceError turns a failed source statement into a status whose code says
// whether retrying can help.
func (s *Server) sourceError(what string, err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1049, 1146: // unknown database, table doesn't exist
			return status.Errorf(codes.NotFound, "%s on source %s: %v", what, s.cfg.Addr, err)
		case 1044, 1142: // access denied to a database, command denied
			return status.Errorf(codes.PermissionDenied, "%s on source %s: %v: grant the streamer's user what it needs", what, s.cfg.Addr, err)
		}
		return status.Errorf(codes.Internal, "%s on source %s: %v", what, s.cfg.Addr, err)
	}
	return status.Errorf(codes.Unavailable, "%s: %v", what, dbconn.Explain(err, s.cfg, "source"))
}

// renameTables freezes (or unfreezes) by renaming every table to its frozen
// name (or back) in one atomic RENAME TABLE, after checking that all tables
// are in the state the rename starts from; all already in the end state
// changes nothing.
//
// held is the workflow's LOCK freeze, when a RENAME freeze turns it into a
// rename (a LOCK cutover's end, so that the side it froze ends like a
// RENAME cutover's): the rename runs on a session of its own, and the lock is
// released only once the rename waits for the tables. The rename's exclusive
// metadata lock goes ahead of the writers queued behind the lock, which then
// find the tables gone ("doesn't exist") instead of writing into tables
// nobody streams. renameTables always releases held.
func (s *Server) renameTables(ctx context.Context, req *rowliftv1.FreezeRequest, freeze bool, held *tableLock,
	log *zap.Logger) (resp *rowliftv1.FreezeResponse, err error) {
	if held != nil {
		defer func() {
			if held.conn != nil {
				release(held)
			}
			if err != nil {
				// The tables were left writable: lock them again so the writers
				// keep waiting for the retry, rather than write where no one reads.
				relock := &rowliftv1.FreezeRequest{Workflow: req.GetWorkflow(), Database: req.GetDatabase(), Tables: req.GetTables(),
					Mode: rowliftv1.FreezeMode_FREEZE_MODE_LOCK, LeaseMs: time.Until(held.expires).Milliseconds()}
				if relock.LeaseMs > 0 {
					if _, lerr := s.lockTables(context.WithoutCancel(ctx), relock, log); lerr != nil {
						log.Warn("cannot lock the tables again after a failed rename: writers go on into the tables", zap.Error(lerr))
					}
				}
			}
		}()
	}
	db := req.GetDatabase()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, s.sourceError("connect", err)
	}
	defer discard(conn)
	secs, err := s.boundLockWait(ctx, conn, s.lockWait)
	if err != nil {
		return nil, err
	}
	var dbs int
	if err := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", db).Scan(&dbs); err != nil {
		return nil, s.sourceError("look up database "+db, err)
	}
	if dbs == 0 {
		return nil, status.Errorf(codes.NotFound, "database %s does not exist on source %s: check the workflow's source database", db, s.cfg.Addr)
	}
	var live, frozenNow, both, missing []string
	for _, t := range req.GetTables() {
		twin, _ := frozen.Name(t) // checked with the request
		isLive, err := tableExists(ctx, conn, db, t)
		if err != nil {
			return nil, s.sourceError("look up table "+db+"."+t, err)
		}
		isFrozen, err := tableExists(ctx, conn, db, twin)
		if err != nil {
			return nil, s.sourceError("look up table "+db+"."+twin, err)
		}
		switch {
		case isLive && isFrozen:
			both = append(both, fmt.Sprintf("%s.%s and %s.%s", db, t, db, twin))
		case isLive:
			live = append(live, db+"."+t)
		case isFrozen:
			frozenNow = append(frozenNow, db+"."+t+" (as "+twin+")")
		default:
			missing = append(missing, fmt.Sprintf("%s.%s (nor %s)", db, t, twin))
		}
	}
	from, to := live, frozenNow
	if !freeze {
		from, to = frozenNow, live
	}
	switch {
	case len(missing) > 0:
		return nil, status.Errorf(codes.NotFound, "source %s has no table %s: check the workflow's tables and source database",
			s.cfg.Addr, strings.Join(missing, ", "))
	case len(both) > 0:
		return nil, status.Errorf(codes.FailedPrecondition, "both %s exist on source %s: something created the table again while it was frozen; "+
			"compare the two, keep the right one under the right name and drop or rename the other, then retry", strings.Join(both, "; both "), s.cfg.Addr)
	case len(to) == len(req.GetTables()):
		pos, err := s.position(ctx, conn)
		if err != nil {
			return nil, err
		}
		return &rowliftv1.FreezeResponse{Position: pos}, nil
	case len(from) != len(req.GetTables()):
		return nil, status.Errorf(codes.FailedPrecondition, "on source %s only some of the tables are frozen: frozen %s; not frozen %s; "+
			"an earlier freeze or unfreeze was cut short, or tables were renamed by hand: rename them so that all are frozen or none are, then retry",
			s.cfg.Addr, strings.Join(frozenNow, ", "), strings.Join(live, ", "))
	}
	stmt, err := frozen.Statement(db, req.GetTables(), freeze)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	// An unfreeze answers the position right before its rename: the workflow
	// that starts there streams every write the unfrozen tables take, and a
	// position read after the rename could already hold a writer's first
	// (and lose it). Nothing writes the tables between the two: they do not
	// exist under their own names, and the workflow that wrote into their
	// frozen names was parked. The rename itself streams as a freeze, no DDL.
	var before *rowliftv1.Position
	if !freeze {
		if before, err = s.position(ctx, conn); err != nil {
			return nil, err
		}
	}
	if held == nil {
		_, err = conn.ExecContext(ctx, stmt)
	} else {
		err = s.renameBehindLock(ctx, db, req.GetTables(), held)
	}
	if err != nil {
		var me *mysql.MySQLError
		if errors.As(err, &me) && (me.Number == 1050 || me.Number == 1146) { // table exists, doesn't exist
			return nil, status.Errorf(codes.FailedPrecondition, "%s on source %s: %v: the tables changed meanwhile; retry", stmt, s.cfg.Addr, err)
		}
		return nil, s.lockError("rename", db, req.GetTables(), secs, err)
	}
	if !freeze {
		return &rowliftv1.FreezeResponse{Position: before, Changed: true}, nil
	}
	// The same session: its position includes the rename.
	pos, err := s.position(ctx, conn)
	if err != nil {
		return nil, err
	}
	return &rowliftv1.FreezeResponse{Position: pos, Changed: true}, nil
}

// renameBehindLock renames the tables of database db to their frozen names
// while the lock held (on the same tables) still holds, and releases held once
// every rename waits for it. A waiting exclusive metadata lock is granted
// before the writers' that wait too, so no writer gets into a table before its
// rename; the writers then find it gone ("doesn't exist"). One RENAME TABLE
// takes its tables' locks one after the other, waiting for each: it would be
// queued on its first table only, and the writers of the others would go first
// once the lock goes. So each table is renamed by a statement of its own, on a
// session of its own, all queued before the lock goes. If one fails, the
// others are renamed back (the caller locks the tables again) and the first
// error is returned.
func (s *Server) renameBehindLock(ctx context.Context, db string, tables []string, held *tableLock) error {
	type renamer struct {
		table string
		conn  *sql.Conn
		id    int64
		done  chan error
	}
	var rs []*renamer
	defer func() {
		for _, r := range rs {
			discard(r.conn)
		}
	}()
	for _, t := range tables {
		conn, err := s.db.Conn(ctx)
		if err != nil {
			return err
		}
		r := &renamer{table: t, conn: conn, done: make(chan error, 1)}
		rs = append(rs, r)
		if _, err := s.boundLockWait(ctx, conn, s.lockWait); err != nil {
			return err
		}
		if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&r.id); err != nil {
			return err
		}
	}
	for _, r := range rs {
		stmt, err := frozen.Statement(db, []string{r.table}, true)
		if err != nil {
			return err
		}
		go func() {
			_, err := r.conn.ExecContext(ctx, stmt)
			r.done <- err
		}()
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	// A rename held up by something else than the lock (a backup lock, say)
	// must not keep the tables locked past the renames' own lock wait.
	giveUp := time.Now().Add(s.lockWait)
	for queued := 0; queued < len(rs) && time.Now().Before(giveUp); {
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
		queued = 0
		for _, r := range rs {
			var st sql.NullString
			err := s.db.QueryRowContext(ctx, "SELECT STATE FROM information_schema.PROCESSLIST WHERE ID = ?", r.id).Scan(&st)
			switch {
			case err != nil && !errors.Is(err, sql.ErrNoRows):
				// The renames run, or time out, on their own.
				queued = len(rs)
			case strings.HasPrefix(st.String, "Waiting for table metadata lock"), len(r.done) > 0:
				// Queued, or done (only when the lock was gone already).
				queued++
			}
		}
	}
	release(held)
	held.conn = nil
	var first error
	var renamed []string
	for _, r := range rs {
		if err := <-r.done; err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		renamed = append(renamed, r.table)
	}
	if first != nil && len(renamed) > 0 {
		back, err := frozen.Statement(db, renamed, false)
		if err == nil {
			_, err = rs[0].conn.ExecContext(context.WithoutCancel(ctx), back)
		}
		if err != nil {
			s.log.Warn("cannot rename back the tables renamed before a rename failed", zap.Strings("renamed", renamed), zap.Error(err))
		}
	}
	return first
}

// takeLock removes and returns the workflow's LOCK freeze, for a RENAME
// freeze to turn into a rename, if it holds one on the request's tables: its
// lease no longer runs. A workflow without one gets nil.
func (s *Server) takeLock(req *rowliftv1.FreezeRequest) (*tableLock, error) {
	var names []string
	for _, t := range req.GetTables() {
		names = append(names, strings.ToLower(req.GetDatabase()+"."+t))
	}
	slices.Sort(names)
	s.locks.mu.Lock()
	defer s.locks.mu.Unlock()
	held := s.locks.byWorkflow[req.GetWorkflow()]
	switch {
	case held == nil:
		return nil, nil
	case !slices.Equal(held.tables, names):
		return nil, status.Errorf(codes.FailedPrecondition, "workflow %s holds a freeze lock on %s, not on %s: unfreeze it first",
			req.GetWorkflow(), strings.Join(held.tables, ", "), strings.Join(names, ", "))
	}
	delete(s.locks.byWorkflow, req.GetWorkflow())
	held.timer.Stop()
	return held, nil
}

// boundLockWait sets the session's lock_wait_timeout to wait (whole seconds,
// at least one) and returns it in seconds. The session must not go back to
// the pool afterwards.
func (s *Server) boundLockWait(ctx context.Context, conn *sql.Conn, wait time.Duration) (int, error) {
	secs := max(1, int((wait+time.Second-1)/time.Second))
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION lock_wait_timeout = %d", secs)); err != nil {
		return 0, s.sourceError("set lock_wait_timeout", err)
	}
	return secs, nil
}

// lockError explains a freeze statement that failed, naming the session to
// end when it waited too long for the tables.
func (s *Server) lockError(what, db string, tables []string, secs int, err error) error {
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = db + "." + t
	}
	if isLockWaitTimeout(err) {
		return status.Errorf(codes.Aborted, "could not %s %s on source %s within %ds: another session holds a conflicting lock "+
			"(a long transaction, DDL or LOCK TABLES; see SHOW PROCESSLIST): end it and retry", what, strings.Join(names, ", "), s.cfg.Addr, secs)
	}
	return s.sourceError(what+" "+strings.Join(names, ", "), err)
}

func tableExists(ctx context.Context, q schema.Queryer, db, table string) (bool, error) {
	var n int
	err := q.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", db, table).Scan(&n)
	return n > 0, err
}

// tableLock is a LOCK TABLES ... READ held for a workflow's freeze on its own
// session, released by Unfreeze or by itself once expires passes.
type tableLock struct {
	conn    *sql.Conn
	tables  []string
	timer   *time.Timer
	expires time.Time
	// pos is the source's position when the lock was granted: every write the
	// tables had while it holds is at or before it.
	pos *rowliftv1.Position
}

// tableLocks holds the LOCK freezes by workflow, and the workflows whose
// freeze is waiting for its lock.
type tableLocks struct {
	mu         sync.Mutex
	byWorkflow map[string]*tableLock
	acquiring  map[string]bool
}

func newTableLocks() *tableLocks {
	return &tableLocks{byWorkflow: map[string]*tableLock{}, acquiring: map[string]bool{}}
}

// lockSessionTimeout is the wait_timeout of a lock's session, over the longest
// lease: a server whose wait_timeout is shorter would otherwise close the idle
// session, and with it the lock, while the cutover still counts on it.
const lockSessionTimeout = frozen.MaxLockLease + time.Minute

// lockTables takes LOCK TABLES ... READ on a session of its own and keeps it
// until Unfreeze or the lease ends. A workflow that holds it already has its
// lease refreshed and gets the position at which it was taken; one whose lock
// went with its session (killed, or closed by the server) locks again, as a
// change, at a new position.
func (s *Server) lockTables(ctx context.Context, req *rowliftv1.FreezeRequest, log *zap.Logger) (*rowliftv1.FreezeResponse, error) {
	workflow := req.GetWorkflow()
	lease := time.Duration(req.GetLeaseMs()) * time.Millisecond
	if lease == 0 {
		lease = defaultFreezeLease
	}
	var names []string
	for _, t := range req.GetTables() {
		names = append(names, strings.ToLower(req.GetDatabase()+"."+t))
	}
	slices.Sort(names)
	for {
		held, err := s.heldLock(workflow, names)
		if err != nil {
			return nil, err
		}
		if held == nil {
			break // marked as locking
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = held.conn.PingContext(pctx)
		cancel()
		if err == nil {
			if s.extendLease(workflow, held, lease) {
				return &rowliftv1.FreezeResponse{Position: held.pos}, nil
			}
			continue // released meanwhile
		}
		log.Warn("the freeze lock's session is gone (killed, or closed by the server): locking again", zap.Error(err))
		s.dropLock(workflow, held)
	}
	// The workflow is marked as locking, so a second freeze of it cannot lock
	// too, while other workflows' freezes and lease expiries go on.
	defer func() {
		s.locks.mu.Lock()
		delete(s.locks.acquiring, workflow)
		s.locks.mu.Unlock()
	}()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, s.sourceError("connect", err)
	}
	held := &tableLock{conn: conn, tables: names, expires: time.Now().Add(lease)}
	ok := false
	defer func() {
		if !ok {
			discard(conn)
		}
	}()
	secs, err := s.boundLockWait(ctx, conn, min(lease, s.lockWait))
	if err != nil {
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION wait_timeout = %d", int(lockSessionTimeout/time.Second))); err != nil {
		return nil, s.sourceError("set wait_timeout", err)
	}
	var list []string
	for _, t := range req.GetTables() {
		list = append(list, rowcodec.QualifiedIdent(req.GetDatabase(), t)+" READ")
	}
	if _, err := conn.ExecContext(ctx, "LOCK TABLES "+strings.Join(list, ", ")); err != nil {
		return nil, s.lockError("lock", req.GetDatabase(), req.GetTables(), secs, err)
	}
	// Every write to the tables committed before the lock was granted, and
	// is in the binlog: the position covers them.
	if held.pos, err = s.position(ctx, conn); err != nil {
		return nil, err
	}
	s.locks.mu.Lock()
	held.timer = time.AfterFunc(lease, func() { s.expireLock(workflow, held, log) })
	s.locks.byWorkflow[workflow] = held
	s.locks.mu.Unlock()
	ok = true
	return &rowliftv1.FreezeResponse{Position: held.pos, Changed: true}, nil
}

// heldLock returns the workflow's lock when it holds one on the same tables,
// or else marks the workflow as locking and returns nil; a workflow that holds
// another lock or is locking already is refused.
func (s *Server) heldLock(workflow string, names []string) (*tableLock, error) {
	s.locks.mu.Lock()
	defer s.locks.mu.Unlock()
	held := s.locks.byWorkflow[workflow]
	switch {
	case held != nil && !slices.Equal(held.tables, names):
		return nil, status.Errorf(codes.FailedPrecondition, "workflow %s holds a freeze lock on %s already, not on %s: unfreeze it first",
			workflow, strings.Join(held.tables, ", "), strings.Join(names, ", "))
	case held != nil:
		return held, nil
	case s.locks.acquiring[workflow]:
		return nil, status.Errorf(codes.Aborted, "a freeze of workflow %s is already waiting for its lock: retry once it is done", workflow)
	}
	s.locks.acquiring[workflow] = true
	return nil, nil
}

// extendLease restarts the lease of the workflow's lock held, unless it was
// released meanwhile (false).
func (s *Server) extendLease(workflow string, held *tableLock, lease time.Duration) bool {
	s.locks.mu.Lock()
	defer s.locks.mu.Unlock()
	if s.locks.byWorkflow[workflow] != held {
		return false
	}
	held.expires = time.Now().Add(lease)
	held.timer.Reset(lease)
	return true
}

// dropLock forgets a lock whose session is gone and closes what is left of it.
func (s *Server) dropLock(workflow string, held *tableLock) {
	s.locks.mu.Lock()
	if s.locks.byWorkflow[workflow] == held {
		delete(s.locks.byWorkflow, workflow)
	}
	s.locks.mu.Unlock()
	held.timer.Stop()
	discard(held.conn)
}

// unlockTables releases a workflow's LOCK freeze, if it holds one.
func (s *Server) unlockTables(ctx context.Context, req *rowliftv1.FreezeRequest) (*rowliftv1.FreezeResponse, error) {
	s.locks.mu.Lock()
	held := s.locks.byWorkflow[req.GetWorkflow()]
	delete(s.locks.byWorkflow, req.GetWorkflow())
	s.locks.mu.Unlock()
	if held != nil {
		held.timer.Stop()
		release(held)
	}
	pos, err := s.position(ctx, s.db)
	if err != nil {
		return nil, err
	}
	return &rowliftv1.FreezeResponse{Position: pos, Changed: held != nil}, nil
}

// expireLock releases a lock whose lease passed without an Unfreeze or a
// refresh.
func (s *Server) expireLock(workflow string, held *tableLock, log *zap.Logger) {
	s.locks.mu.Lock()
	if s.locks.byWorkflow[workflow] != held {
		s.locks.mu.Unlock()
		return // unfrozen meanwhile
	}
	if left := time.Until(held.expires); left > 0 {
		held.timer.Reset(left) // refreshed as the timer fired
		s.locks.mu.Unlock()
		return
	}
	delete(s.locks.byWorkflow, workflow)
	s.locks.mu.Unlock()
	release(held)
	log.Warn("freeze lease expired without an unfreeze: tables unlocked", zap.Strings("locked", held.tables))
}

// releaseLocks releases every held lock, when the streamer shuts down.
func (s *Server) releaseLocks() {
	s.locks.mu.Lock()
	defer s.locks.mu.Unlock()
	for workflow, held := range s.locks.byWorkflow {
		held.timer.Stop()
		release(held)
		delete(s.locks.byWorkflow, workflow)
		s.log.Info("freeze lock released at shutdown", zap.String("workflow", workflow), zap.Strings("locked", held.tables))
	}
}

// release unlocks and drops the lock's session: its settings must not go
// back to the pool, and closing it frees the tables even if UNLOCK fails.
func release(held *tableLock) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = held.conn.ExecContext(ctx, "UNLOCK TABLES")
	discard(held.conn)
}

// discard closes a session instead of returning it to the pool.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}
