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
)

// Scope is the tables a workflow moves: their database and names.
type Scope struct {
	Database string
	// Names are the moved tables' names as the workflow spells them.
	Names []string
	byLow map[string]string
}

// New returns the scope of tables names in database.
func New(database string, names []string) *Scope {
	s := &Scope{Database: database, Names: names, byLow: map[string]string{}}
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

// Tables returns the moved tables stmt changes the columns, keys or rows of,
// run with defaultDB as its current database.
func (s *Scope) Tables(stmt, defaultDB string) []string {
	if noTableChange.MatchString(stmt) {
		return nil
	}
	node, err := parser.New().ParseOneStmt(stmt, "", "")
	if err != nil {
		return s.words(stmt, defaultDB)
	}
	var out []string
	add := func(t *ast.TableName) {
		if t == nil {
			return
		}
		db := t.Schema.O
		if db == "" {
			db = defaultDB
		}
		if !strings.EqualFold(db, s.Database) {
			return
		}
		if name, ok := s.byLow[strings.ToLower(t.Name.O)]; ok && !slices.Contains(out, name) {
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
		if strings.EqualFold(n.Name.O, s.Database) {
			return append(out, s.Names...)
		}
	case *ast.AlterDatabaseStmt, *ast.CreateViewStmt, *ast.DropSequenceStmt, *ast.CreateSequenceStmt,
		*ast.GrantStmt, *ast.RevokeStmt, *ast.CreateUserStmt, *ast.AlterUserStmt, *ast.DropUserStmt,
		*ast.AnalyzeTableStmt, *ast.FlushStmt, *ast.CreateDatabaseStmt:
	default:
		return s.words(stmt, defaultDB)
	}
	return out
}

// identifier splits statements into words that can name a table.
var identifier = regexp.MustCompile(`[0-9A-Za-z_$]+`)

// words matches a statement the parser cannot read by its words: any moved
// table it names, when it runs in the moved tables' database or names it.
func (s *Scope) words(stmt, defaultDB string) []string {
	if !strings.EqualFold(defaultDB, s.Database) && !strings.Contains(strings.ToLower(stmt), strings.ToLower(s.Database)) {
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

// Rewrite returns stmt, run on the source with defaultDB as its current
// database, as it must run on a target whose moved tables are in targetDB,
// under the names of names where given (by source name), with targetDB as its
// current database. A statement that needs no renaming is returned as it is;
// one that does is read by the parser and written back from it, and refused
// when the parser cannot read it.
func (s *Scope) Rewrite(stmt, defaultDB, targetDB string, names map[string]string) (string, error) {
	same := strings.EqualFold(targetDB, s.Database)
	for from, to := range names {
		same = same && from == to
	}
	if same {
		return stmt, nil
	}
	node, err := parser.New().ParseOneStmt(stmt, "", "")
	if err != nil {
		return "", fmt.Errorf("its table names cannot be mapped to the target's: the parser cannot read it: %w", err)
	}
	node.Accept(&renamer{s: s, defaultDB: defaultDB, targetDB: targetDB, names: names})
	var b strings.Builder
	if err := node.Restore(format.NewRestoreCtx(format.DefaultRestoreFlags, &b)); err != nil {
		return "", fmt.Errorf("write it back with the target's table names: %w", err)
	}
	return b.String(), nil
}

// renamer maps the moved tables a statement names to the target's names.
type renamer struct {
	s                   *Scope
	defaultDB, targetDB string
	names               map[string]string
}

func (r *renamer) Enter(n ast.Node) (ast.Node, bool) {
	t, ok := n.(*ast.TableName)
	if !ok {
		return n, false
	}
	db := t.Schema.O
	if db == "" {
		db = r.defaultDB
	}
	name, moved := r.s.byLow[strings.ToLower(t.Name.O)]
	if !moved || !strings.EqualFold(db, r.s.Database) {
		return n, false
	}
	if to, ok := r.names[name]; ok {
		t.Name = ast.NewCIStr(to)
	}
	t.Schema = ast.NewCIStr(r.targetDB)
	return n, false
}

func (r *renamer) Leave(n ast.Node) (ast.Node, bool) { return n, true }
