// Package grants finds the privileges a rowlift role's database user lacks and
// says which GRANT gives each one, so an operator reads the statement to run
// instead of the server's "command denied" (or, for a binlog dump on MariaDB,
// an "access denied" that reads like a wrong password).
//
// It finds them by trying statements the server refuses for a missing
// privilege before it does anything (a SELECT ... LIMIT 0, a DELETE ... WHERE
// FALSE): no row is read or written, and nothing reaches the binlog. The
// server checks privileges before anything else, so a probe that fails with
// any other server error (an unknown table, a duplicate column) had its
// privilege.
package grants

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/rowlift/rowlift/internal/dbconn"
)

// Grant is a privilege a role needs on an object, and what for.
type Grant struct {
	// Privilege as GRANT spells it: "SELECT", "REPLICATION SLAVE".
	Privilege string
	// On is the GRANT's object: "*.*", "`db`.*", "`db`.`t`".
	On string
	// Why completes "which rowlift needs ...": "to read the binlog".
	Why string
}

// Error names each grant a role's user lacks and the GRANT that gives it.
type Error struct {
	// Role is whose user it is: "source", "target".
	Role string
	// Account is the user as a GRANT names it ('mover'@'10.%', see Account).
	Account string
	Missing []Grant
}

// Error says, for each object and purpose, which privileges are missing and
// the one GRANT that gives them all.
func (e *Error) Error() string {
	var parts []string
	for i := 0; i < len(e.Missing); {
		g := e.Missing[i]
		privs := []string{g.Privilege}
		for i++; i < len(e.Missing) && e.Missing[i].On == g.On && e.Missing[i].Why == g.Why; i++ {
			privs = append(privs, e.Missing[i].Privilege)
		}
		noun := "privilege"
		if len(privs) > 1 {
			noun = "privileges"
		}
		parts = append(parts, fmt.Sprintf("%s user %s lacks the %s %s on %s, which rowlift needs %s: run GRANT %s ON %s TO %s",
			e.Role, e.Account, strings.Join(privs, ", "), noun, g.On, g.Why, strings.Join(privs, ", "), g.On, e.Account))
	}
	return strings.Join(parts, "; ")
}

// Missing is the *Error naming missing for the role's user, or nil when
// nothing is missing. A grant named twice (probes of several tables granted
// on one schema) is named once.
func Missing(ctx context.Context, q Queryer, role, user string, missing []Grant) error {
	if len(missing) == 0 {
		return nil
	}
	var once []Grant
	seen := map[Grant]bool{}
	for _, g := range missing {
		if !seen[g] {
			seen[g] = true
			once = append(once, g)
		}
	}
	return &Error{Role: role, Account: Account(ctx, q, user), Missing: once}
}

// Refused is the *Error naming g when err is the server refusing a statement
// that needs g for a missing privilege (see Denied), else err as it is: for a
// statement that fails on a grant revoked after rowlift checked it.
func Refused(ctx context.Context, q Queryer, role string, err error, g Grant) error {
	if !Denied(err) {
		return err
	}
	return Missing(ctx, q, role, "", []Grant{g})
}

// Queryer is what Account and Check run statements on: a *sql.DB or *sql.Conn.
type Queryer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Account is the account the server maps the connection's user to
// (CURRENT_USER(), which may be 'mover'@'10.%' for a user who logs in from
// 10.1.2.3), quoted for a GRANT. When it cannot be read (the server went
// away meanwhile) it is user at any host, or a placeholder for the operator
// to fill in when user is empty (the caller does not know it).
func Account(ctx context.Context, q Queryer, user string) string {
	var account string
	if err := q.QueryRowContext(ctx, "SELECT CURRENT_USER()").Scan(&account); err == nil {
		if at := strings.LastIndexByte(account, '@'); at >= 0 {
			return quote(account[:at]) + "@" + quote(account[at+1:])
		}
	}
	if user == "" {
		user = "USER"
	}
	return quote(user) + "@'%'"
}

func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// Server errors that mean a privilege is missing.
const (
	dbAccessDenied       = 1044 // on a database: LOCK TABLES, CREATE DATABASE
	tableAccessDenied    = 1142 // a statement on a table: SELECT, INSERT, ...
	columnAccessDenied   = 1143
	specificAccessDenied = 1227 // a global privilege: REPLICATION SLAVE on MySQL
)

// Denied reports whether err is the server refusing a statement for a
// missing privilege.
func Denied(err error) bool {
	switch dbconn.ServerError(err) {
	case dbAccessDenied, tableAccessDenied, columnAccessDenied, specificAccessDenied:
		return true
	}
	return false
}

// Probe is a statement that needs Grant and does nothing else that matters
// (see the package comment).
type Probe struct {
	Grant     Grant
	Statement string
}

// Check runs each probe on q and returns the grants of those the server
// refused for a missing privilege. An error that is not the server's (a lost
// connection) ends the check.
func Check(ctx context.Context, q Queryer, probes []Probe) ([]Grant, error) {
	var missing []Grant
	for _, p := range probes {
		_, err := q.ExecContext(ctx, p.Statement)
		switch {
		case err == nil:
		case Denied(err):
			missing = append(missing, p.Grant)
		case dbconn.ServerError(err) == 0:
			return nil, fmt.Errorf("check the %s privilege on %s: %w", p.Grant.Privilege, p.Grant.On, err)
		}
	}
	return missing, nil
}

// RowProbes are the probes of reading and writing rows of a table: SELECT,
// INSERT, UPDATE and DELETE, each granted on on, for why. table is its
// qualified, quoted name and column one of its columns, quoted (any name when
// the table does not exist yet: the server checks the privileges first). No
// probe reads a column, which would need SELECT on it too.
func RowProbes(table, column, on, why string) []Probe {
	probe := func(privilege, stmt string) Probe {
		return Probe{Grant: Grant{Privilege: privilege, On: on, Why: why}, Statement: stmt}
	}
	return []Probe{
		probe("SELECT", "SELECT 1 FROM "+table+" LIMIT 0"),
		probe("INSERT", "INSERT INTO "+table+" ("+column+") SELECT NULL FROM DUAL WHERE 1 = 0"),
		probe("UPDATE", "UPDATE "+table+" SET "+column+" = DEFAULT WHERE 1 = 0"),
		probe("DELETE", "DELETE FROM "+table+" WHERE 1 = 0"),
	}
}
