package state

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// ErrNothingLost means no stream of the workflow on this target stopped for
// transactions its source lacks: there is nothing to rewind.
var ErrNothingLost = errors.New("no stream of the workflow stopped for transactions its source lacks")

// StopLost puts a workflow in state error because the stream from source
// found its source lacking transactions the target applied (lost), and
// records them with rewindTo, the last position of the stream's the source
// has, in the same transaction, for Rewind.
func (s *Store) StopLost(ctx context.Context, name, source, lost, rewindTo, message string) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "UPDATE "+Schema+".stream SET lost = ?, rewind_to = ? WHERE workflow = ? AND source = ?",
			lost, rewindTo, name, source); err != nil {
			return err
		}
		n, err := setStateIn(ctx, tx, name, Error, message, "")
		if err == nil && n == 0 {
			err = ErrNotFound
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("stop workflow %q for the transactions %s lacks: %w", name, source, err)
	}
	return nil
}

// Rewind moves every stream of the workflow that stopped for lost
// transactions (StopLost) back to the last position its source has, and
// starts a verify with repair of the workflow's tables, in one transaction:
// a crash leaves the rewind undone or done with its repair under way. The
// streams' replay slots go, since their watermarks may cover lost
// transactions, and repairing holds what was lost until the verify finishes,
// so that replay writes idempotently over the rows those transactions left.
// It returns the rewound streams' sources; ErrNothingLost when none.
func (s *Store) Rewind(ctx context.Context, workflow string) ([]string, error) {
	var sources []string
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, "SELECT source, lost, IFNULL(rewind_to, '') FROM "+Schema+".stream WHERE workflow = ? AND lost <> '' FOR UPDATE", workflow)
		if err != nil {
			return err
		}
		type stream struct{ source, lost, to string }
		var lost []stream
		for rows.Next() {
			var st stream
			if err := rows.Scan(&st.source, &st.lost, &st.to); err != nil {
				rows.Close()
				return err
			}
			lost = append(lost, st)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(lost) == 0 {
			return ErrNothingLost
		}
		for _, st := range lost {
			if st.to == "" {
				return fmt.Errorf("the stream from %s cannot be rewound: its source shares no known position with the target, "+
					"which applied %s; copy the tables again (delete the workflow, empty the target tables, create it again)", st.source, st.lost)
			}
			if _, err := tx.ExecContext(ctx, "UPDATE "+Schema+".stream SET position = ?, repairing = ?, lost = NULL, rewind_to = NULL "+
				"WHERE workflow = ? AND source = ?", st.to, st.lost, workflow, st.source); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, "DELETE FROM "+Schema+".replay_slot WHERE workflow = ? AND source = ?", workflow, st.source); err != nil {
				return err
			}
			sources = append(sources, st.source)
		}
		_, err = startVerify(ctx, tx, workflow, true, true)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("rewind workflow %q: %w", workflow, err)
	}
	return sources, nil
}

// endRepair clears, inside a verify chunk's transaction, the stream's
// repairing once every table of its verify has finished with repair: the
// rows the lost transactions left are put right, and replay may judge rows
// strictly again.
func endRepair(ctx context.Context, tx Execer, workflow, source string) error {
	_, err := tx.ExecContext(ctx, "UPDATE "+Schema+".stream SET repairing = NULL WHERE workflow = ? AND source = ? AND repairing IS NOT NULL "+
		"AND NOT EXISTS (SELECT 1 FROM "+Schema+".verify WHERE workflow = ? AND source = ? AND (NOT done OR outcome <> '' OR NOT repair))",
		workflow, source, workflow, source)
	if err != nil {
		return fmt.Errorf("end the repair of %s/%s: %w", workflow, source, err)
	}
	return nil
}

// Repairing is what the stream's repair after a rewind went past, while its
// verify with repair has not finished ("" otherwise).
func Repairing(ctx context.Context, db Execer, workflow, source string) (string, error) {
	var r sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT repairing FROM "+Schema+".stream WHERE workflow = ? AND source = ?", workflow, source).Scan(&r); err != nil {
		return "", fmt.Errorf("read the repair of %s/%s: %w", workflow, source, err)
	}
	return r.String, nil
}
