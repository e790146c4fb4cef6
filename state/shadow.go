package state

import (
	"context"
	"fmt"
)

// ShadowStatement is an ALTER an online schema change tool ran on its shadow
// table, kept until the tool swaps the shadow in for its moved table: the
// target's table then takes the same changes.
type ShadowStatement struct {
	Statement string
	// Database is the schema it ran in.
	Database string
}

// ResetShadow forgets what is kept of shadow, inside the caller's transaction
// (with the position after the statement that created, dropped or swapped it).
func ResetShadow(ctx context.Context, tx Execer, workflow, source, shadow string) error {
	if _, err := tx.ExecContext(ctx, "DELETE FROM "+Schema+".shadow_ddl WHERE workflow = ? AND source = ? AND shadow = ?",
		workflow, source, shadow); err != nil {
		return fmt.Errorf("forget shadow table %s of %s/%s: %w", shadow, workflow, source, err)
	}
	return nil
}

// AddShadowStatement keeps an ALTER of shadow after those kept before, inside
// the caller's transaction (with the position after it).
func AddShadowStatement(ctx context.Context, tx Execer, workflow, source, shadow string, st ShadowStatement) error {
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+Schema+".shadow_ddl (workflow, source, shadow, seq, statement, db) "+
		"SELECT ?, ?, ?, COALESCE(MAX(seq), 0) + 1, ?, ? FROM "+Schema+".shadow_ddl WHERE workflow = ? AND source = ? AND shadow = ?",
		workflow, source, shadow, st.Statement, st.Database, workflow, source, shadow); err != nil {
		return fmt.Errorf("keep an ALTER of shadow table %s of %s/%s: %w", shadow, workflow, source, err)
	}
	return nil
}

// ShadowStatements are the ALTERs kept of shadow, in the order they ran.
func (s *Store) ShadowStatements(ctx context.Context, workflow, source, shadow string) ([]ShadowStatement, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT statement, db FROM "+Schema+".shadow_ddl WHERE workflow = ? AND source = ? AND shadow = ? ORDER BY seq",
		workflow, source, shadow)
	if err != nil {
		return nil, fmt.Errorf("read the ALTERs of shadow table %s of %s/%s: %w", shadow, workflow, source, err)
	}
	defer rows.Close()
	var out []ShadowStatement
	for rows.Next() {
		var st ShadowStatement
		if err := rows.Scan(&st.Statement, &st.Database); err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, rows.Err()
}
