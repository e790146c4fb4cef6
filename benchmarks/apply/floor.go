package main

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
)

// clientFloor is the cheapest way any client can replay the backlog, with no
// rowlift in it: the benchmark sends each source transaction's own statements,
// kept when it wrote the backlog, with a position write and COMMIT, as one
// query on one connection. A tool that applies transactions from outside the
// server does at least this much per transaction, so serial rowlift can come
// near it but not pass it; beside the serial replica, it shows what a client
// costs the target.
type clientFloor struct {
	b *bench
	n *node
	// rpl brings the target to the seeded state by replication, then is cut.
	rpl  *replica
	conn *sql.DB
	cpu0 float64
}

// floorSchema holds the floor's position row, written in every transaction.
const floorSchema = "bench_floor"

// prepare replicates the seed, then makes the target a server of its own, with
// a position table.
func (f *clientFloor) prepare(ctx context.Context) error {
	// Replication only seeds the floor: the applier threads it runs with (which
	// the replica's prepare notes in the name) are not what is timed.
	name := f.n.name
	if err := f.rpl.prepare(ctx); err != nil {
		return err
	}
	f.n.name = name
	for _, q := range append(f.rpl.rpl.detach,
		"CREATE DATABASE "+floorSchema,
		"CREATE TABLE "+floorSchema+".position (id INT PRIMARY KEY, position VARCHAR(255) NOT NULL)") {
		if _, err := f.n.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	var err error
	f.conn, err = sql.Open("mysql", f.n.srv.DSN("")+"?multiStatements=true")
	if err != nil {
		return fmt.Errorf("open %s: %w", f.n.name, err)
	}
	f.conn.SetMaxOpenConns(1)
	return nil
}

func (f *clientFloor) node() *node { return f.n }

// waitFetched has nothing to wait for: the statements are in memory.
func (f *clientFloor) waitFetched(context.Context, string) error { return nil }

// replay sends each transaction as START TRANSACTION, its statements, the
// position write and COMMIT, in one query, waiting for each.
func (f *clientFloor) replay(ctx context.Context, _ string) error {
	f.cpu0 = benchkit.SelfCPU()
	for i, stmts := range f.b.backlog {
		pos := fmt.Sprintf("'%s-%d'", f.b.seedPos, i)
		q := "START TRANSACTION;" + stmts + ";INSERT INTO " + floorSchema + ".position VALUES (1, " + pos +
			") ON DUPLICATE KEY UPDATE position = " + pos + ";COMMIT"
		if _, err := f.conn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("transaction %d: %w", i, err)
		}
	}
	return nil
}

// afterReplay returns the CPU the benchmark itself used to send the backlog;
// one connection never rolls back.
func (f *clientFloor) afterReplay() (float64, int64, error) {
	return benchkit.SelfCPU() - f.cpu0, 0, nil
}

func (f *clientFloor) close() error {
	if f.conn != nil {
		f.conn.Close()
	}
	return f.n.close()
}
