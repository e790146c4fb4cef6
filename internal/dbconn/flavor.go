package dbconn

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// Flavor is the kind of server a pool talks to: the SQL that differs between
// MariaDB and MySQL (positions, settings, the chunk fence, DDL) branches on it.
type Flavor string

// The flavors, named as go-mysql and the sandbox name them.
const (
	MariaDB Flavor = "mariadb"
	MySQL   Flavor = "mysql"
)

// Queryer is what flavor and position reads need: a pool, a connection or a
// transaction.
type Queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// ServerFlavor reads which kind of server q talks to, and its version text.
func ServerFlavor(ctx context.Context, q Queryer) (Flavor, string, error) {
	var version string
	if err := q.QueryRowContext(ctx, "SELECT @@version").Scan(&version); err != nil {
		return "", "", fmt.Errorf("read server version: %w", err)
	}
	return flavorOfVersion(version), version, nil
}

func flavorOfVersion(version string) Flavor {
	if strings.Contains(strings.ToLower(version), "mariadb") {
		return MariaDB
	}
	return MySQL
}

// Position reads the server's binlog position as a GTID set: every
// transaction written to its binlog (MariaDB: per domain, the last one), with
// MySQL's line breaks between UUIDs removed.
func (f Flavor) Position(ctx context.Context, q Queryer) (string, error) {
	var pos string
	if err := q.QueryRowContext(ctx, "SELECT "+f.PositionVar()).Scan(&pos); err != nil {
		return "", fmt.Errorf("read binlog position: %w", err)
	}
	return CleanPosition(pos), nil
}

// PositionVar is the system variable Position reads, for queries that read it
// beside something else in one statement.
func (f Flavor) PositionVar() string {
	if f == MySQL {
		return "@@GLOBAL.gtid_executed"
	}
	return "@@GLOBAL.gtid_binlog_pos"
}

// CleanPosition removes the line breaks MySQL puts between a GTID set's UUIDs.
func CleanPosition(pos string) string { return strings.ReplaceAll(pos, "\n", "") }

// Position reads the binlog position of a server whose flavor is not known yet.
func Position(ctx context.Context, q Queryer) (string, error) {
	f, _, err := ServerFlavor(ctx, q)
	if err != nil {
		return "", err
	}
	return f.Position(ctx, q)
}
