package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/sandbox"
)

// replication is how a flavor's own replication is driven. The procedure is
// the same on both (replicate the seed, stop applying, let the IO thread fetch
// the backlog, time the catch-up); the statements and status columns differ.
type replication struct {
	product string
	// threadsVar is the server variable of the parallel appliers.
	threadsVar string
	// changeSource points the replica at the source, given its port.
	changeSource string
	// start starts replicating; stopApply and startApply stop and start the
	// SQL thread alone; status shows the replica's state.
	start, stopApply, startApply, status string
	// detach stops replicating and forgets the source.
	detach []string
	// wait returns 0 once the replica has applied the GTID set of its first
	// argument, waiting at most its second argument's seconds.
	wait string
	// ioRunning, sqlRunning and applied are status columns; fetched are those
	// whose merged GTID sets cover what the IO thread has fetched.
	ioRunning, sqlRunning, applied string
	fetched                        []string
}

// replications are the flavors' replication, by the flavor of the servers.
var replications = map[sandbox.Flavor]replication{
	sandbox.MariaDB: {
		product:      "MariaDB",
		threadsVar:   "slave_parallel_threads",
		changeSource: "CHANGE MASTER TO master_host = '127.0.0.1', master_port = %d, master_user = 'root', master_use_gtid = slave_pos",
		start:        "START SLAVE",
		stopApply:    "STOP SLAVE SQL_THREAD",
		startApply:   "START SLAVE SQL_THREAD",
		detach:       []string{"STOP SLAVE", "RESET SLAVE ALL"},
		status:       "SHOW SLAVE STATUS",
		wait:         "MASTER_GTID_WAIT",
		ioRunning:    "Slave_IO_Running",
		sqlRunning:   "Slave_SQL_Running",
		applied:      "Gtid_Slave_Pos",
		fetched:      []string{"Gtid_IO_Pos"},
	},
	sandbox.MySQL: {
		product:    "MySQL",
		threadsVar: "replica_parallel_workers",
		// The sandbox's root has no password, so caching_sha2_password needs
		// neither TLS nor the source's public key.
		changeSource: "CHANGE REPLICATION SOURCE TO SOURCE_HOST = '127.0.0.1', SOURCE_PORT = %d, SOURCE_USER = 'root', SOURCE_AUTO_POSITION = 1",
		start:        "START REPLICA",
		stopApply:    "STOP REPLICA SQL_THREAD",
		startApply:   "START REPLICA SQL_THREAD",
		detach:       []string{"STOP REPLICA", "RESET REPLICA ALL"},
		status:       "SHOW REPLICA STATUS",
		wait:         "WAIT_FOR_EXECUTED_GTID_SET",
		ioRunning:    "Replica_IO_Running",
		sqlRunning:   "Replica_SQL_Running",
		applied:      "Executed_Gtid_Set",
		// Retrieved_Gtid_Set is what the IO thread fetched since the replica
		// started replicating; with what it executed before, all it holds.
		fetched: []string{"Retrieved_Gtid_Set", "Executed_Gtid_Set"},
	},
}

// serialTag marks the name of the replica with no parallel appliers, which the
// summary compares with the client floor.
const serialTag = "(serial)"

// replicaConfig is one setting of a flavor's parallel replication.
type replicaConfig struct {
	key, name string
	threads   int
	// settings are the SET GLOBAL assignments besides the thread count.
	settings []string
}

// replicaConfigs are a replica per thread count of -native.
//
// MariaDB: with none, the SQL thread applies alone; otherwise in optimistic
// mode (transactions run in parallel, and conflicts are rolled back and
// retried) and in conservative mode (only transactions the source
// group-committed together run in parallel, which one source client never
// produces, but each one's execution overlaps the commit of the one before,
// and the replica group-commits them).
//
// MySQL (8.4, 9.x): the workers run transactions in parallel as the source's
// writesets allow (MySQL tracks dependencies by writeset only since 8.4), and
// commit in the source's order (replica_preserve_commit_order), as rowlift's
// default mode does.
func replicaConfigs(flavor sandbox.Flavor, threads []int) []replicaConfig {
	var out []replicaConfig
	for _, n := range threads {
		switch {
		case flavor == sandbox.MySQL && n == 0:
			out = append(out, replicaConfig{"native-0", "MySQL replica, 0 workers " + serialTag, 0, nil})
		case flavor == sandbox.MySQL:
			out = append(out, replicaConfig{fmt.Sprintf("native-%d", n), fmt.Sprintf("MySQL replica, %d workers, commit order", n), n,
				[]string{"replica_preserve_commit_order = ON"}})
		case n == 0:
			out = append(out, replicaConfig{"native-0", "MariaDB replica, 0 threads " + serialTag, 0, nil})
		default:
			for _, mode := range []string{"optimistic", "conservative"} {
				out = append(out, replicaConfig{fmt.Sprintf("native-%d-%s", n, mode), fmt.Sprintf("MariaDB replica, %d threads %s", n, mode), n,
					[]string{"slave_parallel_mode = '" + mode + "'"}})
			}
		}
	}
	return out
}

// replica is a replica of the source of the servers' flavor, seeded by
// replication.
type replica struct {
	b   *bench
	n   *node
	rpl replication
	cfg replicaConfig
}

func (r *replica) node() *node { return r.n }

// prepare sets the parallel replication of the replica (allowed only while it
// does not replicate), replicates from the start of the source's binlog up to
// the seeded position, and stops the SQL thread there. The IO thread keeps
// fetching into the relay log.
func (r *replica) prepare(ctx context.Context) error {
	qs := []string{fmt.Sprintf("SET GLOBAL %s = %d", r.rpl.threadsVar, r.cfg.threads)}
	for _, s := range r.cfg.settings {
		qs = append(qs, "SET GLOBAL "+s)
	}
	qs = append(qs, fmt.Sprintf(r.rpl.changeSource, r.b.source.Port), r.rpl.start)
	for _, q := range qs {
		if _, err := r.n.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	if err := r.checkThreads(ctx); err != nil {
		return err
	}
	conn, err := r.n.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("replica connection: %w", err)
	}
	defer conn.Close()
	if err := r.waitApplied(ctx, conn, r.b.seedPos, setupTimeout); err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, r.rpl.stopApply); err != nil {
		return fmt.Errorf("%s: %w", r.rpl.stopApply, err)
	}
	return nil
}

// checkThreads notes in the configuration's name when the server runs another
// number of appliers than asked for (MySQL 9 raises replica_parallel_workers=0
// to 1), so the table says what was measured.
func (r *replica) checkThreads(ctx context.Context) error {
	var got int
	if err := r.n.db.QueryRowContext(ctx, "SELECT @@GLOBAL."+r.rpl.threadsVar).Scan(&got); err != nil {
		return fmt.Errorf("read %s: %w", r.rpl.threadsVar, err)
	}
	if got != r.cfg.threads {
		r.n.name += fmt.Sprintf(" [server runs %d]", got)
		progress("%s: the server set %s = %d, not %d", r.n.name, r.rpl.threadsVar, got, r.cfg.threads)
	}
	return nil
}

// waitApplied waits until the replica has applied pos, for at most timeout.
func (r *replica) waitApplied(ctx context.Context, conn *sql.Conn, pos string, timeout time.Duration) error {
	var res int
	if err := conn.QueryRowContext(ctx, "SELECT "+r.rpl.wait+"(?, ?)", pos, timeout.Seconds()).Scan(&res); err != nil {
		return fmt.Errorf("%s(%s): %w", r.rpl.wait, pos, err)
	}
	if res != 0 {
		st, err := r.status(ctx)
		return errors.Join(fmt.Errorf("replica did not apply %s within %s; SQL thread running: %s, last SQL error: %q, %s: %s",
			pos, timeout, st[r.rpl.sqlRunning], st["Last_SQL_Error"], r.rpl.applied, st[r.rpl.applied]), err)
	}
	return nil
}

// waitFetched waits until the IO thread has written the whole backlog into the
// relay log, so the timed replay reads nothing from the source.
func (r *replica) waitFetched(ctx context.Context, end string) error {
	deadline := time.Now().Add(setupTimeout)
	for {
		st, err := r.status(ctx)
		if err != nil {
			return err
		}
		var got string
		for _, col := range r.rpl.fetched {
			if got, err = gtid.Merge(got, st[col]); err != nil {
				return fmt.Errorf("%s %q: %w", col, st[col], err)
			}
		}
		fetched, err := gtid.Covers(got, end)
		if err != nil {
			return fmt.Errorf("fetched %q against the source's %q: %w", got, end, err)
		}
		if fetched {
			return nil
		}
		if st[r.rpl.ioRunning] == "No" || time.Now().After(deadline) {
			return fmt.Errorf("IO thread did not fetch up to %s (running: %s, at %s, last IO error: %q)",
				end, st[r.rpl.ioRunning], got, st["Last_IO_Error"])
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
	if _, err := conn.ExecContext(ctx, r.rpl.startApply); err != nil {
		return fmt.Errorf("%s: %w", r.rpl.startApply, err)
	}
	timeout := setupTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	return r.waitApplied(ctx, conn, end, timeout)
}

// afterReplay has nothing to stop: the SQL thread idles. Replication runs in
// the server, so it uses no CPU outside it; its retries are not counted.
func (r *replica) afterReplay() (float64, int64, error) { return 0, 0, nil }

func (r *replica) close() error { return r.n.close() }

// replicaStatus is the replica status by column, GTID sets without MySQL's
// line breaks between UUIDs.
func (r *replica) status(ctx context.Context) (map[string]string, error) {
	rows, err := r.n.db.QueryContext(ctx, r.rpl.status)
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
		out[c] = strings.ReplaceAll(vals[i].String, "\n", "")
	}
	return out, rows.Err()
}
