package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
	"github.com/rowlift/rowlift/internal/dbconn"
)

const (
	// db holds the tables on the source and, under the same name, on every target.
	db = "bench"
	// seedBatch is rows per seed INSERT statement, each its own transaction.
	seedBatch = 1000
)

// tableName is the name of the i-th table, from 1.
func tableName(i int) string { return fmt.Sprintf("sbtest%d", i) }

// tableNames are the names of every table.
func (b *bench) tableNames() []string {
	out := make([]string, b.cfg.Tables)
	for i := range out {
		out[i] = tableName(i + 1)
	}
	return out
}

// seed creates the tables and fills them, logged: the replicas get them by
// replication and the rowlift targets by their copy. It records the source's
// position after the seed, which every target is brought to before the backlog.
func (b *bench) seed(ctx context.Context) error {
	start := time.Now()
	if _, err := b.srcDB.ExecContext(ctx, "CREATE DATABASE "+db); err != nil {
		return fmt.Errorf("seed: create database %s: %w", db, err)
	}
	g := benchkit.NewSbtestGen(b.cfg.Seed, 1, b.cfg.Rows)
	for t := 1; t <= b.cfg.Tables; t++ {
		if _, err := b.srcDB.ExecContext(ctx, benchkit.SbtestCreate(db, tableName(t))); err != nil {
			return fmt.Errorf("seed: create %s.%s: %w", db, tableName(t), err)
		}
		for first := int64(1); first <= b.cfg.Rows; first += seedBatch {
			last := min(first+seedBatch-1, b.cfg.Rows)
			args := make([]any, 0, 4*(last-first+1))
			for id := first; id <= last; id++ {
				args = append(args, id, g.ID(), g.C(), g.Pad())
			}
			q := "INSERT INTO " + db + "." + tableName(t) + " (id, k, c, pad) VALUES " +
				strings.Repeat("(?, ?, ?, ?), ", int(last-first)) + "(?, ?, ?, ?)"
			if _, err := b.srcDB.ExecContext(ctx, q, args...); err != nil {
				return fmt.Errorf("seed %s.%s rows %d..%d: %w", db, tableName(t), first, last, err)
			}
		}
	}
	var err error
	if b.seedPos, err = b.sourcePosition(ctx); err != nil {
		return err
	}
	progress("seeded %d tables of %d rows in %.1f s, source at %s", b.cfg.Tables, b.cfg.Rows, time.Since(start).Seconds(), b.seedPos)
	return nil
}

// sourcePosition is the GTID set of everything the source has logged.
func (b *bench) sourcePosition(ctx context.Context) (string, error) {
	pos, err := dbconn.Position(ctx, b.srcDB)
	if err != nil {
		return "", fmt.Errorf("source position: %w", err)
	}
	return pos, nil
}

// loadResult is the backlog as the source took it from one connection.
type loadResult struct {
	Transactions int64   `json:"transactions"`
	WallS        float64 `json:"wall_s"`
	PerS         float64 `json:"per_s"`
	StartGTID    string  `json:"start_gtid"`
	EndGTID      string  `json:"end_gtid"`
}

// writeBacklog runs -k transactions on the source from one connection while no
// target replays, and returns the source's position after the last one. Each
// transaction is sysbench oltp_write_only's: UPDATE k = k + 1 by PK (k is
// indexed), UPDATE c by PK, then DELETE of a key and INSERT of the same key,
// each statement on a table and key of its own drawn at random. The statements
// go with their values in them (what the driver's interpolation would send) and
// are kept, joined by ';', in b.backlog for the client floor to replay.
func (b *bench) writeBacklog(ctx context.Context) (loadResult, error) {
	r := loadResult{Transactions: b.cfg.K, StartGTID: b.seedPos}
	progress("writing %d transactions on the source from one connection", b.cfg.K)
	conn, err := b.srcDB.Conn(ctx)
	if err != nil {
		return r, fmt.Errorf("backlog: %w", err)
	}
	defer conn.Close()
	g := benchkit.NewSbtestGen(b.cfg.Seed, 2, b.cfg.Rows)
	// table draws a table; the generated values are digits, safe to quote as they are.
	table := func() string { return db + "." + tableName(1+g.Rand.IntN(b.cfg.Tables)) }
	b.backlog = make([]string, 0, b.cfg.K)
	start := time.Now()
	for n := int64(0); n < b.cfg.K; n++ {
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return r, fmt.Errorf("backlog transaction %d: %w", n, err)
		}
		idx, nonIdx, del := table(), table(), table()
		delID := g.ID()
		steps := []string{
			fmt.Sprintf("UPDATE %s SET k = k + 1 WHERE id = %d", idx, g.ID()),
			fmt.Sprintf("UPDATE %s SET c = '%s' WHERE id = %d", nonIdx, g.C(), g.ID()),
			fmt.Sprintf("DELETE FROM %s WHERE id = %d", del, delID),
			fmt.Sprintf("INSERT INTO %s (id, k, c, pad) VALUES (%d, %d, '%s', '%s')", del, delID, g.ID(), g.C(), g.Pad()),
		}
		for _, q := range steps {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				_ = tx.Rollback()
				return r, fmt.Errorf("backlog transaction %d: %s: %w", n, q, err)
			}
		}
		if err := tx.Commit(); err != nil {
			return r, fmt.Errorf("backlog transaction %d: commit: %w", n, err)
		}
		b.backlog = append(b.backlog, strings.Join(steps, ";"))
		if n+1 == b.cfg.SlowK && b.cfg.Slow != "" {
			if b.slowEnd, err = b.sourcePosition(ctx); err != nil {
				return r, err
			}
		}
	}
	r.WallS = time.Since(start).Seconds()
	r.PerS = float64(r.Transactions) / r.WallS
	if r.EndGTID, err = b.sourcePosition(ctx); err != nil {
		return r, err
	}
	progress("  %.2f s, %.0f transactions/s; source at %s", r.WallS, r.PerS, r.EndGTID)
	return r, nil
}
