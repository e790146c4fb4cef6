package applier

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"

	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/schema"
	"github.com/rowlift/rowlift/internal/testhook"
)

// addDeferredKeys adds the secondary keys left out of the target tables that
// every source has copied (see schema.SplitSecondaryKeys), then moves the
// workflow on if that was all its copy lacked. It runs beside the stream, so
// an index build of any length holds up neither the copy of other tables nor
// the replay, whose writes to the table the online ALTER takes meanwhile.
func (c *controller) addDeferredKeys(ctx context.Context) error {
	store := c.engine.store
	pending, err := store.KeysToAdd(ctx, c.spec.GetName())
	if err != nil || len(pending) == 0 {
		return err
	}
	tables := make([]string, 0, len(pending))
	for t := range pending {
		tables = append(tables, t)
	}
	slices.Sort(tables)
	for _, table := range tables {
		name, _ := TargetTable(c.spec, table)
		began := time.Now()
		added, err := addKeys(ctx, c.engine.db, TargetDatabase(c.spec), name, pending[table])
		if err != nil {
			return err
		}
		if err := store.KeysAdded(ctx, c.spec.GetName(), table); err != nil {
			return err
		}
		c.log.Info("secondary keys added", zap.String("table", table), zap.Strings("keys", added),
			zap.Duration("took", time.Since(began)))
	}
	return c.markCopied(ctx)
}

// addKeys adds to database.table those of keys it lacks, in one online ALTER
// TABLE (one scan of the table builds them all), and returns their names. A
// key another ALTER added meanwhile (a killed applier's, which the server
// finishes) is found by looking again.
func addKeys(ctx context.Context, db *sql.DB, database, table string, keys []schema.DeferredKey) ([]string, error) {
	ident := rowcodec.QualifiedIdent(database, table)
	var duplicate error // the last ALTER's "duplicate key name"
	for tried := len(keys) + 1; ; {
		have, err := indexNames(ctx, db, database, table)
		if err != nil {
			return nil, err
		}
		var adds, names []string
		for _, k := range keys {
			if !have[strings.ToLower(k.Name)] {
				adds, names = append(adds, "ADD "+k.Definition), append(names, k.Name)
			}
		}
		failed := func(err error) error {
			return fmt.Errorf("add secondary keys %s to %s.%s after its copy: %w", strings.Join(names, ", "), database, table, err)
		}
		switch {
		case len(adds) == 0:
			return nil, nil
		case len(adds) >= tried:
			// A key is named in the table and not in information_schema.
			return nil, failed(duplicate)
		}
		tried = len(adds)
		testhook.Delay(ctx, testhook.AddKeys)
		_, err = db.ExecContext(ctx, "ALTER TABLE "+ident+" "+strings.Join(adds, ", "))
		var me *mysql.MySQLError
		switch {
		case err == nil:
			return names, nil
		case errors.As(err, &me) && me.Number == 1061:
			duplicate = err // added meanwhile: what is left is looked for again
			continue
		}
		return nil, failed(err)
	}
}

// indexNames are the names of a table's indexes, in lower case (index names
// are case-insensitive).
func indexNames(ctx context.Context, db *sql.DB, database, table string) (map[string]bool, error) {
	rows, err := db.QueryContext(ctx, "SELECT DISTINCT INDEX_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
		database, table)
	if err != nil {
		return nil, fmt.Errorf("read the keys of %s.%s: %w", database, table, err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("read the keys of %s.%s: %w", database, table, err)
		}
		out[strings.ToLower(name)] = true
	}
	return out, rows.Err()
}
