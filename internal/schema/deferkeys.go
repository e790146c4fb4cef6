package schema

import (
	"strings"
)

// DeferredKey is a secondary key left out of a target table rowlift creates,
// and added once the table's copy is done: InnoDB builds an index from sorted
// rows for a fraction of what inserting the same rows one by one into it costs.
type DeferredKey struct {
	// Name is the key's name as information_schema.STATISTICS has it.
	Name string `json:"name"`
	// Definition is the key as SHOW CREATE TABLE prints it (KEY `name` (...)),
	// what ALTER TABLE ... ADD takes.
	Definition string `json:"definition"`
}

// SplitSecondaryKeys returns createTable (SHOW CREATE TABLE's output) without
// the secondary keys a copy can leave for later, and those keys. It defers only
// plain non-unique keys of an InnoDB table: a unique key keeps checking the copy
// and orders its replay (writesets), FULLTEXT and SPATIAL keys may rebuild the
// table when added, a key on the AUTO_INCREMENT column must exist with it, and
// a table with foreign keys keeps all its keys (a constraint needs an index on
// its columns, which the server would create under another name). What it
// cannot read as SHOW CREATE TABLE prints it, it returns unchanged.
func SplitSecondaryKeys(createTable string) (string, []DeferredKey) {
	lines := strings.Split(createTable, "\n")
	if len(lines) < 3 || !strings.HasSuffix(lines[0], " (") {
		return createTable, nil
	}
	end := len(lines) - 1
	for end > 0 && !strings.HasPrefix(lines[end], ")") {
		end--
	}
	if end < 2 || !strings.Contains(lines[end], "ENGINE=InnoDB") {
		return createTable, nil
	}
	defs := make([]string, 0, end-1)
	for _, l := range lines[1:end] {
		if !strings.HasPrefix(l, "  ") {
			return createTable, nil // a definition over several lines: not as printed
		}
		defs = append(defs, strings.TrimSuffix(strings.TrimPrefix(l, "  "), ","))
	}
	autoInc := ""
	for _, d := range defs {
		trimmed := strings.ToUpper(d)
		if strings.HasPrefix(trimmed, "CONSTRAINT ") && strings.Contains(unquoted(trimmed), " FOREIGN KEY ") ||
			strings.HasPrefix(trimmed, "FOREIGN KEY ") {
			return createTable, nil
		}
		if name, rest, ok := cutIdent(d); ok && hasWord(unquoted(rest), "AUTO_INCREMENT") {
			autoInc = name
		}
	}
	var kept []string
	var keys []DeferredKey
	for _, d := range defs {
		name, rest, ok := cutIdent(strings.TrimPrefix(d, "KEY "))
		if !strings.HasPrefix(d, "KEY ") || !ok {
			kept = append(kept, d)
			continue
		}
		first, _, isColumn := cutIdent(strings.TrimPrefix(rest, " ("))
		if isColumn && autoInc != "" && strings.EqualFold(first, autoInc) {
			kept = append(kept, d)
			continue
		}
		keys = append(keys, DeferredKey{Name: name, Definition: d})
	}
	if len(keys) == 0 {
		return createTable, nil
	}
	out := make([]string, 0, len(kept)+2)
	out = append(out, lines[0])
	for i, d := range kept {
		if i < len(kept)-1 {
			d += ","
		}
		out = append(out, "  "+d)
	}
	out = append(out, lines[end:]...)
	return strings.Join(out, "\n"), keys
}

// cutIdent splits a back-quoted identifier (`a“b` is a`b) off the start of s.
func cutIdent(s string) (ident, rest string, ok bool) {
	if !strings.HasPrefix(s, "`") {
		return "", s, false
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		if s[i] != '`' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '`' {
			b.WriteByte('`')
			i++
			continue
		}
		return b.String(), s[i+1:], true
	}
	return "", s, false
}

// unquoted is s with its quoted strings and identifiers emptied, so that a
// word found in it is SQL and not a comment's or a default's text.
func unquoted(s string) string {
	var b strings.Builder
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote == 0 && (c == '\'' || c == '"' || c == '`'):
			quote = c
			b.WriteByte(c)
		case quote != 0 && c == '\\' && quote != '`':
			i++
		case quote != 0 && c == quote:
			if i+1 < len(s) && s[i+1] == quote {
				i++
				continue
			}
			quote = 0
			b.WriteByte(c)
		case quote == 0:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// hasWord reports whether s holds word between spaces, commas or its ends.
func hasWord(s, word string) bool {
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ',' }) {
		if strings.EqualFold(f, word) {
			return true
		}
	}
	return false
}
