package main

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"strings"
)

// seedBatchRows is how many rows one seeding INSERT writes.
const seedBatchRows = 20_000

// seed fills the source table: row i holds docExpr's document, typed for the
// rows typedRow picks, with the number of line items that brings the
// documents to about -doc-bytes of text.
func (b *bench) seed(ctx context.Context) error {
	for _, q := range []string{"CREATE DATABASE " + db, createTable} {
		if _, err := b.SrcDB.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	conn, err := b.SrcDB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	// The recursive CTE that numbers a batch's rows recurses once per row.
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION cte_max_recursion_depth = %d", seedBatchRows+1)); err != nil {
		return err
	}
	if b.items, err = b.calibrate(ctx, conn); err != nil {
		return fmt.Errorf("size the documents: %w", err)
	}
	for first := int64(1); first <= b.rows; first += seedBatchRows {
		last := min(first+seedBatchRows-1, b.rows)
		for _, typed := range []bool{false, true} {
			q := fmt.Sprintf("INSERT INTO %s.%s WITH RECURSIVE s(i) AS (SELECT %d UNION ALL SELECT i + 1 FROM s WHERE i < %d) "+
				"SELECT i, %s FROM s WHERE %s", db, table, first, last, docExpr(typed, b.items), typedRow(typed, b.cfg.TypedPct))
			if _, err := conn.ExecContext(ctx, q); err != nil {
				return err
			}
		}
	}
	// Only the typed documents print numbers with two decimals ending in 0:
	// DECIMAL(12,2) amounts; a double never prints a trailing 0 but in N.0.
	return b.SrcDB.QueryRowContext(ctx, "SELECT SUM(LENGTH(CAST(j AS CHAR))), SUM(JSON_TYPE(j->'$.account') = 'UNSIGNED INTEGER'), "+
		"SUM(JSON_TYPE(j->'$.account') = 'UNSIGNED INTEGER' AND CAST(j AS CHAR) REGEXP '[.][0-9]0[],}]') FROM "+db+"."+table).
		Scan(&b.bytes, &b.typedDocs, &b.zeroDocs)
}

// calibrate returns the line items per document that bring the text of
// 500 sample documents to about -doc-bytes on average.
func (b *bench) calibrate(ctx context.Context, conn *sql.Conn) (int, error) {
	avg := func(items int) (float64, error) {
		var v float64
		err := conn.QueryRowContext(ctx, fmt.Sprintf("WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 500) "+
			"SELECT AVG(LENGTH(CAST(%s AS CHAR))) FROM s", docExpr(true, items))).Scan(&v)
		return v, err
	}
	base, err := avg(0)
	if err != nil {
		return 0, err
	}
	const probe = 8
	withItems, err := avg(probe)
	if err != nil {
		return 0, err
	}
	perItem := (withItems - base) / probe
	return max(0, int(math.Round((float64(b.cfg.DocBytes)-base)/perItem))), nil
}

// typedRow is the condition, on the row number i, of the rows whose documents
// hold typed scalars (typed) or not: typedPct of every hundred, spread out.
func typedRow(typed bool, typedPct int) string {
	op := "<"
	if !typed {
		op = ">="
	}
	return fmt.Sprintf("(i * 37) %% 100 %s %d", op, typedPct)
}

// docExpr is the SQL of row i's document: an order as an application stores
// one, with a customer, an address, tags and about items line items (one
// fewer to one more, by row). A typed document holds its amounts as
// DECIMAL(12,2), its dates as DATE and DATETIME and its account as UNSIGNED,
// as server functions make them; an untyped one holds the same as doubles,
// strings and a signed integer, which its text tells.
func docExpr(typed bool, items int) string {
	amount := func(x string) string { return "((" + x + ") / 100e0)" }
	created := "DATE_FORMAT(TIMESTAMP'2026-01-01 00:00:00' + INTERVAL i SECOND, '%Y-%m-%d %H:%i:%s')"
	due := "DATE_FORMAT(DATE'2026-01-01' + INTERVAL i % 365 DAY, '%Y-%m-%d')"
	account := "i"
	if typed {
		amount = func(x string) string { return "CAST((" + x + ") / 100 AS DECIMAL(12,2))" }
		created = "CAST(TIMESTAMP'2026-01-01 00:00:00' + INTERVAL i SECOND AS DATETIME)"
		due = "(DATE'2026-01-01' + INTERVAL i % 365 DAY)"
		account = "CAST(i AS UNSIGNED)"
	}
	ks := make([]string, items+2)
	for k := range ks {
		ks[k] = fmt.Sprint(k)
	}
	lineItems := "(SELECT JSON_ARRAYAGG(JSON_OBJECT(" +
		"'sku', CONCAT('SKU-', LPAD(i % 1000, 4, '0'), '-', k), " +
		"'qty', 1 + (i + k) % 9, " +
		"'price', " + amount("(i * (k + 7)) % 100000") + ", " +
		"'discount', ((i + k) % 20) / 100e0, " +
		"'gift', CAST(IF((i + k) % 4 = 0, 'true', 'false') AS JSON), " +
		"'attrs', JSON_OBJECT('color', ELT(1 + (i + k) % 4, 'red', 'green', 'blue', 'black'), 'size', ELT(1 + (i + k) % 3, 'S', 'M', 'L'))))" +
		" FROM JSON_TABLE('[" + strings.Join(ks, ",") + "]', '$[*]' COLUMNS(k INT PATH '$')) AS it" +
		fmt.Sprintf(" WHERE k < %d + i %% 3 - 1)", items)
	if items == 0 {
		lineItems = "JSON_ARRAY()"
	}
	return "JSON_OBJECT(" +
		"'id', i, " +
		"'kind', ELT(1 + i % 4, 'order', 'refund', 'invoice', 'quote'), " +
		"'account', " + account + ", " +
		"'customer', JSON_OBJECT('id', (i * 13) % 100000, 'name', CONCAT('Customer ', i % 9973), " +
		"'email', CONCAT('c', i % 9973, '@example.com'), 'vip', CAST(IF(i % 5 = 0, 'true', 'false') AS JSON), " +
		"'score', (i % 1000) / 8e0, 'address', JSON_OBJECT('street', CONCAT(i % 500, ' Main Street'), " +
		"'city', ELT(1 + i % 5, 'Lyon', 'Oslo', 'Porto', 'Quito', 'Turku'), 'zip', LPAD(i % 100000, 5, '0'), " +
		"'geo', JSON_ARRAY((i % 180) - 90 + 0.5e0, (i % 360) - 180 + 0.25e0))), " +
		"'tags', JSON_ARRAY(CONCAT('t', i % 7), CONCAT('t', i % 11), CONCAT('t', i % 13)), " +
		"'total', " + amount("i % 1000000") + ", " +
		"'created', " + created + ", " +
		"'due', " + due + ", " +
		"'paid', CAST(IF(i % 3 = 0, 'true', 'false') AS JSON), " +
		"'items', " + lineItems + ")"
}
