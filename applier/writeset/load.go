package writeset

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"regexp"
	"slices"
	"strings"

	"github.com/rowlift/rowlift/internal/keyorder"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/schema"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// column is what Load reads of one target column.
type column struct {
	name, dataType, charset, collation string
	nullable                           bool
}

// index is what Load reads of one unique key of the target.
type index struct {
	name  string
	parts []indexPart
	// withoutOverlaps marks a MariaDB key "(..., period WITHOUT OVERLAPS)":
	// its last two parts are the period's end and start, and two rows collide
	// when their periods overlap, not only when they are equal.
	withoutOverlaps bool
}

// indexPart is one part of a unique key.
type indexPart struct {
	column string // empty for an expression (MySQL functional key part)
	prefix int    // SUB_PART: length of a prefix part, 0 for the whole value
}

// metadata is everything Load reads of the target table.
type metadata struct {
	columns []column
	indexes []index // PRIMARY first, parts in key order
	// links are the table's foreign keys, the foreign keys that reference it
	// and its triggers, as barrier reasons.
	links []string
}

// Load reads the target table's unique keys, and the foreign keys and triggers
// that make it a barrier, and prepares the hashing of its changes. fields is
// the table as it is streamed: the keys' columns are found in it by name. The
// target, not the source, decides what collides, because the target is where
// parallel transactions would lose an update or fail on a unique key; a Table
// must be loaded again when the streamed fields or the target's keys change.
// A table whose hashing cannot be set up is still returned, as a barrier.
// table is the target table's name, which a workflow may map to another than
// the streamed one.
func Load(ctx context.Context, q schema.Queryer, database, table string, fields *rowliftv1.TableFields) (*Table, error) {
	m, err := readMetadata(ctx, q, database, table)
	if err != nil {
		return nil, err
	}
	return build(fields, m), nil
}

// withoutOverlapsKey finds the keys of SHOW CREATE TABLE that end in a period
// WITHOUT OVERLAPS (MariaDB application-time periods).
var withoutOverlapsKey = regexp.MustCompile("(?m)^\\s*(PRIMARY KEY|UNIQUE KEY `((?:[^`]|``)+)`) \\(.*\\sWITHOUT OVERLAPS\\)")

func readMetadata(ctx context.Context, q schema.Queryer, database, table string) (*metadata, error) {
	name := database + "." + table
	m := &metadata{}
	err := each(ctx, q, func(r *sql.Rows) error {
		var c column
		if err := r.Scan(&c.name, &c.dataType, &c.charset, &c.collation, &c.nullable); err != nil {
			return err
		}
		m.columns = append(m.columns, c)
		return nil
	}, `SELECT COLUMN_NAME, LOWER(DATA_TYPE), IFNULL(CHARACTER_SET_NAME, ''), IFNULL(COLLATION_NAME, ''), IS_NULLABLE = 'YES'
		FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`, database, table)
	if err != nil {
		return nil, fmt.Errorf("read columns of target table %s: %w", name, err)
	}
	if len(m.columns) == 0 {
		return nil, fmt.Errorf("%w: target table %s", schema.ErrNoTable, name)
	}

	err = each(ctx, q, func(r *sql.Rows) error {
		var indexName string
		var col sql.NullString
		var prefix sql.NullInt64
		if err := r.Scan(&indexName, &col, &prefix); err != nil {
			return err
		}
		if n := len(m.indexes); n == 0 || m.indexes[n-1].name != indexName {
			m.indexes = append(m.indexes, index{name: indexName})
		}
		ix := &m.indexes[len(m.indexes)-1]
		ix.parts = append(ix.parts, indexPart{column: col.String, prefix: int(prefix.Int64)})
		return nil
	}, `SELECT INDEX_NAME, COLUMN_NAME, SUB_PART FROM information_schema.STATISTICS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND NON_UNIQUE = 0
		ORDER BY INDEX_NAME = 'PRIMARY' DESC, INDEX_NAME, SEQ_IN_INDEX`, database, table)
	if err != nil {
		return nil, fmt.Errorf("read unique keys of target table %s: %w", name, err)
	}

	var shownName, createTable string
	if err := q.QueryRowContext(ctx, "SHOW CREATE TABLE "+rowcodec.QualifiedIdent(database, table)).Scan(&shownName, &createTable); err != nil {
		return nil, fmt.Errorf("show create table %s: %w", name, err)
	}
	for _, match := range withoutOverlapsKey.FindAllStringSubmatch(createTable, -1) {
		keyName := "PRIMARY"
		if match[1] != "PRIMARY KEY" {
			keyName = strings.ReplaceAll(match[2], "``", "`")
		}
		for i := range m.indexes {
			if m.indexes[i].name == keyName {
				m.indexes[i].withoutOverlaps = true
			}
		}
	}

	err = each(ctx, q, func(r *sql.Rows) error {
		var constraint, childSchema, child, parentSchema, parent string
		if err := r.Scan(&constraint, &childSchema, &child, &parentSchema, &parent); err != nil {
			return err
		}
		if childSchema == database && child == table {
			m.links = append(m.links, fmt.Sprintf("it has foreign key %s to %s.%s", constraint, parentSchema, parent))
		} else {
			m.links = append(m.links, fmt.Sprintf("foreign key %s of %s.%s references it", constraint, childSchema, child))
		}
		return nil
	}, `SELECT CONSTRAINT_NAME, CONSTRAINT_SCHEMA, TABLE_NAME, UNIQUE_CONSTRAINT_SCHEMA, REFERENCED_TABLE_NAME
		FROM information_schema.REFERENTIAL_CONSTRAINTS
		WHERE (CONSTRAINT_SCHEMA = ? AND TABLE_NAME = ?) OR (UNIQUE_CONSTRAINT_SCHEMA = ? AND REFERENCED_TABLE_NAME = ?)
		ORDER BY CONSTRAINT_SCHEMA, TABLE_NAME, CONSTRAINT_NAME`, database, table, database, table)
	if err != nil {
		return nil, fmt.Errorf("read foreign keys of target table %s: %w", name, err)
	}

	err = each(ctx, q, func(r *sql.Rows) error {
		var trigger string
		if err := r.Scan(&trigger); err != nil {
			return err
		}
		m.links = append(m.links, "it has trigger "+trigger)
		return nil
	}, `SELECT TRIGGER_NAME FROM information_schema.TRIGGERS
		WHERE EVENT_OBJECT_SCHEMA = ? AND EVENT_OBJECT_TABLE = ? ORDER BY TRIGGER_NAME`, database, table)
	if err != nil {
		return nil, fmt.Errorf("read triggers of target table %s: %w", name, err)
	}
	return m, nil
}

// each runs a query and calls scan for each row.
func each(ctx context.Context, q schema.Queryer, scan func(*sql.Rows) error, query string, args ...any) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	for rows.Next() {
		if err := scan(rows); err != nil {
			rows.Close()
			return err
		}
	}
	return rows.Close()
}

// build prepares the hashing of a table's changes from what Load read. It does
// no I/O, so tests can give it any table.
func build(fields *rowliftv1.TableFields, m *metadata) *Table {
	t := &Table{name: fields.GetTable(), width: len(fields.GetFields())}
	reasons := slices.Clone(m.links)
	identified := false // some key has only NOT NULL columns: every image hashes
	for _, ix := range m.indexes {
		k, notNull, coarse, problem := buildKey(t.name, fields, m.columns, ix)
		if problem != "" {
			reasons = append(reasons, problem)
			continue
		}
		identified = identified || notNull
		if coarse != "" {
			t.coarse = append(t.coarse, coarse)
		}
		t.keys = append(t.keys, k)
	}
	if !identified && len(reasons) == 0 {
		reasons = append(reasons, "it has no primary key and no unique key on NOT NULL columns to tell its rows apart")
	}
	t.barrier = strings.Join(reasons, "; ")
	for _, k := range t.keys {
		var parts []KeyPart
		for _, p := range k.parts {
			parts = append(parts, KeyPart{Pos: p.pos, Prefix: p.prefix})
		}
		t.uniqueKeys = append(t.uniqueKeys, parts)
	}
	return t
}

// buildKey prepares the hashing of one unique key. notNull reports that its
// columns are all NOT NULL; coarse describes the parts left out of its hash;
// problem says why the key cannot be hashed at all.
func buildKey(table string, fields *rowliftv1.TableFields, columns []column, ix index) (k key, notNull bool, coarse, problem string) {
	k = key{name: ix.name, id: keyID(table, ix.name)}
	notNull = true
	var omitted []string
	for i, ip := range ix.parts {
		if ip.column == "" {
			return key{}, false, "", fmt.Sprintf("unique key %s has an expression part, which the applier cannot hash", ix.name)
		}
		pos := fieldPos(fields, ip.column)
		if pos < 0 {
			return key{}, false, "", fmt.Sprintf("unique key %s has column %s, which is not streamed", ix.name, ip.column)
		}
		c := findColumn(columns, ip.column)
		if c == nil {
			return key{}, false, "", fmt.Sprintf("unique key %s has column %s, which the target table does not list", ix.name, ip.column)
		}
		notNull = notNull && !c.nullable
		f, utf8, why := formOf(c)
		p := part{pos: pos, form: f, prefix: ip.prefix, utf8: utf8}
		if ix.withoutOverlaps && i >= len(ix.parts)-2 {
			p.form, why = leftOut, "period compared by overlap"
		}
		if p.form == leftOut {
			omitted = append(omitted, fmt.Sprintf("%s: %s", c.name, why))
		}
		k.parts = append(k.parts, p)
	}
	if len(omitted) > 0 {
		coarse = fmt.Sprintf("%s (%s)", ix.name, strings.Join(omitted, "; "))
		if len(omitted) == len(k.parts) {
			coarse = fmt.Sprintf("%s (%s; every change collides)", ix.name, strings.Join(omitted, "; "))
		}
	}
	return k, notNull, coarse, ""
}

// formOf says how values of a column are hashed, whether a prefix length of
// it counts UTF-8 characters, and why a left-out column is left out.
func formOf(c *column) (f form, utf8 bool, why string) {
	switch c.dataType {
	case "tinyint", "smallint", "mediumint", "int", "bigint", "year",
		"date", "datetime", "timestamp", "time",
		"varbinary", "tinyblob", "blob", "mediumblob", "longblob", "enum", "set":
		return asIs, false, ""
	case "decimal", "float", "double":
		return number, false, ""
	case "bit":
		return bits, false, ""
	case "binary":
		return zeroPadded, false, ""
	case "char", "varchar", "tinytext", "text", "mediumtext", "longtext":
		bytewise, padSpace := keyorder.Bytewise(c.dataType, c.charset, c.collation)
		utf8 = strings.HasPrefix(c.charset, "utf8")
		switch {
		case bytewise && padSpace:
			return spacePadded, utf8, ""
		case bytewise:
			return asIs, utf8, ""
		}
		return leftOut, utf8, "collation " + c.collation
	}
	return leftOut, false, "type " + c.dataType
}

// keyID hashes a table's and a key's names.
func keyID(table, index string) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	for _, s := range []string{table, index} {
		h.Write(binary.AppendUvarint(nil, uint64(len(s))))
		h.WriteString(s)
	}
	return h.Sum64()
}

// fieldPos returns the position of the named column among the streamed fields,
// compared case-insensitively as MySQL compares column names, or -1.
func fieldPos(fields *rowliftv1.TableFields, name string) int {
	for i, f := range fields.GetFields() {
		if strings.EqualFold(f.GetName(), name) {
			return i
		}
	}
	return -1
}

func findColumn(columns []column, name string) *column {
	for i := range columns {
		if strings.EqualFold(columns[i].name, name) {
			return &columns[i]
		}
	}
	return nil
}
