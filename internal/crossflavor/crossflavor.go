// Package crossflavor decides, per column, whether a table moves exactly
// between a MariaDB and a MySQL server, so a workflow between flavors is refused
// or warned about at creation, before anything is written. It does no I/O: the
// coordinator reads the servers and passes what they said.
package crossflavor

import (
	"fmt"
	"regexp"
	"strings"

	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// The flavors, as the streamer and dbconn name them.
const (
	MariaDB = "mariadb"
	MySQL   = "mysql"
)

// Target is what the target server has for one table.
type Target struct {
	// Columns are the existing target table's data types (lower case) by
	// column name; nil when the workflow creates the table from the source's
	// definition.
	Columns map[string]string
	// Collations are every collation the target server knows.
	Collations map[string]bool
	// JSONAsText says the workflow accepts moving MySQL JSON as its text
	// (WorkflowOptions.json_as_text).
	JSONAsText bool
}

// Result is what the check found: refusals stop the workflow's creation,
// warnings are shown with the created workflow. Each names the column.
type Result struct {
	Refusals, Warnings []string
}

// onlyOn are the data types one flavor has and the other does not, with what
// to do instead.
var onlyOn = map[string]map[string]string{
	MariaDB: {
		"inet6": "store it as VARBINARY(16) or VARCHAR(39) on both sides",
		"inet4": "store it as INT UNSIGNED or VARCHAR(15) on both sides",
		"uuid":  "store it as BINARY(16) or CHAR(36) on both sides",
	},
	MySQL: {
		"vector": "store it as VARBINARY on both sides",
	},
}

// Check compares the source table's columns (as the source's streamer
// described them) with the target of another flavor. Between servers of one
// flavor it finds nothing.
func Check(source, target string, table *rowliftv1.TableFields, tgt Target) Result {
	var r Result
	if source == target || source == "" || target == "" {
		return r
	}
	name := table.GetTable()
	if tgt.Columns == nil {
		if c := tableCollation.FindSubmatch(table.GetCreateTable()); c != nil && !tgt.Collations[strings.ToLower(string(c[1]))] {
			r.Refusals = append(r.Refusals, fmt.Sprintf("table %s has the default collation %s, which the %s target does not know: "+
				"create the target table by hand with a collation it has", name, c[1], flavorName(target)))
		}
	}
	mariaJSON := jsonColumns(source, table.GetCreateTable())
	for _, f := range table.GetFields() {
		col := f.GetName()
		where := fmt.Sprintf("column %s.%s", name, col)
		typ := strings.ToLower(f.GetDataType())
		if fix, ok := onlyOn[source][typ]; ok {
			r.Refusals = append(r.Refusals, fmt.Sprintf("%s is %s, which %s has and %s does not: %s", where, strings.ToUpper(typ),
				flavorName(source), flavorName(target), fix))
			continue
		}
		if c := f.GetCollation(); c != "" && !tgt.Collations[strings.ToLower(c)] {
			r.Refusals = append(r.Refusals, fmt.Sprintf("%s has collation %s, which the %s target does not know: "+
				"give the column a collation both servers have (and the same order on both), or create the target table by hand", where, c, flavorName(target)))
			continue
		}
		if source == MySQL && typ == "json" {
			if !tgt.JSONAsText {
				r.Refusals = append(r.Refusals, fmt.Sprintf("%s is JSON on the MySQL source, and MariaDB keeps JSON as text: the DECIMAL, DATE, TIME, "+
					"DATETIME, TIMESTAMP, BIT and BLOB values and the unsigned or large integers inside its documents would become the numbers and "+
					"strings they print as (a DECIMAL 1.50 a DOUBLE, a DATE a STRING); to accept that, create the workflow with --json-as-text", where))
				continue
			}
			r.Warnings = append(r.Warnings, fmt.Sprintf("%s is JSON on the MySQL source and moves as its text (--json-as-text): the DECIMAL, DATE, "+
				"TIME, DATETIME, TIMESTAMP, BIT and BLOB values inside its documents become the numbers and strings they print as, and verify "+
				"compares the text", where))
		}
		if typ == "float" {
			r.Warnings = append(r.Warnings, fmt.Sprintf("%s is FLOAT: MariaDB and MySQL print some FLOAT values (those that need "+
				"17 digits as a double) differently, so verify between them may report such rows as different when the values are equal", where))
		}
		existing, exists := tgt.Columns[col]
		if !exists {
			continue
		}
		existing = strings.ToLower(existing)
		switch {
		case mariaJSON[strings.ToLower(col)] && existing == "json":
			r.Warnings = append(r.Warnings, fmt.Sprintf("%s is JSON text on MariaDB and a JSON column on the MySQL target, which stores "+
				"documents normalised (keys sorted, duplicate keys dropped, numbers and spacing rewritten): the values will be equal as JSON, "+
				"not byte for byte, and verify will report them; make the target column LONGTEXT to keep the text exactly", where))
		case source == MySQL && typ == "json" && existing != "json" && existing != "longtext":
			r.Warnings = append(r.Warnings, fmt.Sprintf("%s is JSON on the MySQL source and %s on the MariaDB target: "+
				"documents are copied as MySQL prints them, and may not fit; make it LONGTEXT (MariaDB's JSON)", where, strings.ToUpper(existing)))
		}
	}
	return r
}

// tableCollation is the table's default collation in SHOW CREATE TABLE.
var tableCollation = regexp.MustCompile(`(?i)\bCOLLATE=(\w+)`)

// jsonColumns finds the columns of a MariaDB table that are JSON: MariaDB
// reports them as LONGTEXT, with a json_valid() check on the column.
func jsonColumns(source string, createTable []byte) map[string]bool {
	out := map[string]bool{}
	if source != MariaDB {
		return out
	}
	text := strings.ToLower(string(createTable))
	for {
		i := strings.Index(text, "json_valid(`")
		if i < 0 {
			return out
		}
		text = text[i+len("json_valid(`"):]
		j := strings.IndexByte(text, '`')
		if j < 0 {
			return out
		}
		out[text[:j]] = true
		text = text[j:]
	}
}

func flavorName(f string) string {
	if f == MySQL {
		return "MySQL"
	}
	return "MariaDB"
}
