package state

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/rowlift/rowlift/internal/reshard"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// VerifyCounts are what a verify found: rows compared, keys missing on the
// target, extra there, different, and rewritten by a repair.
type VerifyCounts struct {
	RowsCompared int64
	Missing      int64
	Extra        int64
	Different    int64
	Repaired     int64
}

// TableVerify is the verify of one table from one source, as its stream last
// committed it.
type TableVerify struct {
	Source string
	Table  string
	// StartedAtUS tells verifies apart: a new one restarts the stream.
	StartedAtUS int64
	Repair      bool
	LastPK      *rowliftv1.Row // nil before the first chunk
	Done        bool
	// Recheck is set after a chunk's digests differed: the stream compares
	// rows, not digests, after LastPK up to RowsThrough (nil: the table's end).
	Recheck     bool
	RowsThrough *rowliftv1.Row
	VerifyCounts
	// Examples are the first differing (or repaired) keys, like
	// "missing on target: (id=5)".
	Examples     []string
	FinishedAtUS int64
	UpdatedAtUS  int64
	// Outcome is how a done table's verify ended early (empty: it ran to its
	// end, or it still runs); Message says why.
	Outcome VerifyOutcome
	Message string
}

// VerifyOutcome is how a table's verify ended before its last chunk.
type VerifyOutcome string

// The early ends of a table's verify.
const (
	// VerifyCancelled: an operator or a cutover stopped it (CancelVerify).
	VerifyCancelled VerifyOutcome = "cancelled"
	// VerifyFailed: its chunks could not be read any more, like a table
	// renamed or dropped on the source (FailVerify).
	VerifyFailed VerifyOutcome = "failed"
)

// VerifyChunk is what one verify chunk found, committed with its progress.
type VerifyChunk struct {
	LastPK *rowliftv1.Row // nil: the chunk had no rows
	Done   bool
	// EndRecheck says the chunk's rows were the last of a recheck
	// (TableVerify.Recheck): the verify goes on with digests.
	EndRecheck bool
	VerifyCounts
	Examples []string
}

// MaxVerifyExamples is how many differing keys a table's verify keeps.
const MaxVerifyExamples = 20

// StartVerify starts a verify of every table of every stream the workflow runs
// on this target, all at once in one transaction, unless one is running and
// restart is false; it reports whether it started one. A finished verify is
// always replaced.
func (s *Store) StartVerify(ctx context.Context, workflow string, repair, restart bool) (bool, error) {
	started := false
	err := s.inTx(ctx, func(tx *sql.Tx) (err error) {
		started, err = startVerify(ctx, tx, workflow, repair, restart)
		return err
	})
	return started, err
}

// startVerify is StartVerify inside the caller's transaction.
func startVerify(ctx context.Context, tx *sql.Tx, workflow string, repair, restart bool) (bool, error) {
	var js []byte
	var target string
	if err := tx.QueryRowContext(ctx, "SELECT spec, target FROM "+Schema+".workflow WHERE name = ? FOR UPDATE", workflow).Scan(&js, &target); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return false, fmt.Errorf("%w: %q", ErrNotFound, workflow)
		}
		return false, fmt.Errorf("read workflow %q: %w", workflow, err)
	}
	spec := &rowliftv1.WorkflowSpec{}
	if err := protojson.Unmarshal(js, spec); err != nil {
		return false, fmt.Errorf("decode workflow spec: %w", err)
	}
	streams, err := reshard.ForTarget(spec, target)
	if err != nil {
		return false, fmt.Errorf("workflow %q: %w", workflow, err)
	}
	var running int
	if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+Schema+".verify WHERE workflow = ? AND NOT done FOR UPDATE",
		workflow).Scan(&running); err != nil {
		return false, fmt.Errorf("read verify of %q: %w", workflow, err)
	}
	if running > 0 && !restart {
		return false, nil
	}
	for _, t := range []string{"verify", "verify_key"} {
		if _, err := tx.ExecContext(ctx, "DELETE FROM "+Schema+"."+t+" WHERE workflow = ?", workflow); err != nil {
			return false, fmt.Errorf("start verify of %q: %w", workflow, err)
		}
	}
	now := time.Now().UnixMicro()
	for _, st := range streams {
		for _, t := range st.Spec.GetTables() {
			if _, err := tx.ExecContext(ctx, "INSERT INTO "+Schema+".verify (workflow, source, table_name, started_at_us, repair, examples, updated_at_us) "+
				"VALUES (?, ?, ?, ?, ?, '[]', ?)", workflow, st.Source.GetName(), t.GetName(), now, repair, now); err != nil {
				return false, fmt.Errorf("start verify of %q: %w", workflow, err)
			}
		}
	}
	return true, nil
}

// CancelVerify ends every table of the workflow's verify that is still
// running on this target as cancelled, saying why in message, and returns the
// sources whose streams ran it (none: no verify was running). Tables already
// verified keep their results. It is one state write: a restarted applier or
// coordinator sees it cancelled, and the applier restarts those streams
// without it (VerifyGenerations).
func (s *Store) CancelVerify(ctx context.Context, workflow, message string) ([]string, error) {
	var sources []string
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, "SELECT DISTINCT source FROM "+Schema+".verify WHERE workflow = ? AND NOT done FOR UPDATE", workflow)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var src string
			if err := rows.Scan(&src); err != nil {
				return err
			}
			sources = append(sources, src)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		now := time.Now().UnixMicro()
		_, err = tx.ExecContext(ctx, "UPDATE "+Schema+".verify SET done = 1, outcome = ?, message = ?, finished_at_us = ?, updated_at_us = ? "+
			"WHERE workflow = ? AND NOT done", string(VerifyCancelled), message, now, now, workflow)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cancel verify of %q: %w", workflow, err)
	}
	return sources, nil
}

// FailVerify ends one table's running verify as failed with message, for a
// table whose verify chunks cannot be read any more: the stream opens again
// without it instead of failing on it forever. A table whose verify ended
// meanwhile keeps how it ended.
func (s *Store) FailVerify(ctx context.Context, workflow, source, table, message string) error {
	now := time.Now().UnixMicro()
	if _, err := s.db.ExecContext(ctx, "UPDATE "+Schema+".verify SET done = 1, outcome = ?, message = ?, finished_at_us = ?, updated_at_us = ? "+
		"WHERE workflow = ? AND source = ? AND table_name = ? AND NOT done", string(VerifyFailed), message, now, now, workflow, source, table); err != nil {
		return fmt.Errorf("record the failed verify of %s: %w", table, err)
	}
	return nil
}

// Verify returns the verify of a workflow's tables from one source, or from
// every source when source is empty; none when no verify was ever started.
func (s *Store) Verify(ctx context.Context, workflow, source string) ([]TableVerify, error) {
	m, err := s.verifies(ctx, "WHERE workflow = ? AND (? = '' OR source = ?)", workflow, source, source)
	if err != nil {
		return nil, fmt.Errorf("read verify of %q: %w", workflow, err)
	}
	return m[workflow], nil
}

// verifies returns the verify rows where says, by workflow.
func (s *Store) verifies(ctx context.Context, where string, args ...any) (map[string][]TableVerify, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT workflow, source, table_name, started_at_us, repair, last_pk, done, rows_compared, missing, extra, different, "+
		"repaired, examples, finished_at_us, updated_at_us, outcome, COALESCE(message, ''), recheck, rows_through FROM "+Schema+".verify "+where+
		" ORDER BY workflow, source, table_name", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]TableVerify{}
	for rows.Next() {
		var workflow string
		var v TableVerify
		var lastPK, examples, through []byte
		if err := rows.Scan(&workflow, &v.Source, &v.Table, &v.StartedAtUS, &v.Repair, &lastPK, &v.Done, &v.RowsCompared, &v.Missing, &v.Extra,
			&v.Different, &v.Repaired, &examples, &v.FinishedAtUS, &v.UpdatedAtUS, &v.Outcome, &v.Message, &v.Recheck, &through); err != nil {
			return nil, err
		}
		if v.Recheck && through != nil {
			v.RowsThrough = &rowliftv1.Row{}
			if err := proto.Unmarshal(through, v.RowsThrough); err != nil {
				return nil, fmt.Errorf("decode verify rows_through of %s.%s: %w", workflow, v.Table, err)
			}
		}
		if lastPK != nil {
			v.LastPK = &rowliftv1.Row{}
			if err := proto.Unmarshal(lastPK, v.LastPK); err != nil {
				return nil, fmt.Errorf("decode verify last_pk of %s.%s: %w", workflow, v.Table, err)
			}
		}
		if err := json.Unmarshal(examples, &v.Examples); err != nil {
			return nil, fmt.Errorf("decode verify examples of %s.%s: %w", workflow, v.Table, err)
		}
		out[workflow] = append(out[workflow], v)
	}
	return out, rows.Err()
}

// VerifyGeneration is what the applier restarts a stream on: a verify that
// started (the streamer learns of it with the stream's request), or the
// cancel of the one the stream runs (the streamer must stop sending its
// chunks). Running is when the stream's running verify started (0: none);
// Cancelled when its last cancelled one did (0: none).
type VerifyGeneration struct {
	Running, Cancelled int64
}

// VerifyGenerations returns the verify generation of every (workflow, source)
// stream that has verify rows.
func (s *Store) VerifyGenerations(ctx context.Context) (map[[2]string]VerifyGeneration, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT workflow, source, MAX(IF(NOT done, started_at_us, 0)), MAX(IF(outcome = ?, started_at_us, 0)) FROM "+
		Schema+".verify GROUP BY workflow, source", string(VerifyCancelled))
	if err != nil {
		return nil, fmt.Errorf("read verifies: %w", err)
	}
	defer rows.Close()
	out := map[[2]string]VerifyGeneration{}
	for rows.Next() {
		var w, src string
		var g VerifyGeneration
		if err := rows.Scan(&w, &src, &g.Running, &g.Cancelled); err != nil {
			return nil, fmt.Errorf("read verifies: %w", err)
		}
		out[[2]string{w, src}] = g
	}
	return out, rows.Err()
}

// SaveVerifyChunk adds, inside the caller's transaction (the one that repaired
// the chunk's rows, if any), what a verify chunk found and moves the table's
// verify past it; it fails with ErrNotOwner when the stream was taken over.
// started must be the verify's: a chunk of a verify that was replaced meanwhile
// changes nothing.
func SaveVerifyChunk(ctx context.Context, tx Execer, workflow, source string, owner int64, table string, started int64, c VerifyChunk) error {
	if err := checkOwner(ctx, tx, workflow, source, owner); err != nil {
		return err
	}
	var examples []byte
	// A cancelled (or failed) table stays so: its row is done, and a chunk
	// checked meanwhile must not make it run again.
	if err := tx.QueryRowContext(ctx, "SELECT examples FROM "+Schema+".verify WHERE workflow = ? AND source = ? AND table_name = ? AND started_at_us = ? "+
		"AND outcome = '' FOR UPDATE", workflow, source, table, started).Scan(&examples); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("save verify of %s: the verify was replaced, cancelled or removed meanwhile: %w", table, ErrNotOwner)
		}
		return fmt.Errorf("save verify of %s: %w", table, err)
	}
	var list []string
	if err := json.Unmarshal(examples, &list); err != nil {
		return fmt.Errorf("decode verify examples of %s: %w", table, err)
	}
	for _, e := range c.Examples {
		if len(list) < MaxVerifyExamples {
			list = append(list, e)
		}
	}
	examples, err := json.Marshal(list)
	if err != nil {
		return fmt.Errorf("encode verify examples of %s: %w", table, err)
	}
	var pk []byte
	if c.LastPK != nil {
		if pk, err = proto.Marshal(c.LastPK); err != nil {
			return fmt.Errorf("encode verify last_pk of %s: %w", table, err)
		}
	}
	now := time.Now().UnixMicro()
	var finished int64
	if c.Done {
		finished = now
	}
	_, err = tx.ExecContext(ctx, "UPDATE "+Schema+".verify SET last_pk = COALESCE(?, last_pk), done = ?, rows_compared = rows_compared + ?, "+
		"missing = missing + ?, extra = extra + ?, different = different + ?, repaired = repaired + ?, examples = ?, finished_at_us = ?, "+
		"updated_at_us = ?, recheck = recheck AND NOT ?, rows_through = IF(?, NULL, rows_through) WHERE workflow = ? AND source = ? AND table_name = ?",
		pk, c.Done, c.RowsCompared, c.Missing, c.Extra, c.Different, c.Repaired, examples, finished, now, c.EndRecheck || c.Done, c.EndRecheck || c.Done,
		workflow, source, table)
	if err != nil {
		return fmt.Errorf("save verify of %s: %w", table, err)
	}
	if c.Done {
		return endRepair(ctx, tx, workflow, source)
	}
	return nil
}

// SaveVerifyRecheck records that a verify chunk's digests differed: the
// stream, reopened, compares the rows after the table's last verified key up
// to through (nil: the table's end) before it goes on with digests. It fails
// as SaveVerifyChunk does when the stream was taken over or the verify
// replaced.
func SaveVerifyRecheck(ctx context.Context, tx Execer, workflow, source string, owner int64, table string, started int64, through *rowliftv1.Row) error {
	if err := checkOwner(ctx, tx, workflow, source, owner); err != nil {
		return err
	}
	var pk []byte
	if through != nil {
		var err error
		if pk, err = proto.Marshal(through); err != nil {
			return fmt.Errorf("encode verify rows_through of %s: %w", table, err)
		}
	}
	res, err := tx.ExecContext(ctx, "UPDATE "+Schema+".verify SET recheck = 1, rows_through = ?, updated_at_us = ? "+
		"WHERE workflow = ? AND source = ? AND table_name = ? AND started_at_us = ? AND outcome = '' AND NOT done",
		pk, time.Now().UnixMicro(), workflow, source, table, started)
	if err != nil {
		return fmt.Errorf("save verify recheck of %s: %w", table, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("save verify recheck of %s: the verify was replaced, cancelled or removed meanwhile: %w", table, ErrNotOwner)
	}
	return nil
}

// Queryer is what FinishMergeVerify reads and writes with: the caller's
// transaction, or the connection it runs on.
type Queryer interface {
	Execer
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// MergeKey is a key the verify of a merge met in one source's chunk: held
// by that source (Holder; Differs when the target's row is not the
// source's), or on the target and not on it (Foreign).
type MergeKey struct {
	// Form is the key as the servers compare it (verify.Diff.KeyForm).
	Form    []byte
	Shown   string
	Holder  bool
	Differs bool
	Foreign bool
}

// SaveMergeKeys records, inside the caller's transaction (the one that
// records the chunk), the keys a chunk of source number source met, for the
// end of the table's verify (FinishMergeVerify). Keys of one kind go in one
// statement whose update is a constant (MySQL warns on every VALUES() in ON
// DUPLICATE KEY UPDATE); a key keeps the text it was first shown with.
func SaveMergeKeys(ctx context.Context, tx Execer, workflow, table string, source int, keys []MergeKey) error {
	const batch = 500
	bit := uint64(1) << source
	for _, kind := range []struct {
		foreign, holder, differs bool
		update                   string
	}{
		{foreign: true, update: "foreign_sources = foreign_sources | ?"},
		{holder: true, update: "holders = holders | ?"},
		{holder: true, differs: true, update: "holders = holders | ?, differs = differs | ?"},
	} {
		var args []any
		n := 0
		flush := func() error {
			if n == 0 {
				return nil
			}
			q := "INSERT INTO " + Schema + ".verify_key (workflow, table_name, key_hash, shown, foreign_sources, holders, differs) VALUES " +
				strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?),", n), ",") + " ON DUPLICATE KEY UPDATE " + kind.update
			args = append(args, bit)
			if kind.differs {
				args = append(args, bit)
			}
			if _, err := tx.ExecContext(ctx, q, args...); err != nil {
				return fmt.Errorf("save the verify's keys of %s: %w", table, err)
			}
			args, n = args[:0], 0
			return nil
		}
		flag := func(b bool) uint64 {
			if b {
				return bit
			}
			return 0
		}
		for _, k := range keys {
			if k.Foreign != kind.foreign || k.Holder != kind.holder || k.Differs != kind.differs {
				continue
			}
			hash := sha256.Sum256(k.Form)
			args = append(args, workflow, table, hash[:], k.Shown, flag(k.Foreign), flag(k.Holder), flag(k.Differs))
			if n++; n == batch {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if err := flush(); err != nil {
			return err
		}
	}
	return nil
}

// FinishMergeVerify is called, inside the caller's transaction, by the
// stream of source number source when its verify of table has reached the
// table's end. It locks the table's verify rows of every source (in key
// order, so two sources finishing at once wait rather than deadlock) and,
// when every other source's verify of the table is done too, reads what only
// all of them together can tell, as verify's examples: keys on the target
// that no source holds (extra), keys that several sources hold (several,
// with the names of their holders, from sources by number), and keys one
// source holds whose target row differs from it (different); then it
// forgets the table's keys. last says whether it did.
func FinishMergeVerify(ctx context.Context, tx Queryer, workflow, table string, source int, sources []string) (extra, several, different []string, last bool, err error) {
	rows, err := tx.QueryContext(ctx, "SELECT source, done FROM "+Schema+".verify WHERE workflow = ? AND table_name = ? ORDER BY source FOR UPDATE",
		workflow, table)
	if err != nil {
		return nil, nil, nil, false, fmt.Errorf("finish the verify of %s: %w", table, err)
	}
	pending := false
	for rows.Next() {
		var name string
		var done bool
		if err := rows.Scan(&name, &done); err != nil {
			rows.Close()
			return nil, nil, nil, false, fmt.Errorf("finish the verify of %s: %w", table, err)
		}
		pending = pending || !done && name != sources[source]
	}
	rows.Close()
	if err := rows.Err(); err != nil || pending {
		return nil, nil, nil, false, err
	}
	read := func(what, where string, args ...any) ([]string, error) {
		rows, err := tx.QueryContext(ctx, "SELECT shown, holders FROM "+Schema+".verify_key WHERE workflow = ? AND table_name = ? AND "+where+
			" ORDER BY shown", append([]any{workflow, table}, args...)...)
		if err != nil {
			return nil, fmt.Errorf("finish the verify of %s: %w", table, err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var shown string
			var holders uint64
			if err := rows.Scan(&shown, &holders); err != nil {
				return nil, fmt.Errorf("finish the verify of %s: %w", table, err)
			}
			prefix := what
			if what == "" {
				var names []string
				for i, n := range sources {
					if holders&(1<<i) != 0 {
						names = append(names, n)
					}
				}
				prefix = "on several sources (" + strings.Join(names, ", ") + "): "
			}
			out = append(out, prefix+shown)
		}
		return out, rows.Err()
	}
	if extra, err = read("extra on target: ", "holders = 0 AND foreign_sources = ?", uint64(1)<<len(sources)-1); err != nil {
		return nil, nil, nil, false, err
	}
	if several, err = read("", "BIT_COUNT(holders) > 1"); err != nil {
		return nil, nil, nil, false, err
	}
	if different, err = read("different: ", "BIT_COUNT(holders) = 1 AND differs <> 0"); err != nil {
		return nil, nil, nil, false, err
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM "+Schema+".verify_key WHERE workflow = ? AND table_name = ?", workflow, table); err != nil {
		return nil, nil, nil, false, fmt.Errorf("finish the verify of %s: %w", table, err)
	}
	return extra, several, different, true, nil
}
