package benchkit

import (
	"context"
	"crypto/sha1"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
)

// StressTable is the seed's stress_test_pk: sig is the SHA1 of the id and c its
// first 8 characters. StressDDL creates it in the database named by its %s.
const (
	StressTable = "stress_test_pk"
	StressDDL   = "CREATE TABLE %s." + StressTable + ` (
		id bigint NOT NULL AUTO_INCREMENT,
		sig varchar(40),
		c char(8),
		PRIMARY KEY (id, c)
	) ENGINE=InnoDB`
	// seedBatch rows per LOAD DATA statement when seeding.
	seedBatch = 100_000
	// readerName starts the names of the go-sql-driver reader handlers LOAD
	// DATA reads rows from.
	readerName = "rows"
)

// rowReader streams rows first..last as LOAD DATA's default format: tab-separated
// fields, one line per row, each appended by row.
type rowReader struct {
	next, last int64
	row        func(dst []byte, id int64) []byte
	buf        []byte
	off        int
}

func (r *rowReader) Read(p []byte) (int, error) {
	n := copy(r.buf, r.buf[r.off:])
	r.buf, r.off = r.buf[:n], 0
	for len(r.buf) < len(p) && r.next <= r.last {
		r.buf = r.row(r.buf, r.next)
		r.next++
	}
	if len(r.buf) == 0 {
		return 0, io.EOF
	}
	r.off = copy(p, r.buf)
	return r.off, nil
}

// appendRow appends "id\tsig\tc\n" (see StressSig).
func appendRow(dst []byte, id int64) []byte {
	var num [20]byte
	digits := strconv.AppendInt(num[:0], id, 10)
	sig := sigOf(digits)
	dst = append(dst, digits...)
	dst = append(dst, '\t')
	dst = append(dst, sig[:]...)
	dst = append(dst, '\t')
	dst = append(dst, sig[:8]...)
	return append(dst, '\n')
}

// StressSig is the sig of row id, the SHA1 of the id in decimal as the
// server's SHA1(id) computes it; its first 8 characters are c. Writers compute
// it here because MySQL 9.7 has no SHA1().
func StressSig(id int64) string {
	sig := sigOf(strconv.AppendInt(nil, id, 10))
	return string(sig[:])
}

// sigOf is the hex SHA1 of an id's decimal digits.
func sigOf(digits []byte) (sig [40]byte) {
	sum := sha1.Sum(digits)
	hex.Encode(sig[:], sum[:])
	return sig
}

// StressRowBytes is the sum of the value bytes of rows 1..n as text: the id's
// digits, 40 of sig and 8 of c.
func StressRowBytes(n int64) int64 {
	total := 48 * n
	for lo, digits := int64(1), int64(1); lo <= n; lo, digits = lo*10, digits+1 {
		total += (min(n, lo*10-1) - lo + 1) * digits
	}
	return total
}

// Executor runs statements on a pool or on one connection.
type Executor interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// LoadStress loads rows first..last into db.stress_test_pk with one LOAD DATA
// LOCAL INFILE statement.
func LoadStress(ctx context.Context, ex Executor, db string, first, last int64) error {
	return Stress.Load(ctx, ex, db, first, last)
}

// SeedStress creates db (if missing) and db.stress_test_pk on pool's server and
// loads rows 1..rows in batches, unlogged (the binlog has no use for seed rows),
// then runs ANALYZE TABLE and checks the count.
func SeedStress(ctx context.Context, pool *sql.DB, db string, rows int64) error {
	return Stress.Seed(ctx, pool, db, rows)
}

// CheckCount fails unless table (db.name) holds exactly want rows.
func CheckCount(ctx context.Context, pool *sql.DB, table string, want int64) error {
	var got int64
	if err := pool.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table).Scan(&got); err != nil {
		return fmt.Errorf("count %s: %w", table, err)
	}
	if got != want {
		return fmt.Errorf("ROW COUNT MISMATCH: %s has %d rows, the source has %d", table, got, want)
	}
	return nil
}
