package applier

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"

	"github.com/rowlift/rowlift/internal/ddlscope"
	"github.com/rowlift/rowlift/internal/reshard"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/testhook"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// scope is what the workflow moves, for reading its statements.
func (c *controller) scope() *ddlscope.Scope {
	var moved []string
	for _, t := range c.spec.GetTables() {
		moved = append(moved, t.GetName())
	}
	return ddlscope.New(c.spec.GetSourceDatabase(), moved)
}

// targetNames maps each moved table to its name on the target.
func (c *controller) targetNames() map[string]string {
	names := map[string]string{}
	for _, t := range c.spec.GetTables() {
		names[t.GetName()], _ = TargetTable(c.spec, t.GetName())
	}
	return names
}

// stopAt stops the workflow at ddl, as on_ddl STOP does, saying why and that
// a resume goes past it once the target has the change.
func stopAt(ddl *rowliftv1.DDL, format string, args ...any) error {
	return &permanentError{state: state.Stopped, ddl: ddl.GetGtid(), err: fmt.Errorf("stopped at DDL on %s (source transaction %s): %q: "+format+
		"; then resume the workflow: it goes on past the statement",
		append([]any{strings.Join(ddl.GetTables(), ", "), ddl.GetGtid(), ddl.GetStatement()}, args...)...)}
}

// execDDL applies a schema change of moved tables on the target (on_ddl
// EXEC), its names mapped to the target's (ddlscope.Rewrite). A statement the
// target refuses stops the workflow at it, for the operator to make an
// equivalent change and resume.
func (c *controller) execDDL(ctx context.Context, play *player, ddl *rowliftv1.DDL) error {
	names := c.targetNames()
	stmt, err := c.scope().Rewrite(ddl.GetStatement(), ddl.GetDatabase(), TargetDatabase(c.spec), names)
	if err != nil {
		return stopAt(ddl, "on_ddl exec: %v; make the equivalent change on the target", err)
	}
	var tables []string
	for _, t := range ddl.GetTables() {
		tables = append(tables, names[t])
	}
	if err := c.runOnce(ctx, play, ddl, tables, []string{stmt}); err != nil {
		return err
	}
	return play.advance(ctx, ddl.GetPosition().GetGtidSet(), ddl.GetCommitTimeUs())
}

// keepShadow records a statement on an online schema change tool's shadow
// table with the position after it: a CREATE or a DROP starts the shadow's
// record over, an ALTER is kept for the swap (swapShadow).
func (c *controller) keepShadow(ctx context.Context, play *player, ddl *rowliftv1.DDL) error {
	change := c.scope().Classify(ddl.GetStatement(), ddl.GetDatabase()).Shadow
	if change.Kind == 0 {
		return fmt.Errorf("streamer sent %q as a statement on shadow table %s, which it is not", ddl.GetStatement(), ddl.GetShadow())
	}
	tx, err := play.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("keep shadow statement: begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	name, source := c.spec.GetName(), c.source.GetName()
	if change.Kind == ddlscope.ShadowAlter {
		c.log.Info("an online schema change alters its shadow table", zap.String("table", change.Table), zap.String("shadow", change.Shadow),
			zap.String("statement", ddl.GetStatement()))
		err = state.AddShadowStatement(ctx, tx, name, source, change.Shadow, state.ShadowStatement{Statement: ddl.GetStatement(), Database: ddl.GetDatabase()})
	} else {
		err = state.ResetShadow(ctx, tx, name, source, change.Shadow)
	}
	if err != nil {
		return err
	}
	return play.commit(ctx, tx, ddl.GetPosition().GetGtidSet(), ddl.GetCommitTimeUs())
}

// swapShadow follows an online schema change tool's cut-over, the RENAME
// that swaps its shadow table in for a moved table: the shadow was made like
// the table and then altered, and holds the same rows at the swap, so the
// target's table takes the shadow's ALTERs, its names mapped, and the shadow
// is never created on the target. Without EXEC it stops there, naming them.
func (c *controller) swapShadow(ctx context.Context, play *player, ddl *rowliftv1.DDL) error {
	table := ddl.GetTables()[0]
	kept, err := c.engine.store.ShadowStatements(ctx, c.spec.GetName(), c.source.GetName(), ddl.GetShadow())
	if err != nil {
		return err
	}
	if len(kept) == 0 {
		return stopAt(ddl, "an online schema change swapped %s in for %s, and this workflow saw none of its ALTERs "+
			"(made before the workflow started, or by a tool that does not alter its shadow table): make the target's %s like the source's",
			ddl.GetShadow(), table, table)
	}
	targetDB := TargetDatabase(c.spec)
	target := c.targetNames()[table]
	var stmts []string
	for _, st := range kept {
		stmt, err := ddlscope.RenameTable(st.Statement, st.Database, c.spec.GetSourceDatabase(), ddl.GetShadow(), targetDB, target)
		if err != nil {
			return stopAt(ddl, "an online schema change swapped %s in for %s; its ALTER %q: %v; make the same change on the target's %s",
				ddl.GetShadow(), table, st.Statement, err, target)
		}
		stmts = append(stmts, stmt)
	}
	if c.spec.GetOptions().GetOnDdl() != rowliftv1.OnDDL_ON_DDL_EXEC {
		return stopAt(ddl, "an online schema change swapped %s in for %s: make the same change on the target (%s)",
			ddl.GetShadow(), table, strings.Join(stmts, "; "))
	}
	c.log.Info("following an online schema change's cut-over", zap.String("table", table), zap.String("shadow", ddl.GetShadow()),
		zap.Strings("statements", stmts))
	if err := c.runOnce(ctx, play, ddl, []string{target}, stmts); err != nil {
		return err
	}
	tx, err := play.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("follow a cut-over: begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if err := state.ResetShadow(ctx, tx, c.spec.GetName(), c.source.GetName(), ddl.GetShadow()); err != nil {
		return err
	}
	return play.commit(ctx, tx, ddl.GetPosition().GetGtidSet(), ddl.GetCommitTimeUs())
}

// runOnce runs stmts, on behalf of ddl, on the target tables (their target
// names), each exactly once: a DDL commits on its own, never with the
// position, so the tables' SHOW CREATE TABLE is recorded before each runs
// (state.StartDDLRun), and a run that meets ddl again after a restart skips
// the statements before the one last begun, and runs that one only if the
// definitions still read as before. A statement the target refuses stops the
// workflow at ddl.
func (c *controller) runOnce(ctx context.Context, play *player, ddl *rowliftv1.DDL, tables, stmts []string) error {
	store, db := c.engine.store, c.engine.db
	name, source := c.spec.GetName(), c.source.GetName()
	targetDB := TargetDatabase(c.spec)
	key := func(i int) string {
		if len(stmts) == 1 {
			return ddl.GetGtid()
		}
		return ddl.GetGtid() + "#" + strconv.Itoa(i+1)
	}
	last, err := store.LastDDLRun(ctx, name, source)
	if err != nil {
		return err
	}
	begun := -1
	for i := range stmts {
		if last.GTID == key(i) {
			begun = i
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
	for i, stmt := range stmts {
		if i < begun {
			continue
		}
		before, err := definitions(ctx, db, targetDB, tables)
		if err != nil {
			return err
		}
		if i == begun && last.Before != before {
			c.log.Info("schema change applied on the target before a restart", zap.String("gtid", key(i)))
			continue
		}
		if i != begun {
			if err := store.StartDDLRun(ctx, name, source, play.owner, state.DDLRun{GTID: key(i), Before: before}); err != nil {
				return err
			}
		}
		c.log.Info("applying a schema change on the target", zap.String("statement", stmt), zap.String("gtid", key(i)))
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			// Only the server's answer is a refusal; a lost connection or a
			// lock wait is tried again, and the record above tells then
			// whether the statement took.
			var me *mysql.MySQLError
			if !errors.As(err, &me) || retryable(err) {
				return fmt.Errorf("schema change %q: %w", stmt, err)
			}
			if alreadyMade(me) && c.sharesTarget() {
				// Each source of the target's rows logs the same change, and
				// another one's stream ran it first. Should the target's table
				// still differ, the next stream finds it does (tablePlan.behind).
				c.log.Info("schema change already made on the target, from another source of the workflow", zap.String("statement", stmt),
					zap.String("gtid", key(i)), zap.Error(err))
				continue
			}
			return stopAt(ddl, "on_ddl exec: the target refused %q: %v; make the equivalent change on the target", stmt, err)
		}
		c.log.Info("schema change applied on the target", zap.String("gtid", key(i)))
		testhook.Delay(ctx, testhook.DDLApplied)
	}
	return nil
}

// alreadyMade reports a refusal that says the target has the change: the
// table, column or key it adds exists, or the one it drops or renames does not.
func alreadyMade(me *mysql.MySQLError) bool {
	switch me.Number {
	case 1050, // table exists
		1051, // unknown table
		1054, // unknown column
		1060, // duplicate column name
		1061, // duplicate key name
		1091, // cannot drop: no such column or key
		1826: // duplicate foreign key name
		return true
	}
	return false
}

// sharesTarget reports whether other streams of the workflow feed this
// stream's target (a merge, or a reshard whose ranges overlap several
// sources): each of them brings the schema changes of its source.
func (c *controller) sharesTarget() bool {
	streams, err := reshard.Streams(c.spec)
	if err != nil {
		return false
	}
	n := 0
	for _, st := range streams {
		if st.Target.GetName() == c.pair.Target.GetName() {
			n++
		}
	}
	return n > 1
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
