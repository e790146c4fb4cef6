package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
)

const (
	// heartbeatInterval is how often the heartbeat writer updates the
	// heartbeat row on the source.
	heartbeatInterval = 50 * time.Millisecond
	// loadSeed seeds the writers' values; writer i draws stream i of it.
	loadSeed = 0x11fe
)

// The statements of sysbench's oltp_write_only transaction, with its default
// options (one of each per transaction).
const (
	updateK   = "UPDATE " + db + "." + benchkit.SbtestTable + " SET k = k + 1 WHERE id = ?"
	updateC   = "UPDATE " + db + "." + benchkit.SbtestTable + " SET c = ? WHERE id = ?"
	deleteRow = "DELETE FROM " + db + "." + benchkit.SbtestTable + " WHERE id = ?"
	insertRow = "INSERT INTO " + db + "." + benchkit.SbtestTable + " (id, k, c, pad) VALUES (?, ?, ?, ?)"
	heartbeat = "UPDATE " + db + "." + heartbeatTable + " SET ts_us = ? WHERE id = 1"
)

// txn is one transaction of the load as its writer saw it.
type txn struct {
	// dueUS is when the schedule had it start, Unix µs: its latency counts
	// from there, so a transaction a stall made late counts its wait.
	dueUS int64
	// endUS is when its COMMIT returned, Unix µs.
	endUS int64
	// retries are its tries rolled back by a deadlock or a lock wait timeout.
	retries int
}

// load is sysbench oltp_write_only transactions on the source at a fixed
// rate, on benchkit.Load's shared schedule, beside the heartbeat writer.
type load struct {
	*benchkit.Load
	b *bench
	// txns are every transaction, by writer, each writer's in the order they
	// committed; read after Finish.
	txns [][]txn
	// beats counts the heartbeat updates; read after Finish.
	beats int64
}

// startLoad starts the writers and the heartbeat writer on the source.
func (b *bench) startLoad(ctx context.Context) *load {
	l := &load{b: b, txns: make([][]txn, b.cfg.Threads)}
	l.Load = benchkit.StartLoad(ctx, b.cfg.TPS, b.cfg.Threads, l.write)
	l.Every(heartbeatInterval, l.beat)
	return l
}

// finish stops the writers and the heartbeat writer and returns every
// transaction.
func (l *load) finish() ([]txn, error) {
	if err := l.Finish(); err != nil {
		return nil, err
	}
	var all []txn
	for _, ts := range l.txns {
		all = append(all, ts...)
	}
	return all, nil
}

// write runs writer i's transactions by the schedule, each on its own
// connection, until the load stops.
func (l *load) write(ctx context.Context, i int, w *benchkit.Writer) error {
	conn, err := l.b.SrcDB.Conn(ctx)
	if err != nil {
		return fmt.Errorf("writer %d: %w", i, err)
	}
	defer conn.Close()
	g := benchkit.NewSbtestGen(loadSeed, uint64(i), l.b.cfg.Rows)
	for {
		n, ok, err := w.Next(ctx)
		if !ok {
			return err
		}
		t := txn{dueUS: w.Due(n).UnixMicro()}
		for {
			err := writeOnly(ctx, conn, g)
			if err == nil {
				break
			}
			if !retryable(err) {
				return fmt.Errorf("transaction %d: %w", n, err)
			}
			t.retries++
		}
		t.endUS = time.Now().UnixMicro()
		l.txns[i] = append(l.txns[i], t)
	}
}

// writeOnly runs one oltp_write_only transaction: UPDATE of the indexed k of
// a random id, UPDATE of c of another, then DELETE of a third and INSERT of
// it again with new values, ids uniform over the seeded ones.
func writeOnly(ctx context.Context, conn *sql.Conn, g *benchkit.SbtestGen) (err error) {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	id := g.ID()
	for _, st := range []struct {
		q    string
		args []any
	}{
		{updateK, []any{g.ID()}},
		{updateC, []any{g.C(), g.ID()}},
		{deleteRow, []any{id}},
		{insertRow, []any{id, g.ID(), g.C(), g.Pad()}},
	} {
		if _, err := tx.ExecContext(ctx, st.q, st.args...); err != nil {
			return fmt.Errorf("%s: %w", st.q, err)
		}
	}
	return tx.Commit()
}

// retryable reports whether err rolled its transaction back for a reason
// sysbench also retries: a deadlock or a lock wait timeout.
func retryable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}

// beat updates the heartbeat row to the time now, as pt-heartbeat does every
// heartbeatInterval: the target's copy of the row says how far behind it is,
// whatever rowlift reports.
func (l *load) beat(ctx context.Context) error {
	if _, err := l.b.SrcDB.ExecContext(ctx, heartbeat, time.Now().UnixMicro()); err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	l.beats++
	return nil
}
