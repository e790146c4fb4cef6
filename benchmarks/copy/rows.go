package main

import (
	"context"
	"crypto/sha1"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"
)

// table is the seed's stress_test_pk: sig is the SHA1 of the id and c its first
// 8 characters.
const (
	table    = "stress_test_pk"
	tableDDL = "CREATE TABLE %s." + table + ` (
		id bigint NOT NULL AUTO_INCREMENT,
		sig varchar(40),
		c char(8),
		PRIMARY KEY (id, c)
	) ENGINE=InnoDB`
	sourceDB = "bench"
	// seedBatch rows per LOAD DATA statement when loading the source.
	seedBatch = 100_000
	// readerName is the go-sql-driver reader handler LOAD DATA reads rows from.
	readerName = "rows"
)

// targetDBs are the databases the methods write into on the target, one each.
var targetDBs = []string{"bench_load", "bench_dump", "bench_rowlift"}

// rowReader streams rows first..last as LOAD DATA's default format: tab-separated
// fields, one line per row.
type rowReader struct {
	next, last int64
	buf        []byte
	off        int
}

func (r *rowReader) Read(p []byte) (int, error) {
	n := copy(r.buf, r.buf[r.off:])
	r.buf, r.off = r.buf[:n], 0
	for len(r.buf) < len(p) && r.next <= r.last {
		r.buf = appendRow(r.buf, r.next)
		r.next++
	}
	if len(r.buf) == 0 {
		return 0, io.EOF
	}
	r.off = copy(p, r.buf)
	return r.off, nil
}

// appendRow appends "id\tsig\tc\n" with sig = SHA1 of the id in decimal, as the
// server's SHA1(id) computes it.
func appendRow(dst []byte, id int64) []byte {
	var num [20]byte
	digits := strconv.AppendInt(num[:0], id, 10)
	sum := sha1.Sum(digits)
	var sig [40]byte
	hex.Encode(sig[:], sum[:])
	dst = append(dst, digits...)
	dst = append(dst, '\t')
	dst = append(dst, sig[:]...)
	dst = append(dst, '\t')
	dst = append(dst, sig[:8]...)
	return append(dst, '\n')
}

// rowBytes is the sum of the value bytes of rows 1..n as text: the id's digits,
// 40 of sig and 8 of c. It is the MB in MB/s for every method.
func rowBytes(n int64) int64 {
	total := 48 * n
	for lo, digits := int64(1), int64(1); lo <= n; lo, digits = lo*10, digits+1 {
		total += (min(n, lo*10-1) - lo + 1) * digits
	}
	return total
}

// executor runs statements on a pool or on one connection.
type executor interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// loadRows loads rows first..last into db.stress_test_pk with one LOAD DATA
// LOCAL INFILE statement.
func loadRows(ctx context.Context, ex executor, db string, first, last int64) error {
	mysql.RegisterReaderHandler(readerName, func() io.Reader { return &rowReader{next: first, last: last} })
	defer mysql.DeregisterReaderHandler(readerName)
	q := fmt.Sprintf(`LOAD DATA LOCAL INFILE 'Reader::%s' INTO TABLE %s.%s FIELDS TERMINATED BY '\t' LINES TERMINATED BY '\n' (id, sig, c)`,
		readerName, db, table)
	if _, err := ex.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("load rows %d..%d into %s.%s: %w", first, last, db, table, err)
	}
	return nil
}

// seedSource creates and loads the source table in batches, unlogged (the binlog
// has no use for seed rows), then runs ANALYZE TABLE and checks the count.
func (b *bench) seedSource(ctx context.Context) error {
	start := time.Now()
	conn, err := b.srcDB.Conn(ctx)
	if err != nil {
		return fmt.Errorf("seed source: %w", err)
	}
	defer conn.Close()
	for _, q := range []string{"SET SESSION sql_log_bin = 0", "CREATE DATABASE " + sourceDB, fmt.Sprintf(tableDDL, sourceDB)} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("seed source: %s: %w", q, err)
		}
	}
	for first := int64(1); first <= b.cfg.Rows; first += seedBatch {
		if err := loadRows(ctx, conn, sourceDB, first, min(first+seedBatch-1, b.cfg.Rows)); err != nil {
			return fmt.Errorf("seed source: %w", err)
		}
	}
	if _, err := conn.ExecContext(ctx, "ANALYZE TABLE "+sourceDB+"."+table); err != nil {
		return fmt.Errorf("seed source: analyze: %w", err)
	}
	if err := checkCount(ctx, b.srcDB, sourceDB, b.cfg.Rows); err != nil {
		return fmt.Errorf("seed source: %w", err)
	}
	progress("loaded %d rows (%.1f MB of values) into the source in %.1f s",
		b.cfg.Rows, float64(b.rowBytes)/1e6, time.Since(start).Seconds())
	return nil
}

// checkCount fails unless db.stress_test_pk holds exactly want rows.
func checkCount(ctx context.Context, pool *sql.DB, db string, want int64) error {
	var got int64
	if err := pool.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+db+"."+table).Scan(&got); err != nil {
		return fmt.Errorf("count %s.%s: %w", db, table, err)
	}
	if got != want {
		return fmt.Errorf("ROW COUNT MISMATCH: %s.%s has %d rows, the source has %d", db, table, got, want)
	}
	return nil
}

// resetTarget drops every method's copy on the target, so each method starts from
// an empty server holding only its own database, and creates db.
func (b *bench) resetTarget(ctx context.Context, db string) error {
	for _, name := range targetDBs {
		if _, err := b.tgtDB.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			return fmt.Errorf("reset target: %w", err)
		}
	}
	if _, err := b.tgtDB.ExecContext(ctx, "CREATE DATABASE "+db); err != nil {
		return fmt.Errorf("reset target: %w", err)
	}
	return nil
}
