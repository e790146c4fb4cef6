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
	"sync/atomic"

	"github.com/go-sql-driver/mysql"
	"golang.org/x/sync/errgroup"
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

// SbtestGen draws the values of sysbench's transactions on sbtest tables of
// Rows rows from a seeded generator, so that every run with the same seed
// writes the same rows and transactions, and every benchmark that writes like
// sysbench writes alike.
type SbtestGen struct {
	Rand *rand.Rand
	Rows int64
}

// NewSbtestGen is a generator of values for tables of rows rows; each stream
// of one seed draws a sequence of its own.
func NewSbtestGen(seed, stream uint64, rows int64) *SbtestGen {
	return &SbtestGen{Rand: rand.New(rand.NewPCG(seed, stream)), Rows: rows}
}

// ID is a key in 1..Rows, uniform (k, too, is drawn so).
func (g *SbtestGen) ID() int64 { return sbtestK(g.Rand, g.Rows) }

// C is a value of c: 10 groups of 11 random digits joined by '-', 119
// characters.
func (g *SbtestGen) C() string {
	return string(appendDigitGroups(make([]byte, 0, sbtestC*12), g.Rand, sbtestC))
}

// Pad is a value of pad: 5 groups of 11 random digits joined by '-', 59
// characters.
func (g *SbtestGen) Pad() string {
	return string(appendDigitGroups(make([]byte, 0, sbtestPad*12), g.Rand, sbtestPad))
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

// readers numbers the driver's reader handlers, one per Load, so that loads
// can run at once.
var readers atomic.Int64

// Load loads rows first..last into db.<name> with one LOAD DATA LOCAL INFILE
// statement.
func (s Shape) Load(ctx context.Context, ex Executor, db string, first, last int64) error {
	name := readerName + strconv.FormatInt(readers.Add(1), 10)
	mysql.RegisterReaderHandler(name, func() io.Reader { return &rowReader{next: first, last: last, row: s.Row} })
	defer mysql.DeregisterReaderHandler(name)
	q := fmt.Sprintf(`LOAD DATA LOCAL INFILE 'Reader::%s' INTO TABLE %s.%s FIELDS TERMINATED BY '\t' LINES TERMINATED BY '\n' (%s)`,
		name, db, s.Name, strings.Join(s.Columns, ", "))
	if _, err := ex.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("load rows %d..%d into %s.%s: %w", first, last, db, s.Name, err)
	}
	return nil
}

// Seed creates db (if missing) and db.<name> on pool's server and loads rows
// 1..rows in batches, unlogged (the binlog has no use for seed rows), then runs
// ANALYZE TABLE and checks the count.
func (s Shape) Seed(ctx context.Context, pool *sql.DB, db string, rows int64) error {
	return s.SeedParallel(ctx, pool, db, rows, 1)
}

// SeedParallel is Seed with the batches loaded over conns connections at
// once, for a benchmark whose seed would otherwise take longer than what it
// measures.
func (s Shape) SeedParallel(ctx context.Context, pool *sql.DB, db string, rows int64, conns int) error {
	err := unlogged(ctx, pool, func(conn *sql.Conn) error {
		for _, q := range []string{"CREATE DATABASE IF NOT EXISTS " + db, fmt.Sprintf(s.DDL, db)} {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("seed %s.%s: %w", db, s.Name, err)
	}
	// Each connection takes the next batch until none is left.
	var next atomic.Int64
	next.Store(1)
	g, gctx := errgroup.WithContext(ctx)
	for range max(conns, 1) {
		g.Go(func() error {
			return unlogged(gctx, pool, func(conn *sql.Conn) error {
				for first := next.Add(seedBatch) - seedBatch; first <= rows; first = next.Add(seedBatch) - seedBatch {
					if err := s.Load(gctx, conn, db, first, min(first+seedBatch-1, rows)); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	err = unlogged(ctx, pool, func(conn *sql.Conn) error {
		_, err := conn.ExecContext(ctx, "ANALYZE TABLE "+db+"."+s.Name)
		return err
	})
	if err != nil {
		return fmt.Errorf("seed %s.%s: analyze: %w", db, s.Name, err)
	}
	if err := CheckCount(ctx, pool, db+"."+s.Name, rows); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	return nil
}

// unlogged runs fn on a connection of pool whose session does not log to the
// binlog, then closes the connection rather than returning it to the pool,
// where later writes would take it and be missing from the binlog.
func unlogged(ctx context.Context, pool *sql.DB, fn func(*sql.Conn) error) error {
	conn, err := pool.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	defer conn.Raw(func(any) error { return driver.ErrBadConn }) //nolint:errcheck // the error is the point
	if _, err := conn.ExecContext(ctx, "SET SESSION sql_log_bin = 0"); err != nil {
		return err
	}
	return fn(conn)
}
