package applier

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/applier/writeset"
	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/schema"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// docFields is a table with a JSON column as a MySQL source streams it; on a
// MariaDB target JSON is LONGTEXT, which CREATE TABLE ... JSON also gives.
func docFields(table string) *rowliftv1.TableFields {
	return &rowliftv1.TableFields{
		Table: table,
		Fields: []*rowliftv1.Field{
			{Name: "id", DataType: "int", ColumnType: "int"},
			{Name: "doc", DataType: "json", ColumnType: "json", Nullable: true},
			{Name: "note", DataType: "text", ColumnType: "text", Charset: "utf8mb4", Collation: "utf8mb4_bin", Nullable: true},
		},
		PkColumns:   []int32{0},
		CreateTable: []byte("CREATE TABLE `" + table + "` (id INT PRIMARY KEY, doc JSON, note TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)"),
	}
}

func row(values ...[]byte) *rowliftv1.Row {
	r := &rowliftv1.Row{}
	rowcodec.Pack(r, values)
	return r
}

// targetServer starts a target of the flavor and opens it as the applier does.
func targetServer(t *testing.T, flavor sandbox.Flavor) *sql.DB {
	srv := sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
	db, _, err := dbconn.Open(srv.DSN(""), dbconn.Target)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// sameJSON checks that the target's doc of row id is the JSON value of text:
// equal as JSON on MySQL (which stores JSON normalized), byte for byte on
// MariaDB (which keeps the text).
func sameJSON(t *testing.T, db *sql.DB, flavor sandbox.Flavor, table string, id int, text string) {
	t.Helper()
	var same bool
	q := "SELECT doc = CONVERT(? USING utf8mb4) FROM d." + table + " WHERE id = ?"
	if flavor == sandbox.MySQL {
		q = "SELECT doc = CAST(CONVERT(? USING utf8mb4) AS JSON) FROM d." + table + " WHERE id = ?"
	}
	require.NoError(t, db.QueryRow(q, text, id).Scan(&same))
	require.True(t, same, "%s row %d: doc is not %s", table, id, text)
}

// A copy into a JSON column keeps the value, with LOAD DATA and with INSERTs:
// MySQL refuses to make JSON of the binary strings both write otherwise.
func TestCopyIntoJSONColumn(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		db := targetServer(t, flavor)
		ctx := context.Background()
		doc := `{"b": 1, "a": [1.5, "x\ty", "é\\n"], "c": null}`
		for _, method := range []rowliftv1.CopyMethod{rowliftv1.CopyMethod_COPY_METHOD_LOAD_DATA, rowliftv1.CopyMethod_COPY_METHOD_INSERT} {
			table := "j" + method.String()[len("COPY_METHOD_"):]
			spec := &rowliftv1.WorkflowSpec{SourceDatabase: "d", Tables: []*rowliftv1.TableSpec{{Name: table}},
				Options: &rowliftv1.WorkflowOptions{CopyMethod: method}}
			tables, err := prepareTargets(ctx, db, spec, []*rowliftv1.TableFields{docFields(table)}, nil, 1<<20, nil)
			require.NoError(t, err)
			tbl := tables[table]
			require.Equal(t, method == rowliftv1.CopyMethod_COPY_METHOD_LOAD_DATA, tbl.load != nil)
			var s scratch
			write, err := tbl.writer(&s, chunkOf(row([]byte("1"), []byte(doc), []byte("a\tb")), row([]byte("2"), nil, nil)))
			require.NoError(t, err)
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			require.NoError(t, write(ctx, tx), method)
			require.NoError(t, tx.Commit())
			sameJSON(t, db, flavor, table, 1, doc)
			var nulls int
			require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM d."+table+" WHERE id = 2 AND doc IS NULL AND note IS NULL").Scan(&nulls))
			require.Equal(t, 1, nulls, "NULLs stay NULL")
		}
	})
}

// replay applies transactions to the target as a replay worker does, and
// returns the warnings of the last statement.
func replay(ctx context.Context, t *testing.T, db *sql.DB, tables map[string]*targetTable, idempotent bool, trxs ...*rowliftv1.Transaction) (int, error) {
	keys := map[string]*writeset.Table{}
	for name, tbl := range tables {
		k, err := writeset.Load(ctx, db, tbl.database, tbl.table, tbl.fields)
		require.NoError(t, err)
		keys[name] = k
	}
	w := &rowWriter{p: &player{db: db, tables: tables}, keys: keys}
	for _, trx := range trxs {
		require.NoError(t, w.add(trx, idempotent))
	}
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	if _, err := w.exec(ctx, conn, 1<<20, nil); err != nil {
		return 0, err
	}
	var warnings int
	require.NoError(t, conn.QueryRowContext(ctx, "SELECT @@warning_count").Scan(&warnings))
	_, err = conn.ExecContext(ctx, "COMMIT")
	return warnings, err
}

func change(table string, before, after *rowliftv1.Row) *rowliftv1.Transaction {
	return &rowliftv1.Transaction{Gtid: "0-1-1", Events: []*rowliftv1.RowEvent{{Table: table, Changes: []*rowliftv1.RowChange{{Before: before, After: after}}}}}
}

// Replayed inserts, updates and idempotent upserts write JSON values whole,
// upserts leave no warning (MySQL deprecates VALUES() in them), and an update
// that finds no row is divergence, on either flavor.
func TestReplayOnTarget(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		db := targetServer(t, flavor)
		ctx := context.Background()
		spec := &rowliftv1.WorkflowSpec{SourceDatabase: "d", Tables: []*rowliftv1.TableSpec{{Name: "r"}}}
		tables, err := prepareTargets(ctx, db, spec, []*rowliftv1.TableFields{docFields("r")}, nil, 1<<20, nil)
		require.NoError(t, err)
		one, two := `{"k": [1, 2]}`, `{"k": "two", "z": {"y": true}}`
		_, err = replay(ctx, t, db, tables, false,
			change("r", nil, row([]byte("1"), []byte(one), []byte("n"))),
			change("r", nil, row([]byte("2"), []byte(one), nil)),
			change("r", row([]byte("2"), []byte(one), nil), row([]byte("2"), []byte(two), []byte("m"))))
		require.NoError(t, err)
		sameJSON(t, db, flavor, "r", 1, one)
		sameJSON(t, db, flavor, "r", 2, two)

		warnings, err := replay(ctx, t, db, tables, true, change("r", row([]byte("1"), []byte(one), nil), row([]byte("1"), []byte(two), nil)))
		require.NoError(t, err)
		require.Zero(t, warnings, "the upsert left warnings")
		sameJSON(t, db, flavor, "r", 1, two)

		_, err = replay(ctx, t, db, tables, false, change("r", row([]byte("9"), []byte(one), nil), row([]byte("9"), []byte(two), nil)))
		require.ErrorContains(t, err, "divergence applying source transaction 0-1-1 to r: no row (id=\"9\") to update")
		_, err = replay(ctx, t, db, tables, false, change("r", nil, row([]byte("1"), []byte(one), nil)))
		var me *mysql.MySQLError
		require.ErrorAs(t, err, &me)
		require.EqualValues(t, 1062, me.Number, "an insert whose key is taken")
	})
}

// A copy chunk that meets a row already in the target, or a value the target
// column cannot hold as it is, stops the workflow with what happened, with
// LOAD DATA (which only warns of both) and with INSERTs, on either flavor.
func TestCopyRefusesWhatIsNotExact(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		db := targetServer(t, flavor)
		ctx := context.Background()
		for _, method := range []rowliftv1.CopyMethod{rowliftv1.CopyMethod_COPY_METHOD_LOAD_DATA, rowliftv1.CopyMethod_COPY_METHOD_INSERT} {
			table := "x" + method.String()[len("COPY_METHOD_"):]
			fields := &rowliftv1.TableFields{
				Table: table,
				Fields: []*rowliftv1.Field{
					{Name: "id", DataType: "int", ColumnType: "int"},
					{Name: "code", DataType: "varchar", ColumnType: "varchar(3)", Charset: "utf8mb4", Collation: "utf8mb4_bin", Nullable: true},
				},
				PkColumns:   []int32{0},
				CreateTable: []byte("CREATE TABLE `" + table + "` (id INT PRIMARY KEY, code VARCHAR(3) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)"),
			}
			spec := &rowliftv1.WorkflowSpec{SourceDatabase: "d", Tables: []*rowliftv1.TableSpec{{Name: table}},
				Options: &rowliftv1.WorkflowOptions{CopyMethod: method}}
			tables, err := prepareTargets(ctx, db, spec, []*rowliftv1.TableFields{fields}, nil, 1<<20, nil)
			require.NoError(t, err)
			copyRows := func(rows ...*rowliftv1.Row) error {
				var s scratch
				write, err := tables[table].writer(&s, chunkOf(rows...))
				require.NoError(t, err)
				tx, err := db.BeginTx(ctx, nil)
				require.NoError(t, err)
				defer tx.Rollback() //nolint:errcheck // the test commits nothing it checks
				return write(ctx, tx)
			}
			_, err = db.ExecContext(ctx, "INSERT INTO d."+table+" VALUES (2, 'x')")
			require.NoError(t, err)

			err = copyRows(row([]byte("1"), []byte("a")), row([]byte("2"), []byte("b")))
			require.True(t, IsPermanent(err), "%v", err)
			require.ErrorContains(t, err, "copy "+table+": duplicate key")
			require.ErrorContains(t, err, "the target table holds a row in a range rowlift had not copied yet")

			err = copyRows(row([]byte("3"), []byte("long")))
			require.True(t, IsPermanent(err), "%v", err)
			if method == rowliftv1.CopyMethod_COPY_METHOD_LOAD_DATA {
				require.ErrorContains(t, err, "the target took 1 of 1 rows with 1 warnings (first: 1265 Data truncated for column 'code' at row 1); the copy would not be exact")
			} else {
				require.ErrorContains(t, err, "the target rejected a row (1406: Data too long for column 'code' at row 1)")
			}
		}
	})
}

// typesTable has a column of every common type, and typesRows rows that
// reach their limits, with NULLs in the last.
const typesTable = `(id INT PRIMARY KEY, ti TINYINT UNSIGNED, bi BIGINT UNSIGNED, sb BIGINT, de DECIMAL(30,8), fl FLOAT, db DOUBLE,
	bt BIT(64), da DATE, dt DATETIME(6), ts TIMESTAMP(6) NULL, tm TIME(3), yr YEAR, ch CHAR(5) CHARACTER SET latin1,
	vc VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, bn BINARY(4), vb VARBINARY(300), bl BLOB, tx TEXT CHARACTER SET utf8mb4,
	en ENUM('a','b c','ü'), st SET('x','y','z'), js JSON)`

var typesRows = []string{
	`(1, 255, 18446744073709551615, -9223372036854775808, -12345678901234567890.12345678, 3.40282e38, -1.7976931348623157e308,
		b'1111111111111111111111111111111111111111111111111111111111111111', '1000-01-01', '9999-12-31 23:59:59.999999',
		'2038-01-19 03:14:07.999999', '-838:59:59.000', 1901, 'é  ', 'a\tb\nc\\\\d''e', X'0102', ` + sandboxtest.HexLiteral(sandboxtest.EveryByte(300, 1)) + `,
		` + sandboxtest.HexLiteral(sandboxtest.EveryByte(1000, 2)) + `, '😀 text\r\n', 'ü', 'x,z', '{"a": [1, 2.50, "\\\\t"], "b": null, "a2": {}}')`,
	`(2, 0, 0, 0, 0, -1.5, 5e-324, b'0', '2024-02-29', '1970-01-01 00:00:00', '1970-01-01 00:00:01', '00:00:00', 2155, '', '', X'00000000', '',
		'', '', 'b c', '', '[]')`,
	`(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)`,
}

// A copy keeps every value of every common type, with either method: the
// rows are read as the streamer reads them and copied into a table of the
// same definition, then compared by the server.
func TestCopyKeepsEveryType(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		srv := sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
		sandboxtest.Exec(t, sandboxtest.Open(t, srv, ""), "CREATE DATABASE d", "CREATE TABLE d.src "+typesTable,
			"INSERT INTO d.src VALUES "+strings.Join(typesRows, ", "))
		db, _, err := dbconn.Open(srv.DSN(""), dbconn.Target)
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		read, _, err := dbconn.Open(srv.DSN(""), dbconn.Source)
		require.NoError(t, err)
		t.Cleanup(func() { read.Close() })
		ctx := context.Background()

		src, err := schema.Load(ctx, read, "d", "src")
		require.NoError(t, err)
		var exprs []string
		for _, c := range src.Columns {
			exprs = append(exprs, rowcodec.SelectExpr(c.Name, c.DataType))
		}
		var rows []*rowliftv1.Row
		require.NoError(t, scanRows(read, "SELECT "+strings.Join(exprs, ", ")+" FROM d.src ORDER BY id", func(vals [][]byte) {
			rows = append(rows, row(vals...))
		}))
		require.Len(t, rows, len(typesRows))

		for _, method := range []rowliftv1.CopyMethod{rowliftv1.CopyMethod_COPY_METHOD_LOAD_DATA, rowliftv1.CopyMethod_COPY_METHOD_INSERT} {
			table := "dst_" + method.String()[len("COPY_METHOD_"):]
			fields := &rowliftv1.TableFields{Table: table, PkColumns: []int32{0},
				CreateTable: []byte("CREATE TABLE `" + table + "` " + typesTable)}
			for _, c := range src.Columns {
				fields.Fields = append(fields.Fields, &rowliftv1.Field{Name: c.Name, DataType: c.DataType, ColumnType: c.ColumnType,
					Charset: c.Charset, Collation: c.Collation, Nullable: c.Nullable})
			}
			spec := &rowliftv1.WorkflowSpec{SourceDatabase: "d", Tables: []*rowliftv1.TableSpec{{Name: table}},
				Options: &rowliftv1.WorkflowOptions{CopyMethod: method}}
			tables, err := prepareTargets(ctx, db, spec, []*rowliftv1.TableFields{fields}, nil, 1<<20, nil)
			require.NoError(t, err)
			var s scratch
			write, err := tables[table].writer(&s, chunkOf(rows...))
			require.NoError(t, err)
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			require.NoError(t, write(ctx, tx), method)
			require.NoError(t, tx.Commit())
			for _, c := range src.Columns {
				var differ int
				col := rowcodec.Ident(c.Name)
				require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM d.src s LEFT JOIN d."+table+" t USING (id) WHERE NOT (s."+col+
					" <=> t."+col+") OR t.id IS NULL").Scan(&differ))
				require.Zero(t, differ, "%s: column %s differs", method, c.Name)
			}
		}
	})
}

// scanRows runs a query and gives each row's values (nil for NULL) to fn.
func scanRows(db *sql.DB, query string, fn func([][]byte)) error {
	rs, err := db.Query(query)
	if err != nil {
		return err
	}
	defer rs.Close()
	cols, err := rs.Columns()
	if err != nil {
		return err
	}
	for rs.Next() {
		raw := make([]sql.RawBytes, len(cols))
		dest := make([]any, len(cols))
		for i := range raw {
			dest[i] = &raw[i]
		}
		if err := rs.Scan(dest...); err != nil {
			return err
		}
		vals := make([][]byte, len(cols))
		for i, r := range raw {
			if r != nil {
				vals[i] = append([]byte{}, r...)
			}
		}
		fn(vals)
	}
	return rs.Err()
}

// With local_infile OFF on the target (MySQL's default), a copy that may
// choose writes with INSERTs, and one that asks for LOAD DATA is refused with
// what to do, on either flavor. Each refusal of CheckTargets names the CLI
// flag to give as well as the API field: CLI users read them too.
func TestCopyMethodFollowsLocalInfile(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		db := targetServer(t, flavor)
		ctx := context.Background()
		_, err := db.ExecContext(ctx, "SET GLOBAL local_infile = OFF")
		require.NoError(t, err)
		spec := &rowliftv1.WorkflowSpec{SourceDatabase: "d", Tables: []*rowliftv1.TableSpec{{Name: "j"}}}
		fields := []*rowliftv1.TableFields{docFields("j")}
		tables, err := prepareTargets(ctx, db, spec, fields, nil, 1<<20, nil)
		require.NoError(t, err)
		require.Nil(t, tables["j"].load)
		require.NotNil(t, tables["j"].insert)

		spec.Tables[0].Name = "k" // not created yet: nothing else to check
		spec.Options = &rowliftv1.WorkflowOptions{CopyMethod: rowliftv1.CopyMethod_COPY_METHOD_LOAD_DATA}
		_, _, err = CheckTargets(ctx, db, spec, []*rowliftv1.TableFields{docFields("k")}, nil)
		require.True(t, IsPermanent(err), "%v", err)
		require.EqualError(t, err, "the workflow copies with LOAD DATA but the target has local_infile=OFF: "+
			"SET GLOBAL local_infile=ON on the target, or create the workflow with --copy-method insert (copy_method INSERT in the API)")

		// The other refusals a create meets name the flag as well as the field.
		spec.Options = &rowliftv1.WorkflowOptions{SkipCreateTables: true}
		_, _, err = CheckTargets(ctx, db, spec, []*rowliftv1.TableFields{docFields("k")}, nil)
		require.EqualError(t, err, "target table d.k does not exist and the workflow does not create tables "+
			"(--skip-create-tables; skip_create_tables in the API): create it like the source's, or recreate the workflow without that option")
		_, err = db.ExecContext(ctx, "INSERT INTO d.j (id) VALUES (1)")
		require.NoError(t, err)
		spec.Tables[0].Name, spec.Options = "j", nil
		_, _, err = CheckTargets(ctx, db, spec, fields, nil)
		require.EqualError(t, err, "target table d.j already has rows and its copy has not started: empty it (TRUNCATE) "+
			"or create the workflow with --allow-nonempty-target (allow_nonempty_target in the API)")
	})
}

// MariaDB's JSON (LONGTEXT text, as a MariaDB source streams it) copied and
// replayed into a target JSON column keeps its value: on a MySQL target the
// column's own type, not the source's, makes its literals utf8mb4.
func TestJSONTextIntoTargetJSONColumn(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		db := targetServer(t, flavor)
		ctx := context.Background()
		doc := `{"z": 1, "a": [true, "é"]}`
		for _, method := range []rowliftv1.CopyMethod{rowliftv1.CopyMethod_COPY_METHOD_LOAD_DATA, rowliftv1.CopyMethod_COPY_METHOD_INSERT} {
			table := "mj" + method.String()[len("COPY_METHOD_"):]
			_, err := db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS d")
			require.NoError(t, err)
			_, err = db.ExecContext(ctx, "CREATE TABLE d."+table+" (id INT PRIMARY KEY, Doc JSON)")
			require.NoError(t, err)
			fields := &rowliftv1.TableFields{Table: table, PkColumns: []int32{0}, Fields: []*rowliftv1.Field{
				{Name: "id", DataType: "int", ColumnType: "int(11)"},
				{Name: "doc", DataType: "longtext", ColumnType: "longtext", Charset: "utf8mb4", Collation: "utf8mb4_bin", Nullable: true},
			}}
			spec := &rowliftv1.WorkflowSpec{SourceDatabase: "d", Tables: []*rowliftv1.TableSpec{{Name: table}},
				Options: &rowliftv1.WorkflowOptions{CopyMethod: method}}
			tables, err := prepareTargets(ctx, db, spec, []*rowliftv1.TableFields{fields}, nil, 1<<20, nil)
			require.NoError(t, err)
			var s scratch
			write, err := tables[table].writer(&s, chunkOf(row([]byte("1"), []byte(doc))))
			require.NoError(t, err)
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			require.NoError(t, write(ctx, tx), method)
			require.NoError(t, tx.Commit())
			sameJSON(t, db, flavor, table, 1, doc)

			_, err = replay(ctx, t, db, tables, false, change(table, nil, row([]byte("2"), []byte(doc))),
				change(table, row([]byte("1"), []byte(doc)), row([]byte("1"), []byte(`[1]`))))
			require.NoError(t, err)
			sameJSON(t, db, flavor, table, 2, doc)
			sameJSON(t, db, flavor, table, 1, `[1]`)
		}
	})
}
