package crossflavor

import (
	"testing"

	"github.com/stretchr/testify/assert"

	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

var collations = map[string]bool{"utf8mb4_general_ci": true, "utf8mb4_bin": true, "latin1_swedish_ci": true}

func table(create string, fields ...*rowliftv1.Field) *rowliftv1.TableFields {
	return &rowliftv1.TableFields{Table: "t", Fields: fields, CreateTable: []byte(create)}
}

func field(name, typ, collation string) *rowliftv1.Field {
	return &rowliftv1.Field{Name: name, DataType: typ, Collation: collation}
}

func TestSameFlavorFindsNothing(t *testing.T) {
	tbl := table("CREATE TABLE t (...) COLLATE=utf8mb4_uca1400_ai_ci", field("a", "inet6", "utf8mb4_uca1400_ai_ci"))
	for _, f := range []string{MariaDB, MySQL} {
		assert.Equal(t, Result{}, Check(f, f, tbl, Target{}))
	}
	assert.Equal(t, Result{}, Check("", MySQL, tbl, Target{}), "an unknown flavor (an older streamer) checks nothing")
}

func TestTypesOfOneFlavorAreRefused(t *testing.T) {
	cases := []struct {
		source, target, typ, want string
	}{
		{MariaDB, MySQL, "inet6", "column t.a is INET6, which MariaDB has and MySQL does not: store it as VARBINARY(16) or VARCHAR(39) on both sides"},
		{MariaDB, MySQL, "INET4", "column t.a is INET4, which MariaDB has and MySQL does not"},
		{MariaDB, MySQL, "uuid", "column t.a is UUID, which MariaDB has and MySQL does not: store it as BINARY(16) or CHAR(36)"},
		{MySQL, MariaDB, "vector", "column t.a is VECTOR, which MySQL has and MariaDB does not: store it as VARBINARY"},
	}
	for _, c := range cases {
		r := Check(c.source, c.target, table("", field("a", c.typ, "")), Target{Collations: collations})
		if assert.Len(t, r.Refusals, 1, c.typ) {
			assert.Contains(t, r.Refusals[0], c.want)
		}
		assert.Empty(t, r.Warnings)
	}
	for _, typ := range []string{"int", "varchar", "json", "bit", "year", "geometry", "decimal", "timestamp"} {
		for _, dir := range [][2]string{{MariaDB, MySQL}, {MySQL, MariaDB}} {
			r := Check(dir[0], dir[1], table("", field("a", typ, "")), Target{Collations: collations, JSONAsText: true})
			assert.Empty(t, r.Refusals, "%s from %s", typ, dir[0])
		}
	}
	r := Check(MySQL, MariaDB, table("", field("a", "inet6", "")), Target{Collations: collations})
	assert.Empty(t, r.Refusals, "a MySQL column is never MariaDB's INET6: the name alone proves nothing the other way")
}

func TestCollationsTheTargetLacks(t *testing.T) {
	r := Check(MySQL, MariaDB, table("CREATE TABLE `t` (...) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_0900_ai_ci",
		field("id", "int", ""), field("name", "varchar", "utf8mb4_0900_ai_ci"), field("b", "varchar", "utf8mb4_bin")),
		Target{Collations: collations})
	assert.Equal(t, []string{
		"table t has the default collation utf8mb4_0900_ai_ci, which the MariaDB target does not know: create the target table by hand with a collation it has",
		"column t.name has collation utf8mb4_0900_ai_ci, which the MariaDB target does not know: give the column a collation both servers have " +
			"(and the same order on both), or create the target table by hand",
	}, r.Refusals)

	existing := Check(MySQL, MariaDB, table("CREATE TABLE `t` (...) COLLATE=utf8mb4_0900_ai_ci", field("id", "int", "")),
		Target{Columns: map[string]string{"id": "int"}, Collations: collations})
	assert.Empty(t, existing.Refusals, "a target table made by hand keeps its own default collation")

	known := Check(MariaDB, MySQL, table("CREATE TABLE `t` (...) COLLATE=UTF8MB4_GENERAL_CI", field("v", "varchar", "utf8mb4_General_ci")),
		Target{Collations: collations})
	assert.Empty(t, known.Refusals, "collation names compare without case")
}

func TestJSONBetweenFlavors(t *testing.T) {
	maria := "CREATE TABLE `t` (\n  `id` int(11) NOT NULL,\n  `Doc` longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL CHECK (json_valid(`Doc`)),\n" +
		"  `plain` longtext,\n  `other` longtext CHECK (json_valid(`other`)),\n  PRIMARY KEY (`id`)\n)"
	fields := []*rowliftv1.Field{field("id", "int", ""), field("Doc", "longtext", "utf8mb4_bin"), field("plain", "longtext", "utf8mb4_bin"),
		field("other", "longtext", "utf8mb4_bin")}

	created := Check(MariaDB, MySQL, table(maria, fields...), Target{Collations: collations})
	assert.Equal(t, Result{}, created, "a created target keeps MariaDB's JSON as LONGTEXT with its check: exact")

	r := Check(MariaDB, MySQL, table(maria, fields...), Target{Columns: map[string]string{"id": "int", "Doc": "json", "plain": "json", "other": "longtext"},
		Collations: collations})
	assert.Empty(t, r.Refusals)
	if assert.Len(t, r.Warnings, 1, "only the MariaDB JSON column that meets a MySQL JSON column") {
		assert.Contains(t, r.Warnings[0], "column t.Doc is JSON text on MariaDB and a JSON column on the MySQL target")
		assert.Contains(t, r.Warnings[0], "make the target column LONGTEXT")
	}

	// MySQL JSON into MariaDB loses its typed values: refused, unless the
	// workflow accepts moving it as text.
	fromMySQL := table("CREATE TABLE `t` (`id` int, `j` json)", field("id", "int", ""), field("j", "json", ""))
	refused := Check(MySQL, MariaDB, fromMySQL, Target{Collations: collations})
	assert.Empty(t, refused.Warnings)
	if assert.Len(t, refused.Refusals, 1) {
		assert.Contains(t, refused.Refusals[0], "column t.j is JSON on the MySQL source, and MariaDB keeps JSON as text")
		assert.Contains(t, refused.Refusals[0], "create the workflow with --json-as-text")
	}
	for _, tgt := range []Target{{Collations: collations, JSONAsText: true},
		{Columns: map[string]string{"id": "int", "j": "longtext"}, Collations: collations, JSONAsText: true}} {
		r := Check(MySQL, MariaDB, fromMySQL, tgt)
		assert.Empty(t, r.Refusals)
		if assert.Len(t, r.Warnings, 1) {
			assert.Contains(t, r.Warnings[0], "column t.j is JSON on the MySQL source and moves as its text (--json-as-text)")
		}
	}
	small := Check(MySQL, MariaDB, fromMySQL, Target{Columns: map[string]string{"id": "int", "j": "varchar"}, Collations: collations, JSONAsText: true})
	if assert.Len(t, small.Warnings, 2) {
		assert.Contains(t, small.Warnings[1], "column t.j is JSON on the MySQL source and VARCHAR on the MariaDB target")
	}
}

func TestJSONColumnsNeedsBackquotedChecks(t *testing.T) {
	assert.Equal(t, map[string]bool{"a": true, "b c": true}, jsonColumns(MariaDB, []byte("CHECK (json_valid(`a`)), CHECK (JSON_VALID(`b c`)), json_valid(`unterminated")))
	assert.Empty(t, jsonColumns(MySQL, []byte("CHECK (json_valid(`a`))")))
}

func TestFloatBetweenFlavorsWarns(t *testing.T) {
	for _, dir := range [][2]string{{MariaDB, MySQL}, {MySQL, MariaDB}} {
		r := Check(dir[0], dir[1], table("", field("f", "float", ""), field("d", "double", "")), Target{Collations: collations})
		assert.Empty(t, r.Refusals)
		if assert.Len(t, r.Warnings, 1) {
			assert.Contains(t, r.Warnings[0], "column t.f is FLOAT: MariaDB and MySQL print some FLOAT values")
		}
	}
}
