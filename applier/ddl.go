package applier

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/rowlift/rowlift/internal/ddlscope"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/testhook"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// execDDL applies a schema change of moved tables on the target (on_ddl
// EXEC), its names mapped to the target's, exactly once: the statement
// commits on its own, never with the position after it, so the target
// tables' definitions are recorded before it runs (state.StartDDLRun), and a
// run that meets the same statement again after a restart applies it only if
// they still read as before. A statement the target refuses stops the
// workflow at it, as on_ddl STOP does, for the operator to make an equivalent
// change and resume.
func (c *controller) execDDL(ctx context.Context, play *player, ddl *rowliftv1.DDL) error {
	store, db := c.engine.store, c.engine.db
	name, source := c.spec.GetName(), c.source.GetName()
	targetDB := TargetDatabase(c.spec)
	names := map[string]string{}
	for _, t := range c.spec.GetTables() {
		names[t.GetName()], _ = TargetTable(c.spec, t.GetName())
	}
	var moved []string
	for _, t := range c.spec.GetTables() {
		moved = append(moved, t.GetName())
	}
	stop := func(format string, args ...any) error {
		return &permanentError{state: state.Stopped, ddl: ddl.GetGtid(), err: fmt.Errorf("on_ddl exec: %q on %s (source transaction %s): "+format+
			"; make the equivalent change on the target, then resume the workflow: it goes on past the statement",
			append([]any{ddl.GetStatement(), strings.Join(ddl.GetTables(), ", "), ddl.GetGtid()}, args...)...)}
	}
	stmt, err := ddlscope.New(c.spec.GetSourceDatabase(), moved).Rewrite(ddl.GetStatement(), ddl.GetDatabase(), targetDB, names)
	if err != nil {
		return stop("%v", err)
	}
	var tables []string
	for _, t := range ddl.GetTables() {
		tables = append(tables, names[t])
	}
	before, err := definitions(ctx, db, targetDB, tables)
	if err != nil {
		return err
	}
	last, err := store.LastDDLRun(ctx, name, source)
	if err != nil {
		return err
	}
	if last.GTID == ddl.GetGtid() && last.Before != before {
		c.log.Info("schema change applied on the target before a restart", zap.String("gtid", ddl.GetGtid()))
		return play.advance(ctx, ddl.GetPosition().GetGtidSet(), ddl.GetCommitTimeUs())
	}
	if last.GTID != ddl.GetGtid() {
		if err := store.StartDDLRun(ctx, name, source, play.owner, state.DDLRun{GTID: ddl.GetGtid(), Before: before}); err != nil {
			return err
		}
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("schema change: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "USE "+rowcodec.Ident(targetDB)); err != nil {
		return fmt.Errorf("schema change: %w", err)
	}
	c.log.Info("applying a schema change on the target", zap.String("statement", stmt), zap.String("gtid", ddl.GetGtid()))
	if _, err := conn.ExecContext(ctx, stmt); err != nil {
		if ctx.Err() != nil || errors.Is(err, sql.ErrConnDone) {
			return fmt.Errorf("schema change: %w", err)
		}
		return stop("the target refused %q: %v", stmt, err)
	}
	c.log.Info("schema change applied on the target", zap.String("gtid", ddl.GetGtid()))
	testhook.Delay(ctx, testhook.DDLApplied)
	return play.advance(ctx, ddl.GetPosition().GetGtidSet(), ddl.GetCommitTimeUs())
}

// definitions is the target tables' SHOW CREATE TABLE, one after the other,
// a missing table as its name alone.
func definitions(ctx context.Context, db *sql.DB, database string, tables []string) (string, error) {
	var b strings.Builder
	for _, t := range tables {
		var name, create string
		err := db.QueryRowContext(ctx, "SHOW CREATE TABLE "+rowcodec.QualifiedIdent(database, t)).Scan(&name, &create)
		switch {
		case isMySQLError(err, 1146):
			create = "(no table)"
		case err != nil:
			return "", fmt.Errorf("read the definition of %s.%s: %w", database, t, err)
		}
		fmt.Fprintf(&b, "%s: %s\n", t, create)
	}
	return b.String(), nil
}
