package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
)

// replicaConfig is one setting of MariaDB's parallel replication.
type replicaConfig struct {
	key, name string
	threads   int
	mode      string // slave_parallel_mode; empty for no parallel threads
}

// replicaConfigs are a replica per thread count of -native: with none, the SQL
// thread applies alone; otherwise in optimistic mode (transactions run in
// parallel, and conflicts are rolled back and retried) and in conservative mode
// (only transactions the source group-committed together run in parallel, which
// one source client never produces, but each one's execution overlaps the
// commit of the one before, and the replica group-commits them).
func replicaConfigs(threads []int) []replicaConfig {
	var out []replicaConfig
	for _, n := range threads {
		if n == 0 {
			out = append(out, replicaConfig{"native-0", "MariaDB replica, 0 threads (serial)", 0, ""})
			continue
		}
		for _, mode := range []string{"optimistic", "conservative"} {
			out = append(out, replicaConfig{fmt.Sprintf("native-%d-%s", n, mode), fmt.Sprintf("MariaDB replica, %d threads %s", n, mode), n, mode})
		}
	}
	return out
}

// replica is a MariaDB replica of the source, seeded by replication.
type replica struct {
	b       *bench
	n       *node
	threads int
	mode    string
}

func (r *replica) node() *node { return r.n }

// prepare sets the parallel replication of the replica (allowed only while it
// does not replicate), replicates from the start of the source's binlog up to
// the seeded position, and stops the SQL thread there. The IO thread keeps
// fetching into the relay log.
func (r *replica) prepare(ctx context.Context) error {
	qs := []string{fmt.Sprintf("SET GLOBAL slave_parallel_threads = %d", r.threads)}
	if r.mode != "" {
		qs = append(qs, "SET GLOBAL slave_parallel_mode = '"+r.mode+"'")
	}
	qs = append(qs,
		fmt.Sprintf("CHANGE MASTER TO master_host = '127.0.0.1', master_port = %d, master_user = 'root', master_use_gtid = slave_pos", r.b.source.Port),
		"START SLAVE")
	for _, q := range qs {
		if _, err := r.n.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	conn, err := r.n.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("replica connection: %w", err)
	}
	defer conn.Close()
	if err := r.waitApplied(ctx, conn, r.b.seedPos, setupTimeout); err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, "STOP SLAVE SQL_THREAD"); err != nil {
		return fmt.Errorf("stop the SQL thread: %w", err)
	}
	return nil
}

// waitApplied waits with MASTER_GTID_WAIT until the replica has applied pos,
// for at most timeout.
func (r *replica) waitApplied(ctx context.Context, conn *sql.Conn, pos string, timeout time.Duration) error {
	var res int
	if err := conn.QueryRowContext(ctx, "SELECT MASTER_GTID_WAIT(?, ?)", pos, timeout.Seconds()).Scan(&res); err != nil {
		return fmt.Errorf("MASTER_GTID_WAIT(%s): %w", pos, err)
	}
	if res != 0 {
		st, err := r.status(ctx)
		return errors.Join(fmt.Errorf("replica did not apply %s within %s; SQL thread running: %s, last SQL error: %q, Gtid_Slave_Pos: %s",
			pos, timeout, st["Slave_SQL_Running"], st["Last_SQL_Error"], st["Gtid_Slave_Pos"]), err)
	}
	return nil
}

// waitFetched waits until the IO thread has written the whole backlog into the
// relay log, so the timed replay reads nothing from the source.
func (r *replica) waitFetched(ctx context.Context, end string) error {
	want, err := gomysql.ParseMariadbGTIDSet(end)
	if err != nil {
		return fmt.Errorf("source position %q: %w", end, err)
	}
	deadline := time.Now().Add(setupTimeout)
	for {
		st, err := r.status(ctx)
		if err != nil {
			return err
		}
		got, err := gomysql.ParseMariadbGTIDSet(st["Gtid_IO_Pos"])
		if err != nil {
			return fmt.Errorf("Gtid_IO_Pos %q: %w", st["Gtid_IO_Pos"], err)
		}
		if got.Contain(want) {
			return nil
		}
		if st["Slave_IO_Running"] == "No" || time.Now().After(deadline) {
			return fmt.Errorf("IO thread did not fetch up to %s (running: %s, at %s, last IO error: %q)",
				end, st["Slave_IO_Running"], st["Gtid_IO_Pos"], st["Last_IO_Error"])
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// replay starts the SQL thread and waits until it has applied end.
func (r *replica) replay(ctx context.Context, end string) error {
	conn, err := r.n.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("replica connection: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "START SLAVE SQL_THREAD"); err != nil {
		return fmt.Errorf("start the SQL thread: %w", err)
	}
	timeout := setupTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	return r.waitApplied(ctx, conn, end, timeout)
}

// afterReplay has nothing to stop: the SQL thread idles. Replication runs in
// the server, so it uses no CPU outside it.
func (r *replica) afterReplay() (float64, error) { return 0, nil }

func (r *replica) close() error { return r.n.close() }

// status is SHOW SLAVE STATUS by column.
func (r *replica) status(ctx context.Context) (map[string]string, error) {
	rows, err := r.n.db.QueryContext(ctx, "SHOW SLAVE STATUS")
	if err != nil {
		return nil, fmt.Errorf("replica status: %w", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, fmt.Errorf("replica status: %w", err)
	}
	if !rows.Next() {
		return nil, fmt.Errorf("replica status: not a replica (%v)", rows.Err())
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return nil, fmt.Errorf("replica status: %w", err)
	}
	out := make(map[string]string, len(cols))
	for i, c := range cols {
		out[c] = vals[i].String
	}
	return out, rows.Err()
}
