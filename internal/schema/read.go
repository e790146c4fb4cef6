package schema

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
)

// Key is a unique key of a table (the PRIMARY KEY included).
type Key struct {
	Name  string
	Parts []KeyPart // in key order
}

// KeyPart is one part of a key: a column, a prefix of one, or (MySQL 8
// functional key parts) an expression, which has no column.
type KeyPart struct {
	// Column is empty for an expression part.
	Column string
	// Expression is an expression part's SQL, as information_schema shows it.
	Expression string
	// Prefix is SUB_PART: the length of a prefix part, 0 for the whole value.
	Prefix int
}

// Expression returns the SQL of the key's first functional (expression)
// part, or "" when every part is a column. Such a key says nothing rowlift
// can compute from a row's columns: it can neither order a copy nor find a
// row, and the applier cannot tell which changes collide on it.
func (k Key) Expression() string {
	for _, p := range k.Parts {
		if p.Column == "" {
			return p.Expression
		}
	}
	return ""
}

// ReadColumns reads a table's columns in ordinal order; none when the table
// does not exist.
func ReadColumns(ctx context.Context, q Queryer, database, table string) ([]Column, error) {
	rows, err := q.QueryContext(ctx, `SELECT COLUMN_NAME, LOWER(DATA_TYPE), COLUMN_TYPE, IFNULL(CHARACTER_SET_NAME, ''),
		IFNULL(COLLATION_NAME, ''), IS_NULLABLE = 'YES', EXTRA
		FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`, database, table)
	if err != nil {
		return nil, fmt.Errorf("read columns of %s.%s: %w", database, table, err)
	}
	defer rows.Close()
	var out []Column
	for rows.Next() {
		var c Column
		var extra string
		if err := rows.Scan(&c.Name, &c.DataType, &c.ColumnType, &c.Charset, &c.Collation, &c.Nullable, &extra); err != nil {
			return nil, fmt.Errorf("read columns of %s.%s: %w", database, table, err)
		}
		c.Generated = generatedExtra.MatchString(extra)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read columns of %s.%s: %w", database, table, err)
	}
	return out, nil
}

// ReadUniqueKeys reads a table's unique keys, PRIMARY first, then by name.
// It selects every column of information_schema.STATISTICS because
// EXPRESSION, the SQL of a functional key part, exists on MySQL (8.0.13 and
// later) only; MariaDB has no functional key parts.
func ReadUniqueKeys(ctx context.Context, q Queryer, database, table string) ([]Key, error) {
	rows, err := q.QueryContext(ctx, `SELECT * FROM information_schema.STATISTICS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND NON_UNIQUE = 0
		ORDER BY INDEX_NAME = 'PRIMARY' DESC, INDEX_NAME, SEQ_IN_INDEX`, database, table)
	if err != nil {
		return nil, fmt.Errorf("read keys of %s.%s: %w", database, table, err)
	}
	defer rows.Close()
	names, err := rows.Columns()
	if err != nil {
		return nil, fmt.Errorf("read keys of %s.%s: %w", database, table, err)
	}
	at := map[string]int{}
	for i, n := range names {
		at[strings.ToUpper(n)] = i
	}
	vals := make([]sql.NullString, len(names))
	dest := make([]any, len(names))
	for i := range vals {
		dest[i] = &vals[i]
	}
	get := func(name string) string {
		if i, ok := at[name]; ok {
			return vals[i].String
		}
		return ""
	}
	var out []Key
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("read keys of %s.%s: %w", database, table, err)
		}
		p := KeyPart{Column: get("COLUMN_NAME"), Expression: get("EXPRESSION")}
		if s := get("SUB_PART"); s != "" {
			if p.Prefix, err = strconv.Atoi(s); err != nil {
				return nil, fmt.Errorf("read keys of %s.%s: SUB_PART %q: %w", database, table, s, err)
			}
		}
		index := get("INDEX_NAME")
		if n := len(out); n == 0 || out[n-1].Name != index {
			out = append(out, Key{Name: index})
		}
		out[len(out)-1].Parts = append(out[len(out)-1].Parts, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read keys of %s.%s: %w", database, table, err)
	}
	return out, nil
}
