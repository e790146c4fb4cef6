// Package frozen names the tables a cutover freezes and recognises the RENAME
// TABLE statements that freeze and unfreeze them, so that the streamer, the
// binlog reader and the applier agree on one naming rule.
package frozen

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rowlift/rowlift/internal/rowcodec"
)

// maxIdent is MySQL's and MariaDB's limit on a table name, in characters.
const maxIdent = 64

// MaxLockLease caps the lease of a LOCK freeze (FreezeRequest.lease_ms), which
// the streamer and the coordinator both check: the lock blocks every writer of
// the tables, and its lease is what frees them when the coordinator that took
// it is lost, so a long one would leave them blocked for long. A cutover that
// may wait longer freezes by renaming, which blocks no one.
const MaxLockLease = 5 * time.Minute

// Name is the name a cutover renames table to while writes are frozen,
// "_<table>_frozen" (gh-ost's style), so applications get "doesn't exist"
// instead of writing to a table whose changes would no longer move.
func Name(table string) (string, error) {
	if table == "" {
		return "", fmt.Errorf("frozen name of an empty table name")
	}
	name := "_" + table + "_frozen"
	if n := utf8.RuneCountInString(name); n > maxIdent {
		return "", fmt.Errorf("table %q cannot be frozen by renaming: its frozen name %q would have %d characters, over MySQL's limit of %d; "+
			"rename the table to at most %d characters, or freeze with mode LOCK or NONE", table, name, n, maxIdent, maxIdent-len("__frozen"))
	}
	return name, nil
}

// Statement is the one atomic RENAME TABLE that freezes (each table to its
// frozen name) or unfreezes (back) the tables of database.
func Statement(database string, tables []string, freeze bool) (string, error) {
	if len(tables) == 0 {
		return "", fmt.Errorf("rename of no tables")
	}
	var b strings.Builder
	b.WriteString("RENAME TABLE ")
	for i, t := range tables {
		name, err := Name(t)
		if err != nil {
			return "", err
		}
		from, to := t, name
		if !freeze {
			from, to = name, t
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(rowcodec.QualifiedIdent(database, from) + " TO " + rowcodec.QualifiedIdent(database, to))
	}
	return b.String(), nil
}

// IsFreeze reports whether stmt, run with defaultDB as the session's database,
// is a RENAME TABLE whose every pair renames one of tables in database to its
// frozen name or back: what Statement writes, in any case and spacing, with or
// without database qualifiers and backquotes. Any other statement, including a
// rename to another name, is a schema change.
func IsFreeze(stmt, defaultDB, database string, tables []string) bool {
	pairs, ok := parseRename(stmt)
	if !ok {
		return false
	}
	streamed := func(name string) bool {
		for _, t := range tables {
			if strings.EqualFold(t, name) {
				return true
			}
		}
		return false
	}
	frozenOf := func(live, other string) bool {
		name, err := Name(live)
		return err == nil && streamed(live) && strings.EqualFold(name, other)
	}
	for _, p := range pairs {
		for _, n := range p {
			db := n.database
			if db == "" {
				db = defaultDB
			}
			if !strings.EqualFold(db, database) {
				return false
			}
		}
		from, to := p[0].table, p[1].table
		if !frozenOf(from, to) && !frozenOf(to, from) {
			return false
		}
	}
	return true
}

// qualified is a table name as a statement wrote it; database is empty when
// the statement did not qualify it.
type qualified struct{ database, table string }

// parseRename parses "RENAME TABLE[S] a TO b[, c TO d ...]" into its pairs; ok
// is false for anything else.
func parseRename(stmt string) (pairs [][2]qualified, ok bool) {
	toks, ok := tokenize(stmt)
	if !ok || len(toks) < 2 || !toks[0].keyword("RENAME") || !(toks[1].keyword("TABLE") || toks[1].keyword("TABLES")) {
		return nil, false
	}
	rest := toks[2:]
	name := func() (qualified, bool) {
		if len(rest) == 0 || !rest[0].ident {
			return qualified{}, false
		}
		q := qualified{table: rest[0].text}
		rest = rest[1:]
		if len(rest) >= 2 && rest[0].text == "." && !rest[0].ident && rest[1].ident {
			q = qualified{database: q.table, table: rest[1].text}
			rest = rest[2:]
		}
		return q, true
	}
	for {
		from, ok := name()
		if !ok || len(rest) == 0 || !rest[0].keyword("TO") {
			return nil, false
		}
		rest = rest[1:]
		to, ok := name()
		if !ok {
			return nil, false
		}
		pairs = append(pairs, [2]qualified{from, to})
		if len(rest) == 0 {
			return pairs, true
		}
		if rest[0].ident || rest[0].text != "," {
			return nil, false
		}
		rest = rest[1:]
	}
}

// token is an identifier (bare or backquoted, unquoted in text) or one
// punctuation character.
type token struct {
	text   string
	ident  bool
	quoted bool
}

// keyword reports whether t is the bare word kw, in any case.
func (t token) keyword(kw string) bool { return t.ident && !t.quoted && strings.EqualFold(t.text, kw) }

// tokenize splits a statement into identifiers, '.' and ','; ok is false at
// any other character (strings, comments, operators), which no RENAME TABLE
// of rowlift's has.
func tokenize(s string) (toks []token, ok bool) {
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '.' || c == ',':
			toks = append(toks, token{text: string(c)})
			i++
		case c == '`':
			var b strings.Builder
			i++
			for {
				j := strings.IndexByte(s[i:], '`')
				if j < 0 {
					return nil, false
				}
				b.WriteString(s[i : i+j])
				i += j + 1
				if i < len(s) && s[i] == '`' {
					b.WriteByte('`')
					i++
					continue
				}
				break
			}
			toks = append(toks, token{text: b.String(), ident: true, quoted: true})
		case bare(c):
			j := i
			for j < len(s) && bare(s[j]) {
				j++
			}
			toks = append(toks, token{text: s[i:j], ident: true})
			i = j
		default:
			return nil, false
		}
	}
	return toks, true
}

// bare reports whether c may be part of an unquoted identifier.
func bare(c byte) bool {
	return c == '_' || c == '$' || c >= 0x80 || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}
