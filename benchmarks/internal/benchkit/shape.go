package benchkit

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// Shape is a table a benchmark generates, loads and reads back: its name, its
// DDL (the database is DDL's %s), its columns in load order, the columns of
// its primary key (the order a copy reads it in), the row generator and the
// value bytes of its rows. Row id of a table of n rows is the same wherever it
// is generated, so a source seeded here and a target loaded here agree.
type Shape struct {
	Name    string
	DDL     string
	Columns []string
	Key     []string
	// Row appends row id as a line of LOAD DATA's default format.
	Row func(dst []byte, id int64) []byte
	// RowBytes is the sum of the value bytes, as text, of rows 1..n.
	RowBytes func(n int64) int64
}

// Stress is the seed's stress_test_pk (see StressDDL).
var Stress = Shape{
	Name:     StressTable,
	DDL:      StressDDL,
	Columns:  []string{"id", "sig", "c"},
	Key:      []string{"id", "c"},
	Row:      appendRow,
	RowBytes: StressRowBytes,
}

// SbtestTable is sysbench's table (oltp_common's sbtest1).
const (
	SbtestTable = "sbtest1"
	// sbtestSeed makes every row of sbtest1 the same in every run.
	sbtestSeed = 0x5b7e57
	// sbtestC and sbtestPad are the groups of 11 random digits of c and pad,
	// joined by '-': 119 and 59 characters.
	sbtestC, sbtestPad = 10, 5
)

// SbtestCreate is sysbench's CREATE TABLE (oltp_common's) of db.table.
func SbtestCreate(db, table string) string {
	return "CREATE TABLE " + db + "." + table + ` (
		id INT NOT NULL AUTO_INCREMENT,
		k INT NOT NULL DEFAULT 0,
		c CHAR(120) NOT NULL DEFAULT '',
		pad CHAR(60) NOT NULL DEFAULT '',
		PRIMARY KEY (id),
		KEY k_1 (k)
	) ENGINE=InnoDB`
}

// Sbtest is sysbench's sbtest1 of rows rows, filled as oltp_common's prepare
// fills it: k a random integer in [1, rows], c 10 and pad 5 groups of 11
// random digits joined by '-'. Each row's values come from a generator seeded
// by the row's id, so any range of rows can be generated on its own.
func Sbtest(rows int64) Shape {
	return Shape{
		Name:    SbtestTable,
		DDL:     SbtestCreate("%s", SbtestTable),
		Columns: []string{"id", "k", "c", "pad"},
		Key:     []string{"id"},
		Row: func(dst []byte, id int64) []byte {
			r := sbtestRand(id)
			dst = strconv.AppendInt(dst, id, 10)
			dst = append(dst, '\t')
			dst = strconv.AppendInt(dst, sbtestK(r, rows), 10)
			dst = append(dst, '\t')
			dst = appendDigitGroups(dst, r, sbtestC)
			dst = append(dst, '\t')
			dst = appendDigitGroups(dst, r, sbtestPad)
			return append(dst, '\n')
		},
		RowBytes: func(n int64) int64 {
			total := n * (sbtestC*12 - 1 + sbtestPad*12 - 1)
			for id := int64(1); id <= n; id++ {
				total += int64(digits(id) + digits(sbtestK(sbtestRand(id), rows)))
			}
			return total
		},
	}
}

func sbtestRand(id int64) *rand.Rand {
	return rand.New(rand.NewPCG(sbtestSeed, uint64(id)))
}

// sbtestK is the first value drawn for a row: k, in [1, rows].
func sbtestK(r *rand.Rand, rows int64) int64 { return 1 + r.Int64N(rows) }

// appendDigitGroups appends groups groups of 11 random digits joined by '-'.
func appendDigitGroups(dst []byte, r *rand.Rand, groups int) []byte {
	for g := range groups {
		if g > 0 {
			dst = append(dst, '-')
		}
		for range 11 {
			dst = append(dst, byte('0'+r.IntN(10)))
		}
	}
	return dst
}

func digits(v int64) int { return len(strconv.FormatInt(v, 10)) }

// Load loads rows first..last into db.<name> with one LOAD DATA LOCAL INFILE
// statement. Loads must not run concurrently: they share the driver's reader
// name.
func (s Shape) Load(ctx context.Context, ex Executor, db string, first, last int64) error {
	mysql.RegisterReaderHandler(readerName, func() io.Reader { return &rowReader{next: first, last: last, row: s.Row} })
	defer mysql.DeregisterReaderHandler(readerName)
	q := fmt.Sprintf(`LOAD DATA LOCAL INFILE 'Reader::%s' INTO TABLE %s.%s FIELDS TERMINATED BY '\t' LINES TERMINATED BY '\n' (%s)`,
		readerName, db, s.Name, strings.Join(s.Columns, ", "))
	if _, err := ex.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("load rows %d..%d into %s.%s: %w", first, last, db, s.Name, err)
	}
	return nil
}

// Seed creates db (if missing) and db.<name> on pool's server and loads rows
// 1..rows in batches, unlogged (the binlog has no use for seed rows), then runs
// ANALYZE TABLE and checks the count.
func (s Shape) Seed(ctx context.Context, pool *sql.DB, db string, rows int64) error {
	conn, err := pool.Conn(ctx)
	if err != nil {
		return fmt.Errorf("seed %s.%s: %w", db, s.Name, err)
	}
	defer conn.Close()
	// Its session does not log: it must not go back to the pool, where later
	// writes would take it and be missing from the binlog.
	defer conn.Raw(func(any) error { return driver.ErrBadConn }) //nolint:errcheck // the error is the point
	for _, q := range []string{"SET SESSION sql_log_bin = 0", "CREATE DATABASE IF NOT EXISTS " + db, fmt.Sprintf(s.DDL, db)} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("seed %s.%s: %s: %w", db, s.Name, q, err)
		}
	}
	for first := int64(1); first <= rows; first += seedBatch {
		if err := s.Load(ctx, conn, db, first, min(first+seedBatch-1, rows)); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
	}
	if _, err := conn.ExecContext(ctx, "ANALYZE TABLE "+db+"."+s.Name); err != nil {
		return fmt.Errorf("seed %s.%s: analyze: %w", db, s.Name, err)
	}
	if err := CheckCount(ctx, pool, db+"."+s.Name, rows); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	return nil
}
