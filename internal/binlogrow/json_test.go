package binlogrow

import (
	"context"
	"fmt"
	"testing"

	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/mysqljson"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/schema"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// TestJSONPartialAndEmptyDocuments checks that a partial JSON update, logged with
// binlog_row_value_options=PARTIAL_JSON, is refused with the reason (DecodeRows
// must not read its after image, whose layout depends on the JSON columns, as
// BLOBs), and that
// an empty document (NULL in a NOT NULL column, stored by a non-strict INSERT
// IGNORE) converts to what SELECT prints for it.
func TestJSONPartialAndEmptyDocuments(t *testing.T) {
	ctx := context.Background()
	srv := sandboxtest.Start(t, sandbox.Options{Flavor: sandbox.MySQL})
	db := sandboxtest.Open(t, srv, "")
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	for _, q := range []string{
		"CREATE DATABASE binlogrow",
		"CREATE TABLE binlogrow.j (id INT PRIMARY KEY, js JSON NOT NULL)",
		`INSERT INTO binlogrow.j VALUES (1, '{"a": 1, "b": "long enough to be worth a diff"}')`,
		"SET SESSION sql_mode = ''",
		"INSERT IGNORE INTO binlogrow.j VALUES (2, NULL)",
		"SET SESSION binlog_row_value_options = 'PARTIAL_JSON'",
		`UPDATE binlogrow.j SET js = JSON_SET(js, '$.a', 2) WHERE id = 1`,
		"CREATE TABLE binlogrow.done (id INT PRIMARY KEY)",
		"INSERT INTO binlogrow.done VALUES (1)",
	} {
		_, err := conn.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	var stored string
	require.NoError(t, db.QueryRow("SELECT js FROM binlogrow.j WHERE id = 2").Scan(&stored))
	tbl, err := schema.Load(ctx, db, "binlogrow", "j")
	require.NoError(t, err)
	cols, err := tbl.Streamed(nil)
	require.NoError(t, err)
	images := readImages(t, srv, "j", "done")
	var kinds []string
	errs := map[string]error{}
	rows := map[string]*rowliftv1.Row{}
	for _, im := range images {
		conv, err := NewConverter(im.table, cols)
		require.NoError(t, err)
		require.NoError(t, conv.CheckSkipped(im.skipped))
		kind := fmt.Sprintf("%s of %v", im.kind, im.values[0])
		kinds = append(kinds, kind)
		rows[kind] = &rowliftv1.Row{}
		errs[kind] = conv.Convert(rows[kind], im.values)
	}
	require.Equal(t, []string{"insert of 1", "insert of 2", "update before of 1", "update after of 1"}, kinds)
	require.NoError(t, errs["insert of 1"])
	require.ErrorContains(t, errs["update before of 1"], "JSON in a partial update event: the source must log with binlog_row_value_options=''",
		"the before image is whole, but go-mysql decoded it as text")
	require.ErrorContains(t, errs["update after of 1"], "partial JSON update (Replace of $.a): the source must log with binlog_row_value_options=''")
	require.NoError(t, errs["insert of 2"])
	got, err := rowcodec.Values(nil, rows["insert of 2"])
	require.NoError(t, err)
	require.Equal(t, "null", stored)
	require.Equal(t, []byte(stored), got[1])
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
