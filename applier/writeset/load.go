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

// index is a unique key of the target as the applier hashes it.
type index struct {
	schema.Key
	// withoutOverlaps marks a MariaDB key "(..., period WITHOUT OVERLAPS)":
	// its last two parts are the period's end and start, and two rows collide
	// when their periods overlap, not only when they are equal.
	withoutOverlaps bool
}

// metadata is everything Load reads of the target table.
type metadata struct {
	columns []schema.Column
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
	var err error
	if m.columns, err = schema.ReadColumns(ctx, q, database, table); err != nil {
		return nil, fmt.Errorf("target table: %w", err)
	}
	if len(m.columns) == 0 {
		return nil, fmt.Errorf("%w: target table %s", schema.ErrNoTable, name)
	}
	keys, err := schema.ReadUniqueKeys(ctx, q, database, table)
	if err != nil {
		return nil, fmt.Errorf("target table: %w", err)
	}
	for _, k := range keys {
		m.indexes = append(m.indexes, index{Key: k})
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
			if m.indexes[i].Name == keyName {
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
	t.whole = true
	for _, c := range m.columns {
		if !c.Generated && fieldPos(fields, c.Name) < 0 {
			t.whole = false
		}
	}
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
func buildKey(table string, fields *rowliftv1.TableFields, columns []schema.Column, ix index) (k key, notNull bool, coarse, problem string) {
	k = key{name: ix.Name, id: keyID(table, ix.Name)}
	notNull = true
	var omitted []string
	if expr := ix.Expression(); expr != "" {
		return key{}, false, "", fmt.Sprintf("unique key %s has the expression part %s, which the applier cannot hash", ix.Name, expr)
	}
	for i, ip := range ix.Parts {
		pos := fieldPos(fields, ip.Column)
		if pos < 0 {
			return key{}, false, "", fmt.Sprintf("unique key %s has column %s, which is not streamed", ix.Name, ip.Column)
		}
		c := findColumn(columns, ip.Column)
		if c == nil {
			return key{}, false, "", fmt.Sprintf("unique key %s has column %s, which the target table does not list", ix.Name, ip.Column)
		}
		notNull = notNull && !c.Nullable
		f, utf8, why := formOf(c)
		p := part{pos: pos, form: f, prefix: ip.Prefix, utf8: utf8}
		if ix.withoutOverlaps && i >= len(ix.Parts)-2 {
			p.form, why = leftOut, "period compared by overlap"
		}
		if p.form == leftOut {
			omitted = append(omitted, fmt.Sprintf("%s: %s", c.Name, why))
		}
		k.parts = append(k.parts, p)
	}
	if len(omitted) > 0 {
		coarse = fmt.Sprintf("%s (%s)", ix.Name, strings.Join(omitted, "; "))
		if len(omitted) == len(k.parts) {
			coarse = fmt.Sprintf("%s (%s; every change collides)", ix.Name, strings.Join(omitted, "; "))
		}
	}
	return k, notNull, coarse, ""
}

// formOf says how values of a column are hashed, whether a prefix length of
// it counts UTF-8 characters, and why a left-out column is left out.
func formOf(c *schema.Column) (f form, utf8 bool, why string) {
	switch c.DataType {
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
		bytewise, padSpace := keyorder.Bytewise(c.DataType, c.Charset, c.Collation)
		utf8 = strings.HasPrefix(c.Charset, "utf8")
		switch {
		case bytewise && padSpace:
			return spacePadded, utf8, ""
		case bytewise:
			return asIs, utf8, ""
		}
		return leftOut, utf8, "collation " + c.Collation
	}
	return leftOut, false, "type " + c.DataType
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

func findColumn(columns []schema.Column, name string) *schema.Column {
	for i := range columns {
		if strings.EqualFold(columns[i].Name, name) {
			return &columns[i]
		}
	}
	return nil
}
