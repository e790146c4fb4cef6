// Package dbconn opens connections to source and target servers with the session
// settings that make rowlift's copy byte-exact, and turns connection failures into
// messages that say what to do. DSNs carry passwords: only Redacted forms may be
// logged or returned.
package dbconn

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-sql-driver/mysql"
)

// Role says which side a pool talks to; targets get the write session settings.
type Role int

// The roles.
const (
	Source Role = iota
	Target
)

// Open parses a go-sql-driver DSN and opens a pool whose sessions move values
// unconverted: SET NAMES binary (strings are the column's own bytes both ways),
// time_zone '+00:00' (TIMESTAMP values are exact), parseTime off and the server's
// own max_allowed_packet. Source sessions run with no SQL mode; target sessions
// take strict SQL mode with NO_AUTO_VALUE_ON_ZERO (an id of 0 stays 0) and no
// foreign key checks (a copy writes children before parents).
//
// TLS follows the DSN (see ParseDSN), for every connection of the pool.
func Open(dsn string, role Role) (*sql.DB, *mysql.Config, error) {
	cfg, err := ParseDSN(dsn)
	if err != nil {
		return nil, nil, err
	}
	if err := cfg.Apply(mysql.Charset("binary", "")); err != nil {
		return nil, nil, err
	}
	cfg.ParseTime = false
	cfg.MaxAllowedPacket = 0 // read the server's value instead of assuming 64 MiB
	cfg.InterpolateParams = true
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	// Source sessions only read, with no SQL mode: a key that is a zero date
	// (stored under an older mode) must work as a literal in a chunk's WHERE,
	// which MySQL's default strict mode refuses, and ANSI_QUOTES or
	// NO_BACKSLASH_ESCAPES would change how literals read.
	cfg.Params["sql_mode"] = "''"
	if role == Target {
		// Affected rows count rows found, not rows changed: an UPDATE to the same
		// values still proves the row was there.
		cfg.ClientFoundRows = true
		// Replay sends a group's statements in one query: one round trip, not
		// one per row.
		cfg.MultiStatements = true
		cfg.Params["sql_mode"] = "'STRICT_ALL_TABLES,NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION'"
		cfg.Params["foreign_key_checks"] = "0"
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("connector for %s: %w", Redacted(cfg), err)
	}
	return sql.OpenDB(conn), cfg, nil
}

// Redacted is user@address/db, for logs and messages: never the password.
func Redacted(cfg *mysql.Config) string {
	return fmt.Sprintf("%s@%s/%s", cfg.User, cfg.Addr, cfg.DBName)
}

// Ping checks that the server accepts the pool's credentials, and explains the
// failure otherwise.
func Ping(ctx context.Context, db *sql.DB, cfg *mysql.Config, what string) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout+time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		return Explain(err, cfg, what)
	}
	return nil
}

// ErrAccessDenied marks failures a retry will not fix until credentials change.
var ErrAccessDenied = errors.New("access denied")

// ErrTLS marks failures of TLS between rowlift and the server, which a retry
// will not fix until the DSN or the server's TLS settings change.
var ErrTLS = errors.New("TLS")

// ErrUnreachable marks failures to reach the server at all.
var ErrUnreachable = errors.New("server unreachable")

// Explain wraps a connection error with what it means and what to do.
func Explain(err error, cfg *mysql.Config, what string) error {
	if tlsErr := explainTLS(err, cfg, what); tlsErr != nil {
		return fmt.Errorf("%w: %w", ErrTLS, tlsErr)
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) && (me.Number == accessDenied || me.Number == 1044 || me.Number == 1698) {
		hint := ""
		if cfg.TLS == nil {
			hint = fmt.Sprintf("; or, since MariaDB refuses a login without TLS under require_secure_transport=ON this same way, "+
				"add tls=true to the %s DSN if the server requires TLS", what)
		}
		return fmt.Errorf("%w: %s server %s rejected the credentials of user %q (%s): check the user and password in the %s DSN%s",
			ErrAccessDenied, what, cfg.Addr, cfg.User, me.Message, what, hint)
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, mysql.ErrInvalidConn) {
		return fmt.Errorf("%w: cannot reach %s server %s: %v (is it running, and is the address in the %s DSN right?)",
			ErrUnreachable, what, cfg.Addr, err, what)
	}
	return fmt.Errorf("%s server %s: %w", what, Redacted(cfg), err)
}

// ServerError is the server error number in err, from either client rowlift
// uses (go-sql-driver for queries, go-mysql for the binlog dump), or 0 when err
// is not a server's.
func ServerError(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	var ge *gomysql.MyError
	if errors.As(err, &ge) {
		return ge.Code
	}
	return 0
}
