package state

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/rowlift/rowlift/internal/schema"
)

// DeferKeys records, before the target table is created without them, the
// secondary keys to add to a workflow's table once every source has copied it.
// It is recorded on every source's copy_state row of the table, so whichever
// stream finishes the table last (or runs after a crash) adds them.
func (s *Store) DeferKeys(ctx context.Context, workflow, table string, keys []schema.DeferredKey) error {
	b, err := json.Marshal(keys)
	if err != nil {
		return fmt.Errorf("encode deferred keys of %s: %w", table, err)
	}
	if _, err := s.db.ExecContext(ctx, "UPDATE "+Schema+".copy_state SET deferred_keys = ? WHERE workflow = ? AND table_name = ?",
		b, workflow, table); err != nil {
		return fmt.Errorf("record deferred keys of %s/%s: %w", workflow, table, err)
	}
	return nil
}

// KeysToAdd returns, by table, the deferred keys of the workflow's tables
// that every source has copied.
func (s *Store) KeysToAdd(ctx context.Context, workflow string) (map[string][]schema.DeferredKey, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT table_name, MAX(deferred_keys) FROM "+Schema+".copy_state WHERE workflow = ? "+
		"GROUP BY table_name HAVING SUM(NOT done) = 0 AND MAX(deferred_keys) IS NOT NULL", workflow)
	if err != nil {
		return nil, fmt.Errorf("read deferred keys of %q: %w", workflow, err)
	}
	defer rows.Close()
	out := map[string][]schema.DeferredKey{}
	for rows.Next() {
		var table string
		var b []byte
		if err := rows.Scan(&table, &b); err != nil {
			return nil, fmt.Errorf("read deferred keys of %q: %w", workflow, err)
		}
		if out[table], err = decodeKeys(b); err != nil {
			return nil, fmt.Errorf("%s.%s: %w", workflow, table, err)
		}
	}
	return out, rows.Err()
}

// KeysAdded records that a table's deferred keys are on the target table.
func (s *Store) KeysAdded(ctx context.Context, workflow, table string) error {
	if _, err := s.db.ExecContext(ctx, "UPDATE "+Schema+".copy_state SET deferred_keys = NULL WHERE workflow = ? AND table_name = ?",
		workflow, table); err != nil {
		return fmt.Errorf("record keys added to %s/%s: %w", workflow, table, err)
	}
	return nil
}

func decodeKeys(b []byte) ([]schema.DeferredKey, error) {
	var keys []schema.DeferredKey
	if err := json.Unmarshal(b, &keys); err != nil {
		return nil, fmt.Errorf("decode deferred keys %q: %w", b, err)
	}
	return keys, nil
}
