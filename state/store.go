// Package state is the workflow state kept in the sidecar schema on each target
// server (`_rowlift`): workflow definitions, one stream row per (workflow, source)
// with its position, and one copy_state row per (workflow, source, table). The
// applier writes progress in the same transaction as the rows it describes, so a
// restarted process resumes from this schema and nothing else.
package state

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/rowlift/rowlift/internal/grants"
	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/reshard"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// Schema is the sidecar database on every target.
const Schema = "_rowlift"

// State is a workflow's life-cycle state, stored as text so SQL readers see it.
type State string

// The workflow states (docs/design.md, "State: the `_rowlift` schema").
const (
	Init    State = "init"
	Copying State = "copying"
	Running State = "running"
	Stopped State = "stopped"
	Error   State = "error"
	Cutover State = "cutover"
	Done    State = "done"
	// Switched: writes went to this workflow's targets in a cutover; its
	// partner (the reverse workflow, or the forward one after a reverse)
	// replicates them back, and this one waits for the next switch.
	Switched State = "switched"
)

// ApplierLock is the named lock on the target that only one applier may hold,
// so two appliers (a rollout overlap, a second deployment) never apply the same
// streams twice; the coordinator reads it to tell whether any applier runs.
const ApplierLock = "rowlift.applier"

// ApplierRunning reports whether an applier holds this target's ApplierLock.
func (s *Store) ApplierRunning(ctx context.Context) (bool, error) {
	var running bool
	if err := s.db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?) IS NOT NULL", ApplierLock).Scan(&running); err != nil {
		return false, fmt.Errorf("read the applier lock: %w", err)
	}
	return running, nil
}

// Errors callers branch on.
var (
	ErrExists   = errors.New("workflow already exists")
	ErrNotFound = errors.New("workflow not found")
	// ErrNotOwner means another run of the stream took it over: this run's
	// writes must not commit.
	ErrNotOwner = errors.New("stream taken over by another run")
)

var schemaDDL = []string{
	"CREATE DATABASE IF NOT EXISTS " + Schema,
	`CREATE TABLE IF NOT EXISTS ` + Schema + `.workflow (
		name VARCHAR(64) NOT NULL,
		spec LONGTEXT NOT NULL COMMENT 'WorkflowSpec as protojson',
		state VARCHAR(16) NOT NULL,
		message TEXT NOT NULL,
		created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
		updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
		last_error TEXT NULL COMMENT 'message of the last move to state error; kept after a resume',
		last_error_at TIMESTAMP(6) NULL,
		target VARCHAR(64) NOT NULL DEFAULT '' COMMENT 'which of the spec''s targets this server is',
		PRIMARY KEY (name)
	) ENGINE=InnoDB`,
	`CREATE TABLE IF NOT EXISTS ` + Schema + `.stream (
		workflow VARCHAR(64) NOT NULL,
		source VARCHAR(64) NOT NULL,
		position TEXT NOT NULL COMMENT 'GTID set applied on this target',
		source_time_us BIGINT NOT NULL DEFAULT 0 COMMENT 'source commit time of the last applied item',
		applied_at_us BIGINT NOT NULL DEFAULT 0 COMMENT 'when the applier committed it: lag = applied_at_us - source_time_us',
		message TEXT NOT NULL COMMENT 'non-empty while the stream is retrying',
		message_at_us BIGINT NOT NULL DEFAULT 0 COMMENT 'when message was set',
		throttled TEXT NULL COMMENT 'non-empty while the copy waits on a throttle: metric, value and limit',
		waiting TEXT NULL COMMENT 'non-empty while the stream waits on its source before its binlog starts',
		owner BIGINT NOT NULL DEFAULT 0 COMMENT 'the stream run allowed to write its state (see TakeOver)',
		stopped_ddl VARCHAR(128) NOT NULL DEFAULT '' COMMENT 'GTID of the schema change the workflow last stopped at: its resume goes past it',
		ddl_run VARCHAR(128) NOT NULL DEFAULT '' COMMENT 'GTID of the last schema change on_ddl EXEC began to apply on this target',
		ddl_before LONGTEXT NULL COMMENT 'the target tables it changes, as SHOW CREATE TABLE gave them before it ran',
		lost TEXT NULL COMMENT 'transactions the target applied that the source lacks (a failover that lost writes), until a rewind',
		rewind_to TEXT NULL COMMENT 'the last position of the stream''s the source has: where a rewind resumes it',
		repairing TEXT NULL COMMENT 'the lost transactions a rewind went past, until a verify with repair of the stream''s tables finishes',
		source_server VARCHAR(64) NOT NULL DEFAULT '' COMMENT 'the source server the stream last read: server_uuid, or server_id on MariaDB',
		PRIMARY KEY (workflow, source)
	) ENGINE=InnoDB`,
	`CREATE TABLE IF NOT EXISTS ` + Schema + `.copy_state (
		workflow VARCHAR(64) NOT NULL,
		source VARCHAR(64) NOT NULL,
		table_name VARCHAR(64) NOT NULL,
		last_pk VARBINARY(16384) NULL COMMENT 'rowlift.v1.Row of the last copied PK',
		rows_copied BIGINT NOT NULL DEFAULT 0,
		bytes_copied BIGINT NOT NULL DEFAULT 0 COMMENT 'packed row bytes the copied chunks carried',
		done TINYINT(1) NOT NULL DEFAULT 0,
		rows_estimate BIGINT NOT NULL DEFAULT 0 COMMENT 'source information_schema estimate at the last stream start',
		bytes_estimate BIGINT NOT NULL DEFAULT 0 COMMENT 'source information_schema DATA_LENGTH at the last stream start',
		run_started_at_us BIGINT NOT NULL DEFAULT 0 COMMENT 'when the current stream run started: its copy rate is',
		run_start_rows BIGINT NOT NULL DEFAULT 0 COMMENT '(rows_copied - run_start_rows) / (now - run_started_at_us)',
		updated_at_us BIGINT NOT NULL DEFAULT 0 COMMENT 'when the last chunk committed',
		deferred_keys TEXT NULL COMMENT 'JSON list of the secondary keys left out of the target table rowlift created, added once every source copied it; NULL once added',
		PRIMARY KEY (workflow, source, table_name)
	) ENGINE=InnoDB`,
	`CREATE TABLE IF NOT EXISTS ` + Schema + `.replay_slot (
		workflow VARCHAR(64) NOT NULL,
		source VARCHAR(64) NOT NULL,
		slot INT NOT NULL COMMENT 'the replay worker that writes this row',
		watermark TEXT NOT NULL COMMENT 'every source transaction up to here is applied',
		applied TEXT NOT NULL COMMENT 'transactions after watermark up to here may be applied too (out-of-order commit)',
		source_time_us BIGINT NOT NULL DEFAULT 0,
		applied_at_us BIGINT NOT NULL DEFAULT 0,
		PRIMARY KEY (workflow, source, slot)
	) ENGINE=InnoDB`,
	`CREATE TABLE IF NOT EXISTS ` + Schema + `.verify (
		workflow VARCHAR(64) NOT NULL,
		source VARCHAR(64) NOT NULL,
		table_name VARCHAR(64) NOT NULL,
		started_at_us BIGINT NOT NULL COMMENT 'when this verify was started: a new value restarts the stream',
		repair TINYINT(1) NOT NULL DEFAULT 0,
		last_pk VARBINARY(16384) NULL COMMENT 'rowlift.v1.Row of the last verified key',
		done TINYINT(1) NOT NULL DEFAULT 0,
		rows_compared BIGINT NOT NULL DEFAULT 0,
		missing BIGINT NOT NULL DEFAULT 0,
		extra BIGINT NOT NULL DEFAULT 0,
		different BIGINT NOT NULL DEFAULT 0,
		repaired BIGINT NOT NULL DEFAULT 0,
		examples TEXT NOT NULL COMMENT 'JSON list of the first differing keys',
		finished_at_us BIGINT NOT NULL DEFAULT 0,
		updated_at_us BIGINT NOT NULL DEFAULT 0,
		outcome VARCHAR(16) NOT NULL DEFAULT '' COMMENT 'how a done row ended early: cancelled or failed; empty otherwise',
		message TEXT NULL COMMENT 'why the verify was cancelled or failed',
		recheck TINYINT(1) NOT NULL DEFAULT 0 COMMENT 'a chunk''s digests differed: compare rows after last_pk up to rows_through',
		rows_through VARBINARY(16384) NULL COMMENT 'rowlift.v1.Row of the last key whose rows are compared (NULL: the table''s end)',
		PRIMARY KEY (workflow, source, table_name)
	) ENGINE=InnoDB`,
	`CREATE TABLE IF NOT EXISTS ` + Schema + `.verify_key (
		workflow VARCHAR(64) NOT NULL,
		table_name VARCHAR(64) NOT NULL,
		key_hash BINARY(32) NOT NULL COMMENT 'SHA-256 of the key as the servers compare it',
		shown TEXT NOT NULL COMMENT 'the key as verify shows it',
		foreign_sources BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'bit i: source i found the key on the target and not on itself',
		holders BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'bit i: source i holds the key',
		differs BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'bit i: the target row differs from source i''s',
		PRIMARY KEY (workflow, table_name, key_hash)
	) ENGINE=InnoDB COMMENT 'the keys a verify of a merge of several sources met, until every source has verified the table'`,
	`CREATE TABLE IF NOT EXISTS ` + Schema + `.cutover (
		workflow VARCHAR(64) NOT NULL COMMENT 'the forward workflow of the pair',
		step VARCHAR(16) NOT NULL,
		journal LONGTEXT NOT NULL COMMENT 'state.Journal as JSON',
		updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
		PRIMARY KEY (workflow)
	) ENGINE=InnoDB`,
	`CREATE TABLE IF NOT EXISTS ` + Schema + `.shadow_ddl (
		workflow VARCHAR(64) NOT NULL,
		source VARCHAR(64) NOT NULL,
		shadow VARCHAR(64) NOT NULL COMMENT 'an online schema change tool''s shadow table of a moved table',
		seq INT NOT NULL,
		statement LONGTEXT NOT NULL COMMENT 'an ALTER of the shadow, as the source logged it',
		db VARCHAR(64) NOT NULL COMMENT 'the schema it ran in',
		PRIMARY KEY (workflow, source, shadow, seq)
	) ENGINE=InnoDB`,
}

// addedColumns are columns added to the sidecar tables after their first
// release: Open adds those a target's older schema lacks (portably, without
// MariaDB's ADD COLUMN IF NOT EXISTS). Each is also in schemaDDL.
var addedColumns = []struct{ table, column, definition string }{
	{"workflow", "last_error", "TEXT NULL"},
	{"workflow", "last_error_at", "TIMESTAMP(6) NULL"},
	{"workflow", "target", "VARCHAR(64) NOT NULL DEFAULT ''"},
	{"stream", "message_at_us", "BIGINT NOT NULL DEFAULT 0"},
	{"stream", "throttled", "TEXT NULL"},
	{"stream", "waiting", "TEXT NULL"},
	{"stream", "stopped_ddl", "VARCHAR(128) NOT NULL DEFAULT ''"},
	{"stream", "ddl_run", "VARCHAR(128) NOT NULL DEFAULT ''"},
	{"stream", "ddl_before", "LONGTEXT NULL"},
	{"stream", "lost", "TEXT NULL"},
	{"stream", "rewind_to", "TEXT NULL"},
	{"stream", "repairing", "TEXT NULL"},
	{"stream", "source_server", "VARCHAR(64) NOT NULL DEFAULT ''"},
	{"copy_state", "rows_estimate", "BIGINT NOT NULL DEFAULT 0"},
	{"copy_state", "run_started_at_us", "BIGINT NOT NULL DEFAULT 0"},
	{"copy_state", "run_start_rows", "BIGINT NOT NULL DEFAULT 0"},
	{"copy_state", "updated_at_us", "BIGINT NOT NULL DEFAULT 0"},
	{"copy_state", "deferred_keys", "TEXT NULL"},
	{"copy_state", "bytes_copied", "BIGINT NOT NULL DEFAULT 0"},
	{"copy_state", "bytes_estimate", "BIGINT NOT NULL DEFAULT 0"},
	{"verify", "outcome", "VARCHAR(16) NOT NULL DEFAULT ''"},
	{"verify", "message", "TEXT NULL"},
	{"verify", "recheck", "TINYINT(1) NOT NULL DEFAULT 0"},
	{"verify", "rows_through", "VARBINARY(16384) NULL"},
}

// Store reads and writes the sidecar schema of one target server.
type Store struct {
	db *sql.DB
}

// Open creates the sidecar schema if it is missing and returns a store on it.
func Open(ctx context.Context, db *sql.DB) (*Store, error) {
	for _, q := range schemaDDL {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("create sidecar schema %s: %w", Schema, grants.Refused(ctx, db, "target", err, schemaGrant("CREATE", "to create its state tables")))
		}
	}
	for _, c := range addedColumns {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND COLUMN_NAME = ?",
			Schema, c.table, c.column).Scan(&n); err != nil {
			return nil, fmt.Errorf("upgrade sidecar schema %s: %w", Schema, err)
		}
		if n == 0 {
			if _, err := db.ExecContext(ctx, "ALTER TABLE "+Schema+"."+c.table+" ADD COLUMN "+c.column+" "+c.definition); err != nil {
				return nil, fmt.Errorf("upgrade sidecar schema %s: add %s.%s: %w", Schema, c.table, c.column,
					grants.Refused(ctx, db, "target", err, schemaGrant("ALTER", "to add the columns a newer rowlift keeps there")))
			}
		}
	}
	return &Store{db: db}, nil
}

// Workflow is a stored workflow: its definition and life-cycle state.
type Workflow struct {
	Spec      *rowliftv1.WorkflowSpec
	State     State
	Message   string
	CreatedAt time.Time
	UpdatedAt time.Time
	// LastError is the message of the workflow's last move to state error, kept
	// after a resume so status can still show it; zero LastErrorAt when none.
	LastError   string
	LastErrorAt time.Time
	// Target is which of the spec's targets this server is: a reshard runs a
	// different set of streams on each (empty in state written before).
	Target string
}

// TableCopy is the copy progress of one table from one source.
type TableCopy struct {
	Source     string
	Table      string
	LastPK     *rowliftv1.Row // nil before the first chunk
	RowsCopied int64
	// BytesCopied is the packed row bytes of the chunks written (see
	// SaveCopyProgress), what the copy moved.
	BytesCopied int64
	Done        bool
	// RowsEstimate and BytesEstimate are the source's estimates of the
	// table's rows and size when the stream last started (0 before).
	RowsEstimate  int64
	BytesEstimate int64
	// RunStartedAtUS and RunStartRows are when the current stream run started
	// and RowsCopied then: the run's copy rate is their difference to now.
	RunStartedAtUS int64
	RunStartRows   int64
	// UpdatedAtUS is when the last chunk of the table committed.
	UpdatedAtUS int64
	// KeysPending names the secondary keys to add to the target table once
	// every source has copied it (see DeferKeys); the workflow's copy is not
	// done before they are.
	KeysPending []string
}

// Copied reports whether the table is copied and has all its keys.
func (tc TableCopy) Copied() bool { return tc.Done && len(tc.KeysPending) == 0 }

// Stream is the replication progress of one (workflow, source) stream.
type Stream struct {
	Source       string
	Position     string
	SourceTimeUS int64
	// AppliedAtUS is when the applier committed the item of SourceTimeUS.
	AppliedAtUS int64
	Message     string
	// MessageAtUS is when Message was set.
	MessageAtUS int64
	// Throttled is non-empty while the stream's copy waits on a throttle: the
	// metrics over their limits, with values (for example "source
	// Threads_running 57 > 50"), as the streamer last reported them.
	Throttled string
	// Waiting is non-empty while the stream waits on its source before its
	// binlog starts (the source locating the start position), as the streamer
	// last reported it.
	Waiting string
	// Lost is non-empty while the workflow is stopped because the source lacks
	// transactions the target applied (StopLost); Repairing after a rewind
	// went past them, until a verify with repair finishes (Rewind).
	Lost      string
	Repairing string
	// SourceServer is the source server the stream last read (SetSourceServer).
	SourceServer string
}

// Lag is how far the target was behind the source at its last commit: the
// applier's commit time minus the source's commit time of what it applied (a
// heartbeat on an idle source counts as applied). Zero before anything applied.
func (st Stream) Lag() time.Duration {
	if st.SourceTimeUS == 0 || st.AppliedAtUS < st.SourceTimeUS {
		return 0
	}
	return time.Duration(st.AppliedAtUS-st.SourceTimeUS) * time.Microsecond
}

// CreateWorkflow stores a new workflow in state init on the server that is
// its target named target, with the stream and copy_state rows of the streams
// that target runs, all in one transaction.
func (s *Store) CreateWorkflow(ctx context.Context, spec *rowliftv1.WorkflowSpec, target string) error {
	if err := CheckName(spec.GetName()); err != nil {
		return err
	}
	if len(spec.GetSources()) == 0 || len(spec.GetTables()) == 0 {
		return fmt.Errorf("workflow %q: needs at least one source and one table", spec.GetName())
	}
	streams, err := reshard.ForTarget(spec, target)
	if err != nil {
		return fmt.Errorf("workflow %q: %w", spec.GetName(), err)
	}
	js, err := protojson.Marshal(spec)
	if err != nil {
		return fmt.Errorf("encode workflow %q: %w", spec.GetName(), err)
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO "+Schema+".workflow (name, spec, state, message, target) VALUES (?, ?, ?, '', ?)",
			spec.GetName(), js, Init, target)
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == 1062 {
			return fmt.Errorf("%w: %q (delete it first or pick another name)", ErrExists, spec.GetName())
		}
		if err != nil {
			return err
		}
		for _, st := range streams {
			if _, err := tx.ExecContext(ctx, "INSERT INTO "+Schema+".stream (workflow, source, position, message) VALUES (?, ?, '', '')",
				spec.GetName(), st.Source.GetName()); err != nil {
				return err
			}
			for _, t := range st.Spec.GetTables() {
				if _, err := tx.ExecContext(ctx, "INSERT INTO "+Schema+".copy_state (workflow, source, table_name) VALUES (?, ?, ?)",
					spec.GetName(), st.Source.GetName(), t.GetName()); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// Workflow returns one workflow, or ErrNotFound.
func (s *Store) Workflow(ctx context.Context, name string) (*Workflow, error) {
	ws, err := s.workflows(ctx, "WHERE name = ?", name)
	if err != nil {
		return nil, err
	}
	if len(ws) == 0 {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	return ws[0], nil
}

// Workflows returns every workflow on this target, by name.
func (s *Store) Workflows(ctx context.Context) ([]*Workflow, error) {
	return s.workflows(ctx, "")
}

func (s *Store) workflows(ctx context.Context, where string, args ...any) ([]*Workflow, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT spec, state, message, UNIX_TIMESTAMP(created_at), UNIX_TIMESTAMP(updated_at), "+
		"IFNULL(last_error, ''), UNIX_TIMESTAMP(last_error_at), target FROM "+Schema+".workflow "+where+" ORDER BY name", args...)
	if err != nil {
		return nil, fmt.Errorf("read workflows: %w", err)
	}
	defer rows.Close()
	var out []*Workflow
	for rows.Next() {
		var js []byte
		var created, updated float64
		var lastErrorAt sql.NullFloat64
		w := &Workflow{Spec: &rowliftv1.WorkflowSpec{}}
		if err := rows.Scan(&js, &w.State, &w.Message, &created, &updated, &w.LastError, &lastErrorAt, &w.Target); err != nil {
			return nil, fmt.Errorf("read workflows: %w", err)
		}
		if lastErrorAt.Valid {
			w.LastErrorAt = unixTime(lastErrorAt.Float64)
		}
		if err := protojson.Unmarshal(js, w.Spec); err != nil {
			return nil, fmt.Errorf("decode workflow spec: %w", err)
		}
		w.CreatedAt, w.UpdatedAt = unixTime(created), unixTime(updated)
		out = append(out, w)
	}
	return out, rows.Err()
}

// SetState moves a workflow to a state with a message for the operator. A move
// to state error also records the message as the workflow's last error.
func (s *Store) SetState(ctx context.Context, name string, st State, message string) error {
	n, err := s.setState(ctx, name, st, message, "")
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("set workflow %q to %s: %w", name, st, ErrNotFound)
	}
	return nil
}

// Transition moves a workflow to state to only if it is in one of from, in one
// statement, so two writers (the coordinator stopping a workflow, the applier
// finishing its copy) cannot undo each other's move. It reports whether the
// workflow moved; ErrNotFound when it does not exist.
func (s *Store) Transition(ctx context.Context, name string, from []State, to State, message string) (bool, error) {
	if len(from) == 0 {
		return false, fmt.Errorf("move workflow %q to %s: no state to move from", name, to)
	}
	cond := " AND state IN (?" + strings.Repeat(", ?", len(from)-1) + ")"
	args := make([]any, len(from))
	for i, f := range from {
		args[i] = f
	}
	n, err := s.setState(ctx, name, to, message, cond, args...)
	if err != nil || n > 0 {
		return n > 0, err
	}
	if _, err := s.Workflow(ctx, name); err != nil {
		return false, err
	}
	return false, nil
}

func (s *Store) setState(ctx context.Context, name string, st State, message, cond string, condArgs ...any) (int64, error) {
	var n int64
	err := s.inTx(ctx, func(tx *sql.Tx) (err error) {
		n, err = setStateIn(ctx, tx, name, st, message, cond, condArgs...)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("set workflow %q to %s: %w", name, st, err)
	}
	return n, nil
}

func setStateIn(ctx context.Context, tx *sql.Tx, name string, st State, message, cond string, condArgs ...any) (int64, error) {
	set := "state = ?, message = ?, updated_at = NOW(6)"
	if st == Error {
		set += ", last_error = message, last_error_at = NOW(6)"
	}
	// updated_at changes on every move, so a matched row counts as affected
	// with or without ClientFoundRows, even for a move to the state it is in.
	args := append([]any{st, message, name}, condArgs...)
	res, err := tx.ExecContext(ctx, "UPDATE "+Schema+".workflow SET "+set+" WHERE name = ?"+cond, args...)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil || n == 0 || st == Copying || st == Running {
		return n, err
	}
	// A workflow that must not apply (stopped, parked by a cutover, in
	// error) fences its streams in the same transaction: a run still going
	// until its applier notices can commit nothing more (ErrNotOwner).
	_, err = tx.ExecContext(ctx, "UPDATE "+Schema+".stream SET owner = 0 WHERE workflow = ?", name)
	return n, err
}

// StopAtDDL stops a workflow at the schema change of source transaction trx,
// and records in the same transaction that its stream from source stopped
// there: once the operator has made the same change on the target and
// resumed, the stream goes past it (StoppedAtDDL). A run that dies before the
// stop is recorded stops there again.
func (s *Store) StopAtDDL(ctx context.Context, name, source, trx, message string) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "UPDATE "+Schema+".stream SET stopped_ddl = ? WHERE workflow = ? AND source = ?", trx, name, source); err != nil {
			return err
		}
		n, err := setStateIn(ctx, tx, name, Stopped, message, "")
		if err == nil && n == 0 {
			err = ErrNotFound
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("stop workflow %q at the DDL of %s: %w", name, trx, err)
	}
	return nil
}

// DDLRun is a schema change on_ddl EXEC began to apply on the target: its
// source transaction, and the definitions of the target tables it changes
// from before it ran. A DDL commits on its own, never with the position, so a
// run that finds its change's record after a restart tells whether the
// change took from whether the definitions still read as before.
type DDLRun struct {
	GTID   string
	Before string
}

// StartDDLRun records run before its statement goes to the target; only the
// run that owns the stream writes it (ErrNotOwner).
func (s *Store) StartDDLRun(ctx context.Context, workflow, source string, owner int64, run DDLRun) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := checkOwner(ctx, tx, workflow, source, owner); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "UPDATE "+Schema+".stream SET ddl_run = ?, ddl_before = ? WHERE workflow = ? AND source = ?",
			run.GTID, run.Before, workflow, source)
		return err
	})
	if err != nil {
		return fmt.Errorf("record the schema change %s of %s/%s: %w", run.GTID, workflow, source, err)
	}
	return nil
}

// LastDDLRun is the schema change the stream last began to apply (StartDDLRun).
func (s *Store) LastDDLRun(ctx context.Context, workflow, source string) (DDLRun, error) {
	var run DDLRun
	var before sql.NullString
	if err := s.db.QueryRowContext(ctx, "SELECT ddl_run, ddl_before FROM "+Schema+".stream WHERE workflow = ? AND source = ?",
		workflow, source).Scan(&run.GTID, &before); err != nil {
		return DDLRun{}, fmt.Errorf("read the last schema change of %s/%s: %w", workflow, source, err)
	}
	run.Before = before.String
	return run, nil
}

// StoppedAtDDL is the source transaction of the schema change the stream from
// source last stopped the workflow at ("" if none).
func (s *Store) StoppedAtDDL(ctx context.Context, name, source string) (string, error) {
	var trx string
	if err := s.db.QueryRowContext(ctx, "SELECT stopped_ddl FROM "+Schema+".stream WHERE workflow = ? AND source = ?", name, source).Scan(&trx); err != nil {
		return "", fmt.Errorf("read the DDL %s/%s stopped at: %w", name, source, err)
	}
	return trx, nil
}

// DeleteWorkflow removes a workflow and all its progress. Copied rows stay.
func (s *Store) DeleteWorkflow(ctx context.Context, name string) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		for _, table := range []string{"replay_slot", "shadow_ddl", "copy_state", "verify", "verify_key", "stream", "cutover", "workflow"} {
			col := "workflow"
			if table == "workflow" {
				col = "name"
			}
			if _, err := tx.ExecContext(ctx, "DELETE FROM "+Schema+"."+table+" WHERE "+col+" = ?", name); err != nil {
				return fmt.Errorf("delete workflow %q: %w", name, err)
			}
		}
		return nil
	})
}

// CopyState returns the copy progress of a workflow's tables from one source, or
// from every source when source is empty.
func (s *Store) CopyState(ctx context.Context, workflow, source string) ([]TableCopy, error) {
	m, err := s.copyStates(ctx, "WHERE workflow = ? AND (? = '' OR source = ?)", workflow, source, source)
	if err != nil {
		return nil, fmt.Errorf("read copy state of %q: %w", workflow, err)
	}
	return m[workflow], nil
}

// copyStates returns the copy_state rows where says, by workflow.
func (s *Store) copyStates(ctx context.Context, where string, args ...any) (map[string][]TableCopy, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT workflow, source, table_name, last_pk, rows_copied, bytes_copied, done, rows_estimate, bytes_estimate, "+
		"run_started_at_us, run_start_rows, "+
		"updated_at_us, deferred_keys FROM "+Schema+".copy_state "+where+" ORDER BY workflow, source, table_name", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]TableCopy{}
	for rows.Next() {
		var workflow string
		var tc TableCopy
		var lastPK, keys []byte
		if err := rows.Scan(&workflow, &tc.Source, &tc.Table, &lastPK, &tc.RowsCopied, &tc.BytesCopied, &tc.Done, &tc.RowsEstimate, &tc.BytesEstimate, &tc.RunStartedAtUS,
			&tc.RunStartRows, &tc.UpdatedAtUS, &keys); err != nil {
			return nil, err
		}
		if keys != nil {
			deferred, err := decodeKeys(keys)
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %w", workflow, tc.Table, err)
			}
			for _, k := range deferred {
				tc.KeysPending = append(tc.KeysPending, k.Name)
			}
		}
		if lastPK != nil {
			tc.LastPK = &rowliftv1.Row{}
			if err := proto.Unmarshal(lastPK, tc.LastPK); err != nil {
				return nil, fmt.Errorf("decode last_pk of %s.%s: %w", workflow, tc.Table, err)
			}
		}
		out[workflow] = append(out[workflow], tc)
	}
	return out, rows.Err()
}

// Estimate is what the source's information_schema says of a table's size,
// which status compares the copy's progress with.
type Estimate struct {
	Rows  int64
	Bytes int64
}

// RecordCopyStart records, when a stream (re)starts, the source's estimates
// of each table and the start of the run's copy rate, for status.
func (s *Store) RecordCopyStart(ctx context.Context, workflow, source string, estimates map[string]Estimate) error {
	now := time.Now().UnixMicro()
	for table, e := range estimates {
		if _, err := s.db.ExecContext(ctx, "UPDATE "+Schema+".copy_state SET rows_estimate = ?, bytes_estimate = ?, run_started_at_us = ?, "+
			"run_start_rows = rows_copied WHERE workflow = ? AND source = ? AND table_name = ?",
			e.Rows, e.Bytes, now, workflow, source, table); err != nil {
			return fmt.Errorf("record copy start of %s/%s %s: %w", workflow, source, table, err)
		}
	}
	return nil
}

// CopyDone reports whether every table of the workflow has finished copying
// and has its deferred keys.
func (s *Store) CopyDone(ctx context.Context, workflow string) (bool, error) {
	var total, pending int
	err := s.db.QueryRowContext(ctx, "SELECT COUNT(*), COALESCE(SUM(NOT done OR deferred_keys IS NOT NULL), 0) FROM "+Schema+".copy_state WHERE workflow = ?",
		workflow).Scan(&total, &pending)
	if err != nil {
		return false, fmt.Errorf("read copy state of %q: %w", workflow, err)
	}
	if total == 0 {
		return false, fmt.Errorf("%w: %q", ErrNotFound, workflow)
	}
	return pending == 0, nil
}

// Streams returns the streams of a workflow.
func (s *Store) Streams(ctx context.Context, workflow string) ([]Stream, error) {
	m, err := s.streams(ctx, "WHERE workflow = ?", workflow)
	if err != nil {
		return nil, fmt.Errorf("read streams of %q: %w", workflow, err)
	}
	return m[workflow], nil
}

// streams returns the streams where says (a condition on workflow), by
// workflow, with their replay workers' rows folded in.
func (s *Store) streams(ctx context.Context, where string, args ...any) (map[string][]Stream, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT workflow, source, position, source_time_us, applied_at_us, message, message_at_us, IFNULL(throttled, ''), IFNULL(waiting, ''), "+
		"IFNULL(lost, ''), IFNULL(repairing, ''), source_server FROM "+Schema+
		".stream "+where+" ORDER BY workflow, source", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]Stream{}
	for rows.Next() {
		var workflow string
		var st Stream
		if err := rows.Scan(&workflow, &st.Source, &st.Position, &st.SourceTimeUS, &st.AppliedAtUS, &st.Message, &st.MessageAtUS, &st.Throttled, &st.Waiting,
			&st.Lost, &st.Repairing, &st.SourceServer); err != nil {
			return nil, err
		}
		out[workflow] = append(out[workflow], st)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, s.addSlots(ctx, out, where, args...)
}

// addSlots folds the replay workers' rows (where says) into the streams: the
// position is the latest watermark, the times those of the latest commit.
func (s *Store) addSlots(ctx context.Context, streams map[string][]Stream, where string, args ...any) error {
	rows, err := s.db.QueryContext(ctx, "SELECT workflow, source, watermark, source_time_us, applied_at_us FROM "+Schema+
		".replay_slot "+where, args...)
	if err != nil {
		return fmt.Errorf("read replay slots: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var workflow, source, watermark string
		var sourceTime, appliedAt int64
		if err := rows.Scan(&workflow, &source, &watermark, &sourceTime, &appliedAt); err != nil {
			return fmt.Errorf("read replay slots: %w", err)
		}
		for i := range streams[workflow] {
			st := &streams[workflow][i]
			if st.Source != source {
				continue
			}
			if st.Position, err = gtid.Merge(st.Position, watermark); err != nil {
				return err
			}
			if sourceTime > st.SourceTimeUS {
				st.SourceTimeUS, st.AppliedAtUS = sourceTime, appliedAt
			}
		}
	}
	return rows.Err()
}

// SetStreamMessage records why a stream is retrying, and since when; empty
// clears it.
func (s *Store) SetStreamMessage(ctx context.Context, workflow, source, message string) error {
	var at int64
	if message != "" {
		at = time.Now().UnixMicro()
	}
	_, err := s.db.ExecContext(ctx, "UPDATE "+Schema+".stream SET message = ?, message_at_us = ? WHERE workflow = ? AND source = ?",
		message, at, workflow, source)
	if err != nil {
		return fmt.Errorf("set stream message of %s/%s: %w", workflow, source, err)
	}
	return nil
}

// SetStreamThrottled records why the stream's copy waits on a throttle; empty
// clears it. Only the run that owns the stream writes it, so a run that was
// taken over cannot overwrite its successor's report.
func (s *Store) SetStreamThrottled(ctx context.Context, workflow, source string, owner int64, reason string) error {
	_, err := s.db.ExecContext(ctx, "UPDATE "+Schema+".stream SET throttled = ? WHERE workflow = ? AND source = ? AND owner = ?",
		reason, workflow, source, owner)
	if err != nil {
		return fmt.Errorf("set throttle state of %s/%s: %w", workflow, source, err)
	}
	return nil
}

// SetStreamWaiting records why the stream waits on its source before its
// binlog starts; empty clears it. Only the run that owns the stream writes it,
// as with SetStreamThrottled.
func (s *Store) SetStreamWaiting(ctx context.Context, workflow, source string, owner int64, reason string) error {
	_, err := s.db.ExecContext(ctx, "UPDATE "+Schema+".stream SET waiting = ? WHERE workflow = ? AND source = ? AND owner = ?",
		reason, workflow, source, owner)
	if err != nil {
		return fmt.Errorf("set waiting state of %s/%s: %w", workflow, source, err)
	}
	return nil
}

// SetSourceServer records the source server a run of the stream reads and
// returns the one it read before ("" the first time): a change is a failover,
// or a source address that now reaches another server. Only the run that owns
// the stream writes it.
func (s *Store) SetSourceServer(ctx context.Context, workflow, source string, owner int64, server string) (string, error) {
	var before string
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, "SELECT source_server FROM "+Schema+".stream WHERE workflow = ? AND source = ? AND owner = ? FOR UPDATE",
			workflow, source, owner).Scan(&before); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("%s/%s: %w", workflow, source, ErrNotOwner)
			}
			return err
		}
		_, err := tx.ExecContext(ctx, "UPDATE "+Schema+".stream SET source_server = ? WHERE workflow = ? AND source = ?", server, workflow, source)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("record the source server of %s/%s: %w", workflow, source, err)
	}
	return before, nil
}

// StreamOwners returns the owner token of each of the workflow's streams on
// this target, by source: a changed token tells that the applier started a new
// run of the stream (TakeOver), for instance after a verify was cancelled.
func (s *Store) StreamOwners(ctx context.Context, workflow string) (map[string]int64, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT source, owner FROM "+Schema+".stream WHERE workflow = ?", workflow)
	if err != nil {
		return nil, fmt.Errorf("read the streams of %q: %w", workflow, err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var src string
		var owner int64
		if err := rows.Scan(&src, &owner); err != nil {
			return nil, fmt.Errorf("read the streams of %q: %w", workflow, err)
		}
		out[src] = owner
	}
	return out, rows.Err()
}

// TakeOver makes a new run of a stream the only one whose state writes commit,
// and returns its owner token. A run that died (a killed process, a broken
// stream) can leave a transaction the server still commits after the client is
// gone; the takeover's UPDATE waits for any such transaction that holds the
// stream row, and every later write of the old run fails its owner check. State
// read after TakeOver is therefore final.
func (s *Store) TakeOver(ctx context.Context, workflow, source string) (int64, error) {
	owner := rand.Int64N(math.MaxInt64-1) + 1
	res, err := s.db.ExecContext(ctx, "UPDATE "+Schema+".stream SET owner = ? WHERE workflow = ? AND source = ?", owner, workflow, source)
	if err != nil {
		return 0, fmt.Errorf("take over stream %s/%s: %w", workflow, source, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return 0, fmt.Errorf("take over stream %s/%s: %w", workflow, source, ErrNotFound)
	}
	return owner, nil
}

// checkOwner locks the stream row inside the caller's transaction and fails
// with ErrNotOwner when another run took the stream over.
func checkOwner(ctx context.Context, tx Execer, workflow, source string, owner int64) error {
	var current int64
	err := tx.QueryRowContext(ctx, "SELECT owner FROM "+Schema+".stream WHERE workflow = ? AND source = ? FOR UPDATE",
		workflow, source).Scan(&current)
	if err != nil {
		return fmt.Errorf("check owner of %s/%s: %w", workflow, source, err)
	}
	if current != owner {
		return fmt.Errorf("%s/%s: %w", workflow, source, ErrNotOwner)
	}
	return nil
}

// SavePosition records, inside the caller's transaction, the source position the
// target has applied and the source commit time of the last applied item; it
// fails with ErrNotOwner when the stream was taken over.
func SavePosition(ctx context.Context, tx Execer, workflow, source string, owner int64, position string, sourceTimeUS int64) error {
	// One statement: the owner condition is checked on the latest committed row
	// under its lock, so a run that was taken over cannot commit a position.
	res, err := tx.ExecContext(ctx, "UPDATE "+Schema+".stream SET position = ?, source_time_us = GREATEST(source_time_us, ?), "+
		"applied_at_us = ? WHERE workflow = ? AND source = ? AND owner = ?", position, sourceTimeUS, time.Now().UnixMicro(), workflow, source, owner)
	if err != nil {
		return fmt.Errorf("save position of %s/%s: %w", workflow, source, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		// Zero rows: not the owner, or (without CLIENT_FOUND_ROWS) nothing changed.
		return checkOwner(ctx, tx, workflow, source, owner)
	}
	return nil
}

// Execer is the part of *sql.Tx and *sql.Conn that progress writers need, so
// progress commits in the caller's transaction with the data.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// SaveCopyProgress records, inside the caller's transaction, that rows up to
// lastPK of a table have been copied, adding rows and bytes (of packed rows)
// to the table's counts; it fails with ErrNotOwner when the stream was taken
// over.
func SaveCopyProgress(ctx context.Context, tx Execer, workflow, source string, owner int64, table string, lastPK *rowliftv1.Row, rows, bytes int64, done bool) error {
	if err := checkOwner(ctx, tx, workflow, source, owner); err != nil {
		return err
	}
	var pk []byte
	if lastPK != nil {
		var err error
		if pk, err = proto.Marshal(lastPK); err != nil {
			return fmt.Errorf("encode last_pk of %s: %w", table, err)
		}
	}
	_, err := tx.ExecContext(ctx, "UPDATE "+Schema+".copy_state SET last_pk = COALESCE(?, last_pk), rows_copied = rows_copied + ?, bytes_copied = bytes_copied + ?, "+
		"done = ?, updated_at_us = ? WHERE workflow = ? AND source = ? AND table_name = ?", pk, rows, bytes, done, time.Now().UnixMicro(), workflow, source, table)
	if err != nil {
		return fmt.Errorf("save copy progress of %s: %w", table, err)
	}
	return nil
}

func (s *Store) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func unixTime(seconds float64) time.Time {
	return time.UnixMicro(int64(math.Round(seconds * 1e6)))
}
