package applier

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"golang.org/x/sync/errgroup"

	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/grants"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/schema"
	"github.com/rowlift/rowlift/internal/testhook"
	"github.com/rowlift/rowlift/internal/tracing"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// permanentError marks failures that retrying cannot fix: the workflow goes to
// state (error unless set) with the message, for an operator to act on.
type permanentError struct {
	err   error
	state state.State
	// diverged is the table the target was found diverged in, when that is
	// the error (see divergence).
	diverged string
	// ddl is the source transaction of the schema change the workflow stops
	// at (state stopped), which its resume goes past.
	ddl string
}

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

func permanent(format string, args ...any) error {
	return &permanentError{err: fmt.Errorf(format, args...)}
}

// targetTable is a table being copied into on the target, with the writer of its
// copy chunks: load when the copy uses LOAD DATA, insert otherwise.
type targetTable struct {
	// name is the table's name in the stream and in copy_state: the source's.
	name string
	// database and table say where its rows go on the target (table is the
	// spec's target_table when set); ident is both quoted, what every
	// statement writes to.
	database, table, ident string
	fields                 *rowliftv1.TableFields
	// kinds say how each streamed column's values are written on this
	// target, whose column types decide some of them (see literalKinds).
	kinds []rowcodec.Kind
	// upsert makes an INSERT of every streamed column overwrite the row
	// that holds any of its keys, in the target flavor's syntax.
	upsert string
	// insertHead starts every INSERT replay writes (see insertHead).
	insertHead string
	insert     *insertBuilder
	load       *loadBuilder
}

// TargetTable is the name on the target of a workflow's table: the spec's
// target_table when set (mapped, as a cutover does while the target's tables
// are frozen), else the table's own. Every target-side use goes through it.
func TargetTable(spec *rowliftv1.WorkflowSpec, table string) (name string, mapped bool) {
	for _, t := range spec.GetTables() {
		if t.GetName() == table && t.GetTargetTable() != "" {
			return t.GetTargetTable(), true
		}
	}
	return table, false
}

// prepareTargets checks every target table against the streamed fields before
// anything is written, then creates the missing ones.
func prepareTargets(ctx context.Context, db *sql.DB, spec *rowliftv1.WorkflowSpec, fields []*rowliftv1.TableFields,
	progress map[string]state.TableCopy, maxStmt int, deferKeys func(table string, keys []schema.DeferredKey) error) (map[string]*targetTable, error) {
	targetDB := TargetDatabase(spec)
	missing, useLoad, err := CheckTargets(ctx, db, spec, fields, progress)
	if err != nil {
		return nil, err
	}
	if spec.GetOptions().GetKeepSecondaryKeys() {
		deferKeys = nil
	}
	if err := createTables(ctx, db, targetDB, missing, deferKeys); err != nil {
		return nil, err
	}
	flavor, _, err := dbconn.ServerFlavor(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("target: %w", err)
	}
	jsonCols, err := jsonColumns(ctx, db, flavor, targetDB)
	if err != nil {
		return nil, err
	}
	tables := map[string]*targetTable{}
	for _, f := range fields {
		name, _ := TargetTable(spec, f.GetTable())
		tables[f.GetTable()] = newTargetTable(f, targetDB, name, flavor, jsonCols, useLoad, maxStmt)
	}
	return tables, nil
}

// jsonColumns returns the JSON columns of a MySQL target database's tables,
// as lower-case "table.column"; none on MariaDB, whose JSON is text. The
// target's type decides, since a MariaDB source streams its JSON as LONGTEXT.
func jsonColumns(ctx context.Context, db *sql.DB, flavor dbconn.Flavor, database string) (map[string]bool, error) {
	cols := map[string]bool{}
	if flavor != dbconn.MySQL {
		return cols, nil
	}
	rows, err := db.QueryContext(ctx, "SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND DATA_TYPE = 'json'", database)
	if err != nil {
		return nil, fmt.Errorf("read JSON columns of target database %s: %w", database, err)
	}
	defer rows.Close()
	for rows.Next() {
		var table, column string
		if err := rows.Scan(&table, &column); err != nil {
			return nil, fmt.Errorf("read JSON columns of target database %s: %w", database, err)
		}
		cols[strings.ToLower(table+"."+column)] = true
	}
	return cols, rows.Err()
}

// newTargetTable prepares the writes of the streamed table f into
// database.name on a target of the given flavor, whose JSON columns are
// jsonCols (see jsonColumns): copy chunks with LOAD DATA when useLoad, else
// with INSERTs of at most maxStmt bytes.
func newTargetTable(f *rowliftv1.TableFields, database, name string, flavor dbconn.Flavor, jsonCols map[string]bool, useLoad bool, maxStmt int) *targetTable {
	t := &targetTable{name: f.GetTable(), database: database, table: name, ident: rowcodec.QualifiedIdent(database, name), fields: f,
		kinds: literalKinds(name, f.GetFields(), jsonCols), upsert: upsertClause(f.GetFields(), flavor)}
	t.insertHead = insertHead(t.ident, f.GetFields())
	if useLoad {
		t.load = newLoadBuilder(t.ident, f.GetFields(), t.kinds)
	}
	if !useLoad || slices.Contains(t.kinds, rowcodec.JSON) {
		// LOAD DATA takes no JSON_SET: a chunk holding a typed JSON value
		// with patches is inserted instead.
		t.insert = newInsertBuilder(t.ident, f.GetFields(), t.kinds, maxStmt)
	}
	return t
}

// literalKinds says how each column's values are written as literals into
// the target table: as rowcodec.KindOf says, except that a column among
// jsonCols (MySQL JSON, see jsonColumns) takes typed JSON values, and a text
// column streamed from a MySQL JSON column takes their text.
func literalKinds(table string, fields []*rowliftv1.Field, jsonCols map[string]bool) []rowcodec.Kind {
	kinds := make([]rowcodec.Kind, len(fields))
	for i, f := range fields {
		kinds[i] = rowcodec.KindOf(f.GetDataType())
		switch {
		case jsonCols[strings.ToLower(table+"."+f.GetName())]:
			kinds[i] = rowcodec.JSON
		case f.GetDataType() == "json":
			kinds[i] = rowcodec.JSONText
		}
	}
	return kinds
}

// upsertAlias names the inserted row in a MySQL upsert; a name no table of a
// workflow is likely to have, since the alias may not repeat the table's.
const upsertAlias = "_rowlift_new"

// upsertClause is the ON DUPLICATE KEY UPDATE that sets every column to the
// inserted row's value: through VALUES() on MariaDB, and through a row alias
// on MySQL, which deprecates VALUES() there (warning 1287 on every upsert).
func upsertClause(fields []*rowliftv1.Field, flavor dbconn.Flavor) string {
	var b strings.Builder
	if flavor == dbconn.MySQL {
		b.WriteString(" AS " + upsertAlias)
	}
	b.WriteString(" ON DUPLICATE KEY UPDATE ")
	for i, f := range fields {
		if i > 0 {
			b.WriteString(", ")
		}
		col := rowcodec.Ident(f.GetName())
		if flavor == dbconn.MySQL {
			b.WriteString(col + " = " + upsertAlias + "." + col)
		} else {
			b.WriteString(col + " = VALUES(" + col + ")")
		}
	}
	return b.String()
}

// errTargetHasRows is why a table whose copy has not started cannot be
// copied into; the applier tells it from rows another stream of the workflow
// has just copied in (see controller.prepare).
var errTargetHasRows = errors.New("already has rows and its copy has not started")

// CheckTargets checks a workflow's target tables against the streamed fields
// and writes nothing: a table that exists must have the same shape, and must be
// empty if its copy has not started (progress has no entry for it), unless the
// workflow allows otherwise; a table mapped to another name (target_table) must
// exist. It returns the tables to create and whether the copy
// writes with LOAD DATA. A check that retrying cannot fix fails with an error
// IsPermanent recognizes. The coordinator runs it when a workflow is created,
// each stream again before it writes.
func CheckTargets(ctx context.Context, db *sql.DB, spec *rowliftv1.WorkflowSpec, fields []*rowliftv1.TableFields,
	progress map[string]state.TableCopy) (missing []*rowliftv1.TableFields, useLoad bool, err error) {
	targetDB := TargetDatabase(spec)
	for _, f := range fields {
		name, mapped := TargetTable(spec, f.GetTable())
		tbl, err := schema.Load(ctx, db, targetDB, name)
		switch {
		case errors.Is(err, schema.ErrNoTable) && mapped:
			return nil, false, permanent("target table %s.%s (the target_table of %s) does not exist, and rowlift never creates a mapped "+
				"target table from the source's definition: create it like the source's, or leave target_table empty", targetDB, name, f.GetTable())
		case errors.Is(err, schema.ErrNoTable):
			if spec.GetOptions().GetSkipCreateTables() {
				return nil, false, permanent("target table %s.%s does not exist and the workflow does not create tables "+
					"(--skip-create-tables; skip_create_tables in the API): create it like the source's, "+
					"or recreate the workflow without that option", targetDB, f.GetTable())
			}
			missing = append(missing, f)
			continue
		case errors.Is(err, schema.ErrNoKey):
			return nil, false, permanent("target %w", err)
		case err != nil:
			return nil, false, err
		}
		if err := schema.CheckShape(tbl, f); err != nil {
			return nil, false, permanent("%w", err)
		}
		p := progress[f.GetTable()]
		fresh := p.LastPK == nil && p.RowsCopied == 0 && !p.Done
		if fresh && !spec.GetOptions().GetAllowNonemptyTarget() {
			var one int
			err := db.QueryRowContext(ctx, "SELECT 1 FROM "+rowcodec.QualifiedIdent(targetDB, name)+" LIMIT 1").Scan(&one)
			if err == nil {
				return nil, false, permanent("target table %s.%s %w: empty it (TRUNCATE) "+
					"or create the workflow with --allow-nonempty-target (allow_nonempty_target in the API)", targetDB, name, errTargetHasRows)
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return nil, false, fmt.Errorf("check target table %s.%s is empty: %w", targetDB, name, err)
			}
		}
	}
	useLoad, err = copyWithLoad(ctx, db, spec.GetOptions().GetCopyMethod())
	if err != nil {
		return nil, false, err
	}
	return missing, useLoad, nil
}

// copyWithLoad decides whether copy chunks go in with LOAD DATA LOCAL INFILE: by
// default when the target allows it, always when the workflow asks for it (and
// then the target must allow it), never when the workflow asks for INSERTs.
func copyWithLoad(ctx context.Context, db *sql.DB, method rowliftv1.CopyMethod) (bool, error) {
	if method == rowliftv1.CopyMethod_COPY_METHOD_INSERT {
		return false, nil
	}
	var localInfile bool
	if err := db.QueryRowContext(ctx, "SELECT @@local_infile").Scan(&localInfile); err != nil {
		return false, fmt.Errorf("read target local_infile: %w", err)
	}
	if !localInfile && method == rowliftv1.CopyMethod_COPY_METHOD_LOAD_DATA {
		return false, permanent("the workflow copies with LOAD DATA but the target has local_infile=OFF: " +
			"SET GLOBAL local_infile=ON on the target, or create the workflow with --copy-method insert (copy_method INSERT in the API)")
	}
	return localInfile, nil
}

// createTables creates target tables from the source's SHOW CREATE TABLE, and the
// target database if it does not exist yet. Unless deferKeys is nil, a table's
// plain secondary keys are left out, after deferKeys has recorded them to be
// added once the table is copied (see schema.SplitSecondaryKeys).
func createTables(ctx context.Context, db *sql.DB, targetDB string, missing []*rowliftv1.TableFields,
	deferKeys func(table string, keys []schema.DeferredKey) error) error {
	if len(missing) == 0 {
		return nil
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	// SHOW CREATE TABLE is UTF-8 text (with binary defaults as raw bytes): under the
	// pool's SET NAMES binary, non-ASCII ENUM members and defaults of latin1 columns
	// would be taken byte by byte. This session must not go back to the pool.
	defer conn.Raw(func(any) error { return driver.ErrBadConn }) //nolint:errcheck
	if _, err := conn.ExecContext(ctx, "SET NAMES utf8mb4"); err != nil {
		return fmt.Errorf("set names for creating tables: %w", err)
	}
	if _, err := conn.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+rowcodec.Ident(targetDB)); err != nil {
		return fmt.Errorf("create target database %s: %w", targetDB, grants.Refused(ctx, conn, "target", err, createGrant(targetDB)))
	}
	if _, err := conn.ExecContext(ctx, "USE "+rowcodec.Ident(targetDB)); err != nil {
		return fmt.Errorf("use target database %s: %w", targetDB, err)
	}
	for _, f := range missing {
		create := string(f.GetCreateTable())
		if deferKeys != nil {
			stripped, keys := schema.SplitSecondaryKeys(create)
			if len(keys) > 0 {
				if err := deferKeys(f.GetTable(), keys); err != nil {
					return err
				}
				create = stripped
			}
		}
		if _, err := conn.ExecContext(ctx, create); err != nil {
			var me *mysql.MySQLError
			switch {
			case !errors.As(err, &me):
				return fmt.Errorf("create target table %s.%s: %w", targetDB, f.GetTable(), err) // a lost connection: retried
			case grants.Denied(err):
				// Retried: the stream goes on once the grant is given.
				return fmt.Errorf("create target table %s.%s: %w", targetDB, f.GetTable(), grants.Refused(ctx, conn, "target", err, createGrant(targetDB)))
			case me.Number == 1050:
				// Another stream into this target (a reshard's other source) created it
				// first: the retry checks that table like any existing one.
				return fmt.Errorf("create target table %s.%s: another stream created it meanwhile; checking it again: %w", targetDB, f.GetTable(), err)
			}
			return permanent("create target table %s.%s from the source's definition: %v", targetDB, f.GetTable(), err)
		}
	}
	return nil
}

// copyWriter applies chunk items with several connections at once. Each item's
// copy_state update and COMMIT happen strictly in stream order, so the committed
// last PK of a table is always a true prefix of what was copied. Within a table
// the INSERTs also execute in order: consecutive key ranges inserted at once
// interleave at the right edge of the index and make InnoDB split pages in the
// middle, which costs the target more CPU than it saves. What overlaps is one
// item's INSERT with the previous item's COMMIT and with the next item's
// statement building, and the INSERTs of different tables.
type copyWriter struct {
	db       *sql.DB
	workflow string
	source   string
	owner    int64
	// play holds the stream's committed position, which each part's commit
	// moves to its chunk's fence.
	play *player
	jobs chan *copyJob
	// lastDone is closed when the most recently submitted job has committed.
	lastDone <-chan struct{}
	// lastInserted is, per table, closed when the latest submitted job of that
	// table has executed its INSERTs.
	lastInserted map[string]<-chan struct{}
	// ready is a closed channel: what the first job of a table waits on.
	ready <-chan struct{}
	g     *errgroup.Group
	ctx   context.Context
	stop  sync.Once
	rows  atomic.Int64
	// onCommit is called after each job commits, in stream order.
	onCommit func(table string, rows int, done bool)
}

type copyJob struct {
	table      *targetTable
	chunk      *rowliftv1.Chunk
	prevInsert <-chan struct{}
	inserted   chan struct{}
	prev       <-chan struct{}
	done       chan struct{}
}

func newCopyWriter(ctx context.Context, db *sql.DB, play *player, workers int, onCommit func(string, int, bool)) *copyWriter {
	g, ctx := errgroup.WithContext(ctx)
	started := make(chan struct{})
	close(started)
	w := &copyWriter{db: db, workflow: play.workflow, source: play.source, owner: play.owner, play: play, jobs: make(chan *copyJob, workers),
		lastDone: started, lastInserted: map[string]<-chan struct{}{}, ready: started, g: g, ctx: ctx, onCommit: onCommit}
	for range workers {
		g.Go(w.work)
	}
	return w
}

// submit queues a chunk item; it blocks while every worker is busy.
func (w *copyWriter) submit(t *targetTable, c *rowliftv1.Chunk) error {
	job := &copyJob{table: t, chunk: c, prev: w.lastDone, done: make(chan struct{}), inserted: make(chan struct{})}
	job.prevInsert = w.lastInserted[t.name]
	if job.prevInsert == nil {
		job.prevInsert = w.ready
	}
	w.lastDone, w.lastInserted[t.name] = job.done, job.inserted
	select {
	case w.jobs <- job:
		return nil
	case <-w.ctx.Done():
		return w.wait()
	}
}

// idle reports whether every submitted item has committed.
func (w *copyWriter) idle() bool {
	select {
	case <-w.lastDone:
		return true
	default:
		return false
	}
}

// drain waits until every submitted item has committed.
func (w *copyWriter) drain() error {
	select {
	case <-w.lastDone:
		return nil
	case <-w.ctx.Done():
		return w.wait()
	}
}

// wait stops the workers and returns the first error. It may be called more than
// once: on a failed submit and again when the stream is torn down.
func (w *copyWriter) wait() error {
	w.stop.Do(func() { close(w.jobs) })
	return w.g.Wait()
}

func (w *copyWriter) work() error {
	var buf scratch
	for job := range w.jobs {
		if err := w.apply(job, &buf); err != nil {
			return err
		}
	}
	return nil
}

func (w *copyWriter) apply(job *copyJob, buf *scratch) (err error) {
	began := time.Now()
	c := job.chunk
	span := w.play.startSpan(w.ctx, "rowlift.applier.chunk", c.GetTraceContext(), job.table.name)
	defer func() { tracing.End(span, err, c.GetRowCount(), int64(len(c.GetPackedRows()))) }()
	tx, err := w.db.BeginTx(w.ctx, nil)
	if err != nil {
		return fmt.Errorf("copy %s: begin: %w", job.table.name, err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	write, err := job.table.writer(buf, c)
	if err != nil {
		return permanent("copy %s: %v", job.table.name, err)
	}
	select {
	case <-job.prevInsert:
	case <-w.ctx.Done():
		return w.ctx.Err()
	}
	testhook.Delay(w.ctx, testhook.ChunkApply)
	if err := write(w.ctx, tx); err != nil {
		return err
	}
	close(job.inserted)
	select {
	case <-job.prev:
	case <-w.ctx.Done():
		return w.ctx.Err()
	}
	// LastPk is the last row the chunk scanned, past its last row sent when
	// the stream has a key range: the copy resumes after it either way. The
	// packed rows' length is the bytes written, known without a pass over them.
	lastPK := c.GetLastPk()
	if err := state.SaveCopyProgress(w.ctx, tx, w.workflow, w.source, w.owner, job.table.name, lastPK, c.GetRowCount(), int64(len(c.GetPackedRows())),
		c.GetTableDone()); err != nil {
		return err
	}
	position, err := w.play.saveFence(w.ctx, tx, c.GetFence().GetGtidSet(), c.GetFenceTimeUs())
	if err != nil {
		return fmt.Errorf("copy %s: %w", job.table.name, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("copy %s: commit: %w", job.table.name, err)
	}
	w.play.committed(position, c.GetFenceTimeUs())
	w.play.stats.ChunkCommitted(job.table.name, c.GetRowCount(), time.Since(began))
	w.rows.Add(c.GetRowCount())
	if w.onCommit != nil {
		w.onCommit(job.table.name, int(c.GetRowCount()), c.GetTableDone())
	}
	close(job.done)
	return nil
}

// writer prepares (in buf) what writes the chunk's rows into the table, so
// preparing can overlap the previous item's write, and returns the function
// that writes it.
func (t *targetTable) writer(buf *scratch, c *rowliftv1.Chunk) (func(context.Context, *sql.Tx) error, error) {
	patched, err := t.hasPatches(buf, c)
	if err != nil {
		return nil, err
	}
	if t.load != nil && !patched {
		data, err := t.load.build(buf, c)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, tx *sql.Tx) error {
			if c.GetRowCount() == 0 {
				return nil
			}
			return t.load.load(ctx, tx, t.name, data, int(c.GetRowCount()))
		}, nil
	}
	stmts, err := t.insert.build(buf, c)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, tx *sql.Tx) error {
		for _, stmt := range stmts {
			if _, err := tx.ExecContext(ctx, string(stmt)); err != nil {
				return writeError(t.name, err)
			}
		}
		return nil
	}, nil
}

// hasPatches reports whether a chunk holds a typed JSON value with patches,
// which only an INSERT can write.
func (t *targetTable) hasPatches(buf *scratch, c *rowliftv1.Chunk) (bool, error) {
	if t.insert == nil || t.load == nil {
		return false, nil
	}
	found := false
	err := eachRow(&buf.rows, c, len(t.kinds), func(values [][]byte) error {
		for i, v := range values {
			if t.kinds[i] == rowcodec.JSON && bytes.IndexByte(v, 0) >= 0 {
				found = true
			}
		}
		return nil
	})
	return found, err
}

// writeError classifies a failed copy write. A duplicate key is divergence.
func writeError(table string, err error) error {
	return rejected("copy "+table, err, func(msg string) error { return copyDiverged(table, msg) })
}

// copyDiverged is the divergence of a copy chunk that found a key of its
// range taken on the target; msg is the server's.
func copyDiverged(table, msg string) error {
	return &permanentError{diverged: table, err: fmt.Errorf("copy %s: duplicate key (%s): the target table holds a row in a range "+
		"rowlift had not copied yet; it was changed by something other than rowlift, or was not empty when the copy started", table, msg)}
}

// rejected classifies a failed write of rows; what says which. Lock waits,
// deadlocks and lost connections are returned wrapped, to be retried; a
// duplicate key is reported by dup; any other error the server raises about
// the rows (a value the target column cannot hold, a NULL in a NOT NULL column)
// fails the same way on every retry, so it stops the workflow.
func rejected(what string, err error, dup func(msg string) error) error {
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		return fmt.Errorf("%s: %w", what, err)
	}
	switch me.Number {
	case 1062:
		return dup(me.Message)
	case 1205, 1213: // lock wait timeout, deadlock
		return fmt.Errorf("%s: %w", what, err)
	}
	return permanent("%s: the target rejected a row (%d: %s): make the target table's definition match the source's "+
		"(a table rowlift created from SHOW CREATE TABLE can lose 4-byte ENUM or SET members and defaults; create such tables by hand)",
		what, me.Number, me.Message)
}
