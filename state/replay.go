package state

import (
	"context"
	"fmt"
	"time"

	"github.com/rowlift/rowlift/internal/gtid"
)

// SaveSlot records, inside a replay worker's transaction, how far replay has
// got: watermark (every source transaction up to it is applied) and applied (the
// last transaction this commit applies; later than watermark only when commits
// go out of source order). Each worker writes its own row, so parallel commits
// do not queue on one row lock; they take the stream row in share mode only to
// check the owner, which makes a takeover wait for them and refuses them after.
func SaveSlot(ctx context.Context, tx Execer, workflow, source string, owner int64, slot int, watermark, applied string, sourceTimeUS int64) error {
	// The new values are given twice, not read back with VALUES(), which
	// MySQL deprecates (a warning on every commit) and MariaDB has no
	// replacement for; the driver interpolates them client-side.
	now := time.Now().UnixMicro()
	res, err := tx.ExecContext(ctx, "INSERT INTO "+Schema+".replay_slot (workflow, source, slot, watermark, applied, source_time_us, applied_at_us) "+
		"SELECT workflow, source, ?, ?, ?, ?, ? FROM "+Schema+".stream WHERE workflow = ? AND source = ? AND owner = ? LOCK IN SHARE MODE "+
		"ON DUPLICATE KEY UPDATE watermark = ?, applied = ?, source_time_us = GREATEST(replay_slot.source_time_us, ?), applied_at_us = ?",
		slot, watermark, applied, sourceTimeUS, now, workflow, source, owner, watermark, applied, sourceTimeUS, now)
	if err != nil {
		return fmt.Errorf("save replay slot %d of %s/%s: %w", slot, workflow, source, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
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
}

// ResumeAt merges the stream row with the replay workers' rows into the
// position a new run of the stream starts from.
func (s *Store) ResumeAt(ctx context.Context, workflow, source string) (Resume, error) {
	var r Resume
	if err := s.db.QueryRowContext(ctx, "SELECT position FROM "+Schema+".stream WHERE workflow = ? AND source = ?",
		workflow, source).Scan(&r.Position); err != nil {
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
