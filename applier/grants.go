package applier

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"

	"github.com/rowlift/rowlift/internal/grants"
	"github.com/rowlift/rowlift/internal/rowcodec"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// Server errors that say a target table is not there yet.
const (
	unknownDatabase = 1049
	noSuchTable     = 1146
)

// checkGrants tries, changing nothing, what a stream of spec does on the
// target, before it does any of it: write the sidecar schema, read and write
// rows of each target table, and create those that do not exist yet. What is
// missing comes back as a *grants.Error naming the GRANT to run, which the
// stream retries with as its message until the grant is given. Of a table the
// user may not even read, only SELECT is named: the server hides whether it
// exists, and so whether rowlift would create it.
func checkGrants(ctx context.Context, db *sql.DB, spec *rowliftv1.WorkflowSpec) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("check the target user's grants: %w", err)
	}
	defer conn.Close()
	probes := state.Probes()
	targetDB := TargetDatabase(spec)
	dbOn := rowcodec.Ident(targetDB) + ".*"
	const why = "to copy and apply the source's rows into it"
	var missing []grants.Grant
	for _, t := range spec.GetTables() {
		name, mapped := TargetTable(spec, t.GetName())
		table := rowcodec.QualifiedIdent(targetDB, name)
		column, err := firstColumn(ctx, conn, table)
		switch {
		case grants.Denied(err):
			missing = append(missing, grants.Grant{Privilege: "SELECT", On: table, Why: why})
		case isMySQLError(err, noSuchTable) || isMySQLError(err, unknownDatabase):
			// One rowlift does not create is reported by CheckTargets.
			if !mapped && !spec.GetOptions().GetSkipCreateTables() {
				probes = append(probes, grants.Probe{
					Grant: createGrant(targetDB),
					// Refused for the duplicate column once CREATE is granted.
					Statement: "CREATE TABLE " + table + " (rowlift_probe INT, rowlift_probe INT)"})
			}
			probes = append(probes, grants.RowProbes(table, "`rowlift_probe`", dbOn, why)...)
		case err != nil:
			return fmt.Errorf("check the target user's grants on %s.%s: %w", targetDB, name, err)
		default:
			probes = append(probes, grants.RowProbes(table, rowcodec.Ident(column), table, why)...)
		}
	}
	more, err := grants.Check(ctx, conn, probes)
	if err != nil {
		return err
	}
	return grants.Missing(ctx, conn, "target", "", append(more, missing...))
}

// firstColumn is the name of the first column of table, which it reads no
// row of.
func firstColumn(ctx context.Context, conn *sql.Conn, table string) (string, error) {
	rows, err := conn.QueryContext(ctx, "SELECT * FROM "+table+" LIMIT 0")
	if err != nil {
		return "", err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return "", err
	}
	if len(cols) == 0 {
		return "", fmt.Errorf("%s has no columns", table)
	}
	return cols[0], rows.Close()
}

// isMySQLError reports a server error of the given number.
func isMySQLError(err error, number uint16) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == number
}

// createGrant is the grant that lets rowlift create target tables: on the
// database, which CREATE DATABASE IF NOT EXISTS needs too.
func createGrant(targetDB string) grants.Grant {
	return grants.Grant{Privilege: "CREATE", On: rowcodec.Ident(targetDB) + ".*", Why: "to create the tables it copies into"}
}
