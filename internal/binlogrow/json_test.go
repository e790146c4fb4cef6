package binlogrow

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/mysqljson"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/schema"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// TestJSONPartialAndEmptyDocuments checks partial JSON updates (logged with
// binlog_row_value_options=PARTIAL_JSON) next to empty documents (NULL in a
// NOT NULL column, stored by a non-strict INSERT IGNORE or UPDATE IGNORE),
// which go-mysql reads alike: a diff vector is applied to the before image's
// document, an empty one (a column the update left alone) keeps it, and an
// empty document converts to what SELECT prints for it.
func TestJSONPartialAndEmptyDocuments(t *testing.T) {
	ctx := context.Background()
	srv := sandboxtest.Start(t, sandbox.Options{Flavor: sandbox.MySQL})
	db := sandboxtest.Open(t, srv, "")
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	for _, q := range []string{
		"CREATE DATABASE binlogrow",
		"CREATE TABLE binlogrow.j (id INT PRIMARY KEY, js JSON NOT NULL, n INT)",
		`INSERT INTO binlogrow.j VALUES (1, '{"a": 1, "b": "long enough to be worth a diff"}', 0)`,
		"SET SESSION sql_mode = ''",
		"INSERT IGNORE INTO binlogrow.j VALUES (2, NULL, 0)",
		"SET SESSION binlog_row_value_options = 'PARTIAL_JSON'",
		`UPDATE binlogrow.j SET js = JSON_SET(js, '$.a', 2) WHERE id = 1`,
		`UPDATE binlogrow.j SET n = 1`,
		`UPDATE IGNORE binlogrow.j SET js = NULL, n = 2 WHERE id = 1`,
		"CREATE TABLE binlogrow.done (id INT PRIMARY KEY)",
		"INSERT INTO binlogrow.done VALUES (1)",
	} {
		_, err := conn.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	var stored1, stored2 string
	require.NoError(t, db.QueryRow("SELECT (SELECT js FROM binlogrow.j WHERE id = 1), js FROM binlogrow.j WHERE id = 2").Scan(&stored1, &stored2))
	require.Equal(t, "null", stored1, "UPDATE IGNORE stored an empty document")
	require.Equal(t, "null", stored2)
	tbl, err := schema.Load(ctx, db, "binlogrow", "j")
	require.NoError(t, err)
	cols, err := tbl.Streamed(nil)
	require.NoError(t, err)
	const doc1 = `{"a": 1, "b": "long enough to be worth a diff"}`
	const doc2 = `{"a": 2, "b": "long enough to be worth a diff"}`
	want := []string{
		"insert of 1: " + doc1, "insert of 2: null",
		"update before of 1: " + doc1, "update after of 1: " + doc2 + " (diff)",
		"update before of 1: " + doc2, "update after of 1: " + doc2 + " (unchanged)",
		"update before of 2: null", "update after of 2: null (unchanged)",
		"update before of 1: " + doc2, "update after of 1: null",
	}
	var got []string
	for _, im := range readImages(t, srv, "j", "done") {
		conv, err := NewConverter(im.table, cols)
		require.NoError(t, err)
		require.NoError(t, conv.CheckSkipped(im.skipped))
		row := &rowliftv1.Row{}
		require.NoError(t, conv.Convert(row, im.values))
		vals, err := rowcodec.Values(nil, row)
		require.NoError(t, err)
		g := fmt.Sprintf("%s of %s: %s", im.kind, vals[0], vals[1])
		if p, ok := im.values[1].(partialJSON); ok && len(p.diffs) > 0 {
			g += " (diff)"
		} else if ok {
			g += " (unchanged)"
		}
		got = append(got, g)
	}
	require.Equal(t, want, got)
}

// TestJSONNeedsDecodeRows shows why CheckConfig requires DecodeRows: without
// it go-mysql renders MySQL JSON as text, which has lost the types of its
// scalars (here a DECIMAL and a DATE), and Convert refuses it.
func TestJSONNeedsDecodeRows(t *testing.T) {
	ctx := context.Background()
	srv := sandboxtest.Start(t, sandbox.Options{Flavor: sandbox.MySQL})
	db := sandboxtest.Open(t, srv, "")
	sandboxtest.Exec(t, db, "CREATE DATABASE binlogrow", "CREATE TABLE binlogrow.j (id INT PRIMARY KEY, js JSON)",
		"INSERT INTO binlogrow.j VALUES (1, JSON_ARRAY(CAST(1.50 AS DECIMAL(3,2)), CAST('2020-01-02' AS DATE)))",
		"CREATE TABLE binlogrow.done (id INT PRIMARY KEY)", "INSERT INTO binlogrow.done VALUES (1)")
	tbl, err := schema.Load(ctx, db, "binlogrow", "j")
	require.NoError(t, err)
	cols, err := tbl.Streamed(nil)
	require.NoError(t, err)
	convert := func(cfg replication.BinlogSyncerConfig) (any, []byte, error) {
		images := readImagesWith(t, srv, cfg, "j", "done")
		require.Len(t, images, 1)
		conv, err := NewConverter(images[0].table, cols)
		require.NoError(t, err)
		row := &rowliftv1.Row{}
		if err := conv.Convert(row, images[0].values); err != nil {
			return images[0].values[1], nil, err
		}
		vals, err := rowcodec.Values(nil, row)
		require.NoError(t, err)
		return images[0].values[1], vals[1], nil
	}
	cfg := syncerConfig(srv)
	cfg.RowsEventDecodeFunc = nil
	require.ErrorContains(t, CheckConfig(cfg), "RowsEventDecodeFunc must be binlogrow.DecodeRows")
	decoded, _, err := convert(cfg)
	require.Equal(t, `[1.50,"2020-01-02"]`, decoded, "go-mysql's text")
	require.ErrorContains(t, err, "JSON decoded as text, which loses the types of its scalars")
	_, typed, err := convert(syncerConfig(srv))
	require.NoError(t, err)
	text, patches := mysqljson.Split(typed)
	require.Equal(t, `[1.50, "2020-01-02"]`, string(text))
	var got []string
	require.NoError(t, mysqljson.Patches(patches, func(p mysqljson.Patch) error {
		got = append(got, fmt.Sprintf("%s %s %s", p.Path, p.Type, p.Value))
		return nil
	}))
	require.Equal(t, []string{"$[0] DECIMAL 1.50", "$[1] DATE 2020-01-02"}, got)
}

// TestPartialJSONColumns walks a hand-made partial update event: a before
// and an after image of an INT, a JSON and a VARCHAR column, the JSON value of
// the after image a diff vector; every truncation of it is an error.
func TestPartialJSONColumns(t *testing.T) {
	tm := &replication.TableMapEvent{ColumnCount: 3, ColumnType: []byte{mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_JSON, mysql.MYSQL_TYPE_VARCHAR},
		ColumnMeta: []uint16{0, 4, 20}}
	e := &replication.RowsEvent{Table: tm, ColumnCount: 3, ColumnBitmap1: []byte{7}, ColumnBitmap2: []byte{7}}
	before := []byte{0, 1, 0, 0, 0, 2, 0, 0, 0, 0x04, 0x01, 1, 'x'}
	after := []byte{1, 1, 0, 1, 0, 0, 0, 3, 0, 0, 0, 2, 1, '$', 0}
	data := append(append([]byte{0xee}, before...), after...)
	got, err := partialJSONColumns(e, data, 1)
	require.NoError(t, err)
	require.Equal(t, [][2]int{{1, 1}}, got)
	unchanged := slices.Clone(data)
	unchanged[1+len(before)+1] = 0 // no partial bit: the JSON value is a whole document
	got, err = partialJSONColumns(e, unchanged, 1)
	require.NoError(t, err)
	require.Empty(t, got)
	for n := 2; n < len(data); n++ {
		_, err := partialJSONColumns(e, data[:n:n], 1)
		require.Error(t, err, "truncated to %d bytes", n)
	}
	_, err = partialJSONColumns(&replication.RowsEvent{Table: tm, ColumnCount: 4, ColumnBitmap1: []byte{15}, ColumnBitmap2: []byte{15}}, data, 1)
	require.ErrorContains(t, err, "rows event has 4 columns, its table map 3")
	tm.ColumnType[0] = 0xf0
	_, err = partialJSONColumns(e, data, 1)
	require.ErrorContains(t, err, "row image 0, column 0: unknown binlog type 240")
}
