package state

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/rowlift/rowlift/internal/reshard"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// Journal is the journal of one switch or reverse of a workflow pair, kept on
// the forward workflow's first target. The coordinator records each step after
// its effect, so whoever resumes the journal (the same coordinator, another
// one, or the next request) repeats at most one idempotent step.
type Journal struct {
	// Workflow is the forward workflow's name; Partner the reverse one's.
	Workflow string `json:"workflow"`
	Partner  string `json:"partner"`
	// Direction is "switch" (writes go to the forward workflow's targets) or
	// "reverse" (back to its sources).
	Direction string `json:"direction"`
	Step      string `json:"step"`
	// Mode is how the side losing writes is frozen; UnfreezeMode how the side
	// gaining them was frozen by the previous cutover (NONE when it was not).
	Mode         rowliftv1.FreezeMode `json:"mode"`
	UnfreezeMode rowliftv1.FreezeMode `json:"unfreeze_mode"`
	// LockRenamed: a LOCK freeze was turned into the RENAME one at the end of
	// the pause (the frozen side's tables are renamed to their frozen names,
	// as after a RENAME freeze). Journals written before this was done leave
	// the tables of a LOCK freeze in place.
	LockRenamed bool `json:"lock_renamed,omitempty"`
	// Routed: the routing hook ran in the Follow step, as soon as the gaining
	// side took writes. Journals written before this was done run it at the
	// end (unless LockRenamed, whose Follow ran it under the lock).
	Routed    bool   `json:"routed,omitempty"`
	TimeoutMS int64  `json:"timeout_ms"`
	HookCmd   string `json:"hook_cmd,omitempty"`
	// FreezePositions are, per shard of the frozen side, its position right
	// after the freeze: the stopping workflow must apply them. StartPositions
	// are, per shard of the side gaining writes, where the starting workflow
	// begins.
	FreezePositions map[string]string `json:"freeze_positions,omitempty"`
	StartPositions  map[string]string `json:"start_positions,omitempty"`
	StartedAtUS     int64             `json:"started_at_us"`
	FreezeAtUS      int64             `json:"freeze_at_us,omitempty"`
	WritableAtUS    int64             `json:"writable_at_us,omitempty"`
	DeadlineUS      int64             `json:"deadline_us"`
	FinishedAtUS    int64             `json:"finished_at_us,omitempty"`
	Message         string            `json:"message,omitempty"`
	HookOutput      string            `json:"hook_output,omitempty"`
	// Steps are the steps the cutover went through, oldest first, each added
	// by Enter and so saved by the same write that records the step: they
	// survive whatever the step survives. At most maxJournalSteps are kept.
	// Journals written before this was done have none.
	Steps []JournalStep `json:"steps,omitempty"`
}

// JournalStep is one step as the journal recorded it, so that status shows a
// cutover's whole course, whichever coordinator drove it and however fast.
type JournalStep struct {
	Step string `json:"step"`
	AtUS int64  `json:"at_us"`
	// Message is why the cutover took the step (a rollback's reason, a lost
	// freeze lock); empty when it is the plain next one.
	Message string `json:"message,omitempty"`
}

// maxJournalSteps bounds Journal.Steps. A cutover takes at most six steps;
// only a LOCK freeze whose lock is lost and taken again enters a step again,
// and keeps doing so while it loses the lock.
const maxJournalSteps = 32

// Enter puts the journal at step, at, for why (empty: none), and adds it to
// Steps; the caller's next SaveJournal records both. A step entered again
// (the freeze taken again at later positions) is added again.
func (c *Journal) Enter(step, why string, at time.Time) {
	c.Step = step
	if why != "" {
		c.Message = why
	}
	c.Steps = append(c.Steps, JournalStep{Step: step, AtUS: at.UnixMicro(), Message: why})
	if len(c.Steps) > maxJournalSteps {
		// The first stays: the timeline keeps where the cutover began and
		// where it is now.
		c.Steps = append(c.Steps[:1], c.Steps[len(c.Steps)-maxJournalSteps+1:]...)
	}
}

// WritePauseMS is how long writes could go nowhere: from the freeze to the
// moment the other side could take them; -1 before that moment.
func (c *Journal) WritePauseMS() int64 {
	if c.WritableAtUS == 0 || c.FreezeAtUS == 0 {
		return -1
	}
	return (c.WritableAtUS - c.FreezeAtUS) / 1000
}

// Journal returns a workflow pair's last cutover journal, or ErrNotFound.
func (s *Store) Journal(ctx context.Context, workflow string) (*Journal, error) {
	m, err := s.journals(ctx, "WHERE workflow = ?", workflow)
	if err != nil {
		return nil, fmt.Errorf("read cutover of %q: %w", workflow, err)
	}
	if m[workflow] == nil {
		return nil, fmt.Errorf("%w: no cutover of %q", ErrNotFound, workflow)
	}
	return m[workflow], nil
}

// journals returns the cutover journals where says, by workflow.
func (s *Store) journals(ctx context.Context, where string, args ...any) (map[string]*Journal, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT workflow, journal FROM "+Schema+".cutover "+where, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]*Journal{}
	for rows.Next() {
		var workflow string
		var js []byte
		if err := rows.Scan(&workflow, &js); err != nil {
			return nil, err
		}
		c := &Journal{}
		if err := json.Unmarshal(js, c); err != nil {
			return nil, fmt.Errorf("decode cutover of %q: %w", workflow, err)
		}
		out[workflow] = c
	}
	return out, rows.Err()
}

// SaveJournal records a journal, replacing the pair's previous one.
func (s *Store) SaveJournal(ctx context.Context, c *Journal) error {
	js, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode cutover of %q: %w", c.Workflow, err)
	}
	// The new values are given twice, not read back with VALUES(), which
	// MySQL deprecates (a warning on every upsert) and MariaDB has no
	// replacement for.
	_, err = s.db.ExecContext(ctx, "INSERT INTO "+Schema+".cutover (workflow, step, journal) VALUES (?, ?, ?) "+
		"ON DUPLICATE KEY UPDATE step = ?, journal = ?", c.Workflow, c.Step, js, c.Step, js)
	if err != nil {
		return fmt.Errorf("save cutover of %q at step %s: %w", c.Workflow, c.Step, err)
	}
	return nil
}

// Follow makes a workflow run from given positions with no copy: it creates it
// (a reverse workflow's first start) or, when it waits in state switched,
// rewrites its definition and positions. In one transaction, and only from
// those two conditions: once a workflow follows, a repeated call changes
// nothing, so it never rewinds positions it has applied past. It reports
// whether it changed anything.
func (s *Store) Follow(ctx context.Context, spec *rowliftv1.WorkflowSpec, target string, positions map[string]string, message string) (bool, error) {
	streams, err := reshard.ForTarget(spec, target)
	if err != nil {
		return false, fmt.Errorf("workflow %q: %w", spec.GetName(), err)
	}
	js, err := protojson.Marshal(spec)
	if err != nil {
		return false, fmt.Errorf("encode workflow %q: %w", spec.GetName(), err)
	}
	name := spec.GetName()
	changed := false
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		var cur State
		err := tx.QueryRowContext(ctx, "SELECT state FROM "+Schema+".workflow WHERE name = ? FOR UPDATE", name).Scan(&cur)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			if _, err := tx.ExecContext(ctx, "INSERT INTO "+Schema+".workflow (name, spec, state, message, target) VALUES (?, ?, ?, ?, ?)",
				name, js, Running, message, target); err != nil {
				return err
			}
		case err != nil:
			return err
		case cur != Switched:
			return nil
		default:
			if _, err := tx.ExecContext(ctx, "UPDATE "+Schema+".workflow SET spec = ?, state = ?, message = ?, target = ?, updated_at = NOW(6) WHERE name = ?",
				js, Running, message, target, name); err != nil {
				return err
			}
		}
		changed = true
		for _, q := range []string{"DELETE FROM " + Schema + ".replay_slot WHERE workflow = ?", "DELETE FROM " + Schema + ".shadow_ddl WHERE workflow = ?",
			"DELETE FROM " + Schema + ".stream WHERE workflow = ?"} {
			if _, err := tx.ExecContext(ctx, q, name); err != nil {
				return err
			}
		}
		for _, st := range streams {
			src := st.Source
			pos, ok := positions[src.GetName()]
			if !ok {
				return fmt.Errorf("no start position for source %s", src.GetName())
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO "+Schema+".stream (workflow, source, position, message) VALUES (?, ?, ?, '')",
				name, src.GetName(), pos); err != nil {
				return err
			}
			for _, t := range st.Spec.GetTables() {
				// A parked workflow keeps its copy counts; its copy is done.
				if _, err := tx.ExecContext(ctx, "INSERT IGNORE INTO "+Schema+".copy_state (workflow, source, table_name, done) VALUES (?, ?, ?, 1)",
					name, src.GetName(), t.GetName()); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("start workflow %q from the switch positions: %w", name, err)
	}
	return changed, nil
}

// UnfinishedJournals lists the workflows whose last cutover has not ended, for
// the coordinator to resume after a crash.
func (s *Store) UnfinishedJournals(ctx context.Context) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT workflow FROM "+Schema+".cutover WHERE step NOT IN ('done', 'rolled_back') ORDER BY workflow")
	if err != nil {
		return nil, fmt.Errorf("read unfinished cutovers: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("read unfinished cutovers: %w", err)
		}
		out = append(out, name)
	}
	return out, rows.Err()
}

// Renamed reports whether the cutover left the frozen side's tables renamed
// to their frozen names: a RENAME freeze, or a LOCK one turned into it.
func (j *Journal) Renamed() bool {
	return j.Mode == rowliftv1.FreezeMode_FREEZE_MODE_RENAME || j.LockRenamed
}
