// Package ddlscope tells which moved tables a statement from the binlog
// changes, so that only a schema change of a moved table can stop a workflow:
// triggers, routines, events, users, grants, views and DDL of other tables
// (an online schema change tool's shadow and changelog tables among them)
// pass. Statements are read with TiDB's MySQL parser; a statement it cannot
// read is matched by its words, which errs on the side of stopping.
package ddlscope

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/pingcap/tidb/pkg/parser"
	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/format"

	// The parser needs a driver for the values in statements.
	_ "github.com/pingcap/tidb/pkg/parser/test_driver"

	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// Scope is the tables a workflow moves: their database and names.
type Scope struct {
	database string
	// Names are the moved tables' names as the workflow spells them.
	Names []string
	byLow map[string]string
}

// New returns the scope of tables names in database.
func New(database string, names []string) *Scope {
	s := &Scope{database: database, Names: names, byLow: map[string]string{}}
	for _, n := range names {
		s.byLow[strings.ToLower(n)] = n
	}
	return s
}

// noTableChange is a statement that changes no table's columns, keys or rows,
// whatever tables it names: a trigger's body may write to a moved table, but
// what it writes reaches the binlog as rows. TiDB's parser has no grammar for
// most of these. A DEFINER clause and comments may come before the object.
var noTableChange = regexp.MustCompile(`(?is)^\s*(?:/\*.*?\*/\s*)*(?:` +
	`(?:grant|revoke)\b` +
	`|(?:create|alter|drop|rename)\s+(?:/\*.*?\*/\s*)*(?:or\s+replace\s+)?(?:definer\s*=\s*(?:` + "`[^`]*`|'[^']*'|[^\\s@]+" + `)(?:\s*@\s*(?:` + "`[^`]*`|'[^']*'|[^\\s]+" + `))?\s+)?` +
	`(?:sql\s+security\s+\w+\s+)?(?:algorithm\s*=\s*\w+\s+)?(?:aggregate\s+)?(?:trigger|procedure|function|event|view|user|role|server)\b` +
	`|set\s+(?:password|default\s+role)\b` +
	`|(?:analyze|optimize|check|checksum|repair)\s+(?:(?:no_write_to_binlog|local)\s+)?tables?\b` +
	`|flush\b` +
	`|create\s+(?:database|schema)\b)`)

// credentials starts a statement that may carry a password or its hash.
var credentials = regexp.MustCompile(`(?is)^\s*(?:/\*.*?\*/\s*)*(?:grant|revoke|set\s+password|(?:create|alter|drop|rename)\s+(?:/\*.*?\*/\s*)*(?:or\s+replace\s+)?(?:user|role|server))\b`)

// Loggable is stmt as a log may show it: a statement that manages users,
// privileges or servers, which may carry a password or its hash, only by its
// first words.
func Loggable(stmt string) string {
	if m := credentials.FindString(stmt); m != "" {
		return strings.TrimSpace(m) + " ..."
	}
	return stmt
}

// Change is what a statement does to the moved tables.
type Change struct {
	// Tables are the moved tables whose columns, keys or rows it changes.
	Tables []string
	// Shadow is what it does to an online schema change tool's shadow table
	// of a moved table (Kind 0: nothing).
	Shadow ShadowChange
}

// Classify reads stmt, run with defaultDB as its current database, once.
func (s *Scope) Classify(stmt, defaultDB string) Change {
	if noTableChange.MatchString(stmt) {
		return Change{}
	}
	node, err := parser.New().ParseOneStmt(stmt, "", "")
	if err != nil {
		return Change{Tables: s.words(stmt, defaultDB)}
	}
	tables, ok := s.tables(node, defaultDB)
	if !ok {
		tables = s.words(stmt, defaultDB)
	}
	return Change{Tables: tables, Shadow: s.shadow(node, defaultDB)}
}

// moved is the moved table t names, run with defaultDB current.
func (s *Scope) moved(t *ast.TableName, defaultDB string) (string, bool) {
	if t == nil || !strings.EqualFold(databaseOf(t, defaultDB), s.database) {
		return "", false
	}
	name, ok := s.byLow[strings.ToLower(t.Name.O)]
	return name, ok
}

// tables are the moved tables a statement the parser read changes; ok is
// false for a kind of statement it does not know.
func (s *Scope) tables(node ast.StmtNode, defaultDB string) (out []string, ok bool) {
	add := func(t *ast.TableName) {
		if name, ok := s.moved(t, defaultDB); ok && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	switch n := node.(type) {
	case *ast.AlterTableStmt:
		add(n.Table)
		for _, spec := range n.Specs {
			add(spec.NewTable) // ALTER TABLE x RENAME TO t
		}
	case *ast.CreateTableStmt:
		// CREATE TABLE x LIKE t and CREATE TABLE x AS SELECT ... FROM t
		// only read t.
		add(n.Table)
	case *ast.DropTableStmt:
		if !n.IsView {
			for _, t := range n.Tables {
				add(t)
			}
		}
	case *ast.TruncateTableStmt:
		add(n.Table)
	case *ast.RenameTableStmt:
		for _, tt := range n.TableToTables {
			add(tt.OldTable)
			add(tt.NewTable)
		}
	case *ast.CreateIndexStmt:
		add(n.Table)
	case *ast.DropIndexStmt:
		add(n.Table)
	case *ast.DropDatabaseStmt:
		if strings.EqualFold(n.Name.O, s.database) {
			out = append(out, s.Names...)
		}
	case *ast.AlterDatabaseStmt, *ast.CreateViewStmt, *ast.DropSequenceStmt, *ast.CreateSequenceStmt,
		*ast.GrantStmt, *ast.RevokeStmt, *ast.CreateUserStmt, *ast.AlterUserStmt, *ast.DropUserStmt,
		*ast.AnalyzeTableStmt, *ast.FlushStmt, *ast.CreateDatabaseStmt:
	default:
		return nil, false
	}
	return out, true
}

// identifier splits statements into words that can name a table.
var identifier = regexp.MustCompile(`[0-9A-Za-z_$]+`)

// words matches a statement the parser cannot read by its words: any moved
// table it names, when it runs in the moved tables' database or names it.
func (s *Scope) words(stmt, defaultDB string) []string {
	if !strings.EqualFold(defaultDB, s.database) && !strings.Contains(strings.ToLower(stmt), strings.ToLower(s.database)) {
		return nil
	}
	var out []string
	for _, word := range identifier.FindAllString(stmt, -1) {
		if name, ok := s.byLow[strings.ToLower(word)]; ok && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// ReopensStream reports a DDL item after which a stream ends and the applier
// opens the next one: a schema change of streamed tables, not a cutover's
// freeze nor a statement on a shadow table only. The stream's plans, fields
// and conversions describe the tables as they were when it opened.
func ReopensStream(ddl *rowliftv1.DDL) bool {
	return ddl != nil && !ddl.GetFreeze() && len(ddl.GetTables()) > 0
}

// Rewrite returns stmt, run on the source with defaultDB as its current
// database, as it must run on a target whose moved tables are in targetDB,
// under the names of names where given (by source name), with targetDB as its
// current database. A statement that needs no renaming is returned as it is;
// one that does is read by the parser and written back from it, and refused
// when the parser cannot read it.
func (s *Scope) Rewrite(stmt, defaultDB, targetDB string, names map[string]string) (string, error) {
	same := strings.EqualFold(targetDB, s.database)
	for from, to := range names {
		same = same && from == to
	}
	if same {
		return stmt, nil
	}
	return renameTables(stmt, func(t *ast.TableName) (string, string, bool) {
		name, ok := s.moved(t, defaultDB)
		if to, mapped := names[name]; ok && mapped {
			name = to
		}
		return targetDB, name, ok
	})
}

// ShadowKind is what a statement does to a shadow table.
type ShadowKind int

// The statements of an online schema change tool on its shadow table.
const (
	// ShadowCreate creates the shadow, empty or LIKE its table.
	ShadowCreate ShadowKind = iota + 1
	// ShadowAlter changes the shadow's definition: the change the tool makes.
	ShadowAlter
	// ShadowDrop drops the shadow or renames it away without a swap.
	ShadowDrop
	// ShadowSwap is the tool's cut-over, a RENAME TABLE that moves the table
	// aside and the shadow to its name.
	ShadowSwap
)

// ShadowChange is a statement on an online schema change tool's shadow table
// of a moved table.
type ShadowChange struct {
	Kind ShadowKind
	// Shadow is the shadow table's name, Table the moved table's.
	Shadow, Table string
}

// shadowOf is the moved table t names a shadow of, run with defaultDB
// current: gh-ost's _t_gho, pt-online-schema-change's and Spirit's _t_new.
func (s *Scope) shadowOf(t *ast.TableName, defaultDB string) (string, bool) {
	if !strings.EqualFold(databaseOf(t, defaultDB), s.database) {
		return "", false
	}
	low := strings.ToLower(t.Name.O)
	for _, suffix := range []string{"_gho", "_new"} {
		if base, ok := strings.CutSuffix(low, suffix); ok && strings.HasPrefix(base, "_") {
			if table, ok := s.byLow[base[1:]]; ok {
				return table, true
			}
		}
	}
	return "", false
}

// shadow is what a statement the parser read does to a shadow table.
func (s *Scope) shadow(node ast.StmtNode, defaultDB string) ShadowChange {
	on := func(t *ast.TableName, kind ShadowKind) ShadowChange {
		if table, ok := s.shadowOf(t, defaultDB); ok {
			return ShadowChange{Kind: kind, Shadow: t.Name.O, Table: table}
		}
		return ShadowChange{}
	}
	switch n := node.(type) {
	case *ast.CreateTableStmt:
		return on(n.Table, ShadowCreate)
	case *ast.AlterTableStmt:
		return on(n.Table, ShadowAlter)
	case *ast.DropTableStmt:
		for _, t := range n.Tables {
			if c := on(t, ShadowDrop); c.Kind != 0 {
				return c
			}
		}
	case *ast.RenameTableStmt:
		for _, tt := range n.TableToTables {
			c := on(tt.OldTable, ShadowDrop)
			if c.Kind == 0 {
				continue
			}
			if to, ok := s.moved(tt.NewTable, defaultDB); ok && to == c.Table {
				c.Kind = ShadowSwap
			}
			return c
		}
	}
	return ShadowChange{}
}

// RenameTable returns stmt, run with defaultDB current, with every reference
// to table from in database fromDB made to table to in database toDB: a
// shadow's ALTER made to the target's table.
func RenameTable(stmt, defaultDB, fromDB, from, toDB, to string) (string, error) {
	return renameTables(stmt, func(t *ast.TableName) (string, string, bool) {
		return toDB, to, strings.EqualFold(databaseOf(t, defaultDB), fromDB) && strings.EqualFold(t.Name.O, from)
	})
}

// renameTables reads stmt and writes it back with each table name that
// rename says to change (ok) as the database and table it gives.
func renameTables(stmt string, rename func(*ast.TableName) (db, table string, ok bool)) (string, error) {
	node, err := parser.New().ParseOneStmt(stmt, "", "")
	if err != nil {
		return "", fmt.Errorf("its table names cannot be mapped to the target's: the parser cannot read it: %w", err)
	}
	node.Accept(visitTables(func(t *ast.TableName) {
		if db, table, ok := rename(t); ok {
			t.Schema, t.Name = ast.NewCIStr(db), ast.NewCIStr(table)
		}
	}))
	var b strings.Builder
	if err := node.Restore(format.NewRestoreCtx(format.DefaultRestoreFlags, &b)); err != nil {
		return "", fmt.Errorf("write it back with the target's table names: %w", err)
	}
	return b.String(), nil
}

// databaseOf is the database a table name refers to, run with defaultDB
// current.
func databaseOf(t *ast.TableName, defaultDB string) string {
	if t.Schema.O != "" {
		return t.Schema.O
	}
	return defaultDB
}

// visitTables calls f on every table name of a statement.
type visitTables func(*ast.TableName)

func (v visitTables) Enter(n ast.Node) (ast.Node, bool) {
	if t, ok := n.(*ast.TableName); ok {
		v(t)
	}
	return n, false
}

func (v visitTables) Leave(n ast.Node) (ast.Node, bool) { return n, true }
