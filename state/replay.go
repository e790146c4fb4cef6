package state

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/rowcodec"
)

// AppendSaveSlot appends the statement that records, inside a replay worker's
// transaction, how far replay has got: watermark (every source transaction up
// to it is applied) and applied (the last transaction this commit applies;
// later than watermark only when commits go out of source order). Each worker
// writes its own row, so parallel commits do not queue on one row lock; they
// take the stream row in share mode only to check the owner, which makes a
// takeover wait for them and refuses them after. Its values are written in, so
// that a worker sends it in one query with its group's statements, a round
// trip fewer per group; SlotSaved reads its row count.
func AppendSaveSlot(buf []byte, workflow, source string, owner int64, slot int, watermark, applied string, sourceTimeUS int64) []byte {
	// The new values are given twice, not read back with VALUES(), which
	// MySQL deprecates (a warning on every commit) and MariaDB has no
	// replacement for.
	now := strconv.FormatInt(time.Now().UnixMicro(), 10)
	srcTime := strconv.FormatInt(sourceTimeUS, 10)
	text := func(buf []byte, s string) []byte {
		buf, _ = rowcodec.AppendLiteral(buf, rowcodec.String, []byte(s))
		return buf
	}
	buf = append(buf, "INSERT INTO "+Schema+".replay_slot (workflow, source, slot, watermark, applied, source_time_us, applied_at_us) SELECT workflow, source, "...)
	buf = strconv.AppendInt(buf, int64(slot), 10)
	buf = text(append(buf, ", "...), watermark)
	buf = text(append(buf, ", "...), applied)
	buf = append(buf, ", "+srcTime+", "+now+" FROM "+Schema+".stream WHERE workflow = "...)
	buf = text(buf, workflow)
	buf = text(append(buf, " AND source = "...), source)
	buf = strconv.AppendInt(append(buf, " AND owner = "...), owner, 10)
	buf = text(append(buf, " LOCK IN SHARE MODE ON DUPLICATE KEY UPDATE watermark = "...), watermark)
	buf = text(append(buf, ", applied = "...), applied)
	return append(buf, ", source_time_us = GREATEST(replay_slot.source_time_us, "+srcTime+"), applied_at_us = "+now...)
}

// SlotSaved is the outcome of AppendSaveSlot's statement that changed n rows:
// none when another run of the stream took it over.
func SlotSaved(workflow, source string, n int64) error {
	if n == 0 {
		return fmt.Errorf("%s/%s: %w", workflow, source, ErrNotOwner)
	}
	return nil
}

// Resume is where a stream continues after a restart.
type Resume struct {
	// Position covers every source transaction the target has applied.
	Position string
	// MaybeApplied covers transactions after Position that an out-of-order run
	// may have committed: they are applied again with idempotent writes.
	MaybeApplied string
	// Repairing is non-empty after a rewind (Rewind) until the verify with
	// repair finishes: every transaction is applied with idempotent writes.
	Repairing string
}

// ResumeAt merges the stream row with the replay workers' rows into the
// position a new run of the stream starts from.
func (s *Store) ResumeAt(ctx context.Context, workflow, source string) (Resume, error) {
	var r Resume
	if err := s.db.QueryRowContext(ctx, "SELECT position, IFNULL(repairing, '') FROM "+Schema+".stream WHERE workflow = ? AND source = ?",
		workflow, source).Scan(&r.Position, &r.Repairing); err != nil {
		return Resume{}, fmt.Errorf("read position of %s/%s: %w", workflow, source, err)
	}
	r.MaybeApplied = r.Position
	rows, err := s.db.QueryContext(ctx, "SELECT watermark, applied FROM "+Schema+".replay_slot WHERE workflow = ? AND source = ?",
		workflow, source)
	if err != nil {
		return Resume{}, fmt.Errorf("read replay slots of %s/%s: %w", workflow, source, err)
	}
	defer rows.Close()
	for rows.Next() {
		var watermark, applied string
		if err := rows.Scan(&watermark, &applied); err != nil {
			return Resume{}, fmt.Errorf("read replay slots of %s/%s: %w", workflow, source, err)
		}
		if r.Position, err = gtid.Merge(r.Position, watermark); err != nil {
			return Resume{}, err
		}
		if r.MaybeApplied, err = gtid.Merge(r.MaybeApplied, applied); err != nil {
			return Resume{}, err
		}
	}
	if err := rows.Err(); err != nil {
		return Resume{}, err
	}
	r.MaybeApplied, err = gtid.Merge(r.MaybeApplied, r.Position)
	return r, err
}
