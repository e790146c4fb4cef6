package streamer

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/frozen"
	"github.com/rowlift/rowlift/internal/grants"
	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/rowcodec"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// Server errors the streamer tells apart.
const (
	specificAccessDenied = 1227 // a binlog dump without REPLICATION SLAVE (MySQL)
	accessDenied         = 1045 // the same on MariaDB
	tableAccessDenied    = 1142 // LOCK TABLES without SELECT on the table
	unknownDatabase      = 1049
	noSuchTable          = 1146
	lockWaitTimeout      = 1205
	// tableDefChanged ends a snapshot's read of a table a DDL changed after
	// the snapshot began (MySQL's ER_TABLE_DEF_CHANGED).
	tableDefChanged = 1412
	// readOnlyServer refuses a statement read_only forbids (ER_OPTION_PREVENTS_STATEMENT).
	readOnlyServer = 1290
)

// binlogProbeWait bounds how long the binlog probe waits for the source's
// first event or its refusal, which comes at once: a dump still silent then
// was accepted, and its server is locating the position in a large file.
const binlogProbeWait = 10 * time.Second

// replicationGrant is what reading the binlog needs.
var replicationGrant = grants.Grant{Privilege: "REPLICATION SLAVE", On: "*.*", Why: "to read the binlog"}

// selectGrant is what copying and verifying a table needs.
func selectGrant(database, table string) grants.Grant {
	return grants.Grant{Privilege: "SELECT", On: rowcodec.QualifiedIdent(database, table), Why: "to copy and verify it"}
}

// lockGrant is what fencing a chunk needs.
func lockGrant(database string) grants.Grant {
	return grants.Grant{Privilege: "LOCK TABLES", On: rowcodec.Ident(database) + ".*",
		Why: "to fence each chunk (a brief LOCK TABLES ... WRITE: neither flavor has an exact lock-free snapshot position)"}
}

// checkTableGrants tries, without reading a row, each statement a stream runs
// on the tables that needs a privilege beyond connecting: SELECT on every table
// and LOCK TABLES, which the chunk fence takes. It names the
// GRANT of each one missing (PermissionDenied). The server checks privileges
// before it waits for a table's metadata lock, so a probe that times out
// waiting for one (a session holds the table locked) had its privilege. A
// table that does not exist is left for the plan to report.
func (s *Server) checkTableGrants(ctx context.Context, database string, tables []string) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return status.Errorf(codes.Unavailable, "check the source user's grants: %v", err)
	}
	// Its short lock wait, and a lock a failed UNLOCK would leave, must not
	// reach the pool.
	defer discard(conn)
	if _, err := conn.ExecContext(ctx, "SET SESSION lock_wait_timeout = 1"); err != nil {
		return status.Errorf(codes.Unavailable, "check the source user's grants: %v", err)
	}
	var missing []grants.Grant
	readable := ""
	for _, t := range tables {
		_, err := conn.ExecContext(ctx, "SELECT 1 FROM "+rowcodec.QualifiedIdent(database, t)+" LIMIT 0")
		switch {
		case err == nil || isLockWaitTimeout(err):
			readable = t
		case grants.Denied(err):
			missing = append(missing, selectGrant(database, t))
		case !isMySQLError(err, noSuchTable) && !isMySQLError(err, unknownDatabase):
			return status.Errorf(codes.Unavailable, "check the source user's SELECT on %s.%s: %v", database, t, err)
		}
	}
	if readable != "" {
		denied, err := probeLock(ctx, conn, database, readable)
		if err != nil {
			return err
		}
		if denied {
			missing = append(missing, lockGrant(database))
		}
	}
	return s.missingGrants(ctx, missing)
}

// probeLock tries LOCK TABLES ... READ on a table the user may read, on a
// connection whose lock wait is short, and unlocks it at once: denied says
// the server refused it for want of LOCK TABLES. A lock wait that times out
// had the privilege (see checkTableGrants).
func probeLock(ctx context.Context, conn *sql.Conn, database, table string) (denied bool, err error) {
	_, err = conn.ExecContext(ctx, "LOCK TABLES "+rowcodec.QualifiedIdent(database, table)+" READ")
	if err == nil {
		_, err = conn.ExecContext(ctx, "UNLOCK TABLES")
	}
	switch {
	case grants.Denied(err):
		return true, nil
	case err != nil && !isLockWaitTimeout(err):
		return false, status.Errorf(codes.Unavailable, "check the source user's LOCK TABLES on %s: %v", database, err)
	}
	return false, nil
}

// renamePrivileges are what RENAME TABLE needs: ALTER and DROP on the table
// renamed, CREATE and INSERT on its new name.
var renamePrivileges = []string{"ALTER", "DROP", "CREATE", "INSERT"}

// CheckFreeze tries what a Freeze or Unfreeze of req needs of the source user
// (see the proto), changing nothing. It runs when a switch starts rather than
// at creation: these are privileges to change the application's tables,
// which an operator may grant only for the cutover, long after the copy
// began.
//
// RENAME (and LOCK, whose cutover ends with a rename) renames each table to
// its frozen twin and back, so it needs all four renamePrivileges on both
// names. The probe renames the twin to itself: privileges are checked first,
// and the twin, which does not exist before a freeze (and before an unfreeze
// only the reverse workflow's applier writes), has no metadata lock the
// application waits on, where a probe on the live table would queue an
// exclusive lock ahead of its writers. So grants on the live name alone are
// not checked; the README asks for them on the database. LOCK also needs
// LOCK TABLES.
func (s *Server) CheckFreeze(ctx context.Context, req *rowliftv1.FreezeRequest) (*rowliftv1.CheckFreezeResponse, error) {
	if err := checkFreezeRequest(req); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "check freeze: %v", err)
	}
	if err := s.ping(ctx); err != nil {
		return nil, err
	}
	mode := req.GetMode()
	if mode == rowliftv1.FreezeMode_FREEZE_MODE_NONE {
		return &rowliftv1.CheckFreezeResponse{}, nil
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, s.sourceError("connect", err)
	}
	defer discard(conn)
	if _, err := s.boundLockWait(ctx, conn, time.Second); err != nil {
		return nil, err
	}
	db := req.GetDatabase()
	var missing []grants.Grant
	for _, t := range req.GetTables() {
		twin, err := frozen.Name(t)
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		ident := rowcodec.QualifiedIdent(db, twin)
		_, err = conn.ExecContext(ctx, "RENAME TABLE "+ident+" TO "+ident)
		switch {
		case grants.Denied(err):
			missing = append(missing, renameGrants(db, err)...)
		case err != nil && dbconn.ServerError(err) == 0:
			return nil, s.sourceError("check the privileges to rename "+db+"."+twin, err)
		}
		if len(missing) > 0 {
			break // one grant on the database gives it for every table
		}
	}
	if mode == rowliftv1.FreezeMode_FREEZE_MODE_LOCK {
		denied, err := probeLock(ctx, conn, db, req.GetTables()[0])
		if err != nil {
			return nil, err
		}
		if denied {
			missing = append(missing, grants.Grant{Privilege: "LOCK TABLES", On: rowcodec.Ident(db) + ".*",
				Why: "for a cutover's LOCK freeze (LOCK TABLES ... READ)"})
		}
	}
	if err := s.missingGrants(ctx, missing); err != nil {
		return nil, err
	}
	return &rowliftv1.CheckFreezeResponse{}, nil
}

// renameGrants are the grants a RENAME TABLE refused with err lacks: the
// privilege the server names ("DROP command denied to user ..."), or all
// renamePrivileges when it names none (a user with none of them on the
// database is refused for the database).
func renameGrants(db string, err error) []grants.Grant {
	privileges := renamePrivileges
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		if first, _, ok := strings.Cut(me.Message, " "); ok && slices.Contains(renamePrivileges, first) {
			privileges = []string{first}
		}
	}
	out := make([]grants.Grant, len(privileges))
	for i, p := range privileges {
		out[i] = grants.Grant{Privilege: p, On: rowcodec.Ident(db) + ".*",
			Why: "for a cutover's freeze, which renames the tables to their frozen names and back (RENAME TABLE)"}
	}
	return out
}

// checkBinlogGrant starts a binlog dump at the source's current position and
// waits for its first event, so a user who may read tables but not the binlog
// is refused when the workflow is created, not once its stream starts.
func (s *Server) checkBinlogGrant(ctx context.Context, flavor dbconn.Flavor) error {
	pos, err := flavor.Position(ctx, s.db)
	if err != nil {
		return status.Errorf(codes.Unavailable, "read the source's position: %v", err)
	}
	start, err := gtid.Parse(pos)
	if err != nil {
		return status.Errorf(codes.Unavailable, "source position %q: %v", pos, err)
	}
	syncer, events, err := s.startBinlog(ctx, start, flavor, newDumpWatch(start, flavor == dbconn.MariaDB, s.log), s.log)
	if err != nil {
		return err
	}
	defer syncer.Close()
	pctx, cancel := context.WithTimeout(ctx, binlogProbeWait)
	defer cancel()
	if _, err := events.GetEvent(pctx); err != nil {
		if isReplicationDenied(err) {
			return s.replicationDenied(ctx, err)
		}
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			// The server took the dump and is still locating the position in
			// a large binlog file (MariaDB sends nothing until it has): it
			// refuses a dump without the grant at once, so the grant is there.
			return nil
		}
		return status.Errorf(codes.Unavailable, "read the source's binlog: %v", err)
	}
	return nil
}

// replicationDenied is the PermissionDenied status of a binlog dump the source
// refused, with what it said.
func (s *Server) replicationDenied(ctx context.Context, err error) error {
	st := status.Convert(s.missingGrants(ctx, []grants.Grant{replicationGrant}))
	return status.Errorf(codes.PermissionDenied, "%s (the source refused the binlog dump: %v)", st.Message(), err)
}

// missingGrants is the PermissionDenied status that names every grant, or nil.
func (s *Server) missingGrants(ctx context.Context, missing []grants.Grant) error {
	if err := grants.Missing(ctx, s.db, "source", s.cfg.User, missing); err != nil {
		return status.Error(codes.PermissionDenied, err.Error())
	}
	return nil
}

// isReplicationDenied reports the errors a binlog dump gets without
// REPLICATION SLAVE: MySQL's names the privilege; MariaDB refuses the replica's
// registration with the error of a wrong password, which it is not, since the
// same credentials passed the stream's ping.
func isReplicationDenied(err error) bool {
	code := dbconn.ServerError(err)
	return code == specificAccessDenied || code == accessDenied
}

// isMySQLError reports a server error of the given number.
func isMySQLError(err error, number uint16) bool { return dbconn.ServerError(err) == number }
