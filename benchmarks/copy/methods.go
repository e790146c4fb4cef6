package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/rowlift/rowlift/internal/sandbox"
)

// scan is (a): a Go client selects every row in PK order and discards it; the
// ceiling on how fast the source hands out the table.
func (b *bench) scan(ctx context.Context, m *meter) error {
	if err := m.start(); err != nil {
		return err
	}
	t := b.shape
	rows, err := b.SrcDB.QueryContext(ctx, fmt.Sprintf("SELECT %s FROM %s.%s ORDER BY %s",
		strings.Join(t.Columns, ", "), sourceDB, t.Name, strings.Join(t.Key, ", ")))
	if err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	defer rows.Close()
	vals := make([]sql.RawBytes, len(t.Columns))
	dest := make([]any, len(vals))
	for i := range vals {
		dest[i] = &vals[i]
	}
	var n, size int64
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return fmt.Errorf("scan: %w", err)
		}
		n++
		for _, v := range vals {
			size += int64(len(v))
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	if err := m.stop(); err != nil {
		return err
	}
	if n != b.cfg.Rows || size != b.rowBytes {
		return fmt.Errorf("scan read %d rows of %d value bytes, want %d rows of %d", n, size, b.cfg.Rows, b.rowBytes)
	}
	return nil
}

// loadTarget is (b): the same rows, generated here, go into an empty copy on the
// target with one LOAD DATA LOCAL INFILE; the ceiling on how fast the target takes
// them in.
func (b *bench) loadTarget(ctx context.Context, m *meter) error {
	const db = "bench_load"
	if err := b.resetTarget(ctx, db); err != nil {
		return err
	}
	if _, err := b.TgtDB.ExecContext(ctx, fmt.Sprintf(b.shape.DDL, db)); err != nil {
		return fmt.Errorf("create %s.%s: %w", db, b.shape.Name, err)
	}
	if err := m.start(); err != nil {
		return err
	}
	if err := b.shape.Load(ctx, b.TgtDB, db, 1, b.cfg.Rows); err != nil {
		return err
	}
	if err := m.stop(); err != nil {
		return err
	}
	return b.checkCount(ctx, db, b.cfg.Rows)
}

// dumpProgs names the dump and client programs of a flavor, as (c) prints them.
type dumpProgs struct{ dump, client string }

func (p dumpProgs) pipe() string { return p.dump + " | " + p.client }

// dumpTools are the programs (c) runs on each flavor: the servers' own.
var dumpTools = map[sandbox.Flavor]dumpProgs{
	sandbox.MariaDB: {"mariadb-dump", "mariadb"},
	sandbox.MySQL:   {"mysqldump", "mysql"},
}

// dumpPipe is (c): the source flavor's dump of the source table piped into its
// client on the target, the usual way to copy a table by hand. The client CPU is
// that of the dump and the client.
func (b *bench) dumpPipe(ctx context.Context, m *meter) error {
	const db = "bench_dump"
	if err := b.resetTarget(ctx, db); err != nil {
		return err
	}
	args := []string{"-h127.0.0.1", fmt.Sprintf("-P%d", b.Source.Port), "-uroot", "--single-transaction", "--skip-lock-tables"}
	if b.cfg.Flavor == sandbox.MySQL {
		// By default a MySQL dump carries the source's GTIDs into GTID_PURGED with
		// the binlog off, which the second run's restore refuses and which would
		// spare the restore the binlog every other method writes.
		args = append(args, "--set-gtid-purged=OFF")
	}
	dump, err := b.Source.Tool(ctx, sandbox.Dump, append(args, sourceDB, b.shape.Name)...)
	if err != nil {
		return err
	}
	client, err := b.Target.Tool(ctx, sandbox.Client, "-h127.0.0.1", fmt.Sprintf("-P%d", b.Target.Port), "-uroot", db)
	if err != nil {
		return err
	}
	var dumpErr, clientErr bytes.Buffer
	dump.Stderr, client.Stderr, client.Stdout = &dumpErr, &clientErr, &clientErr
	// The pipe's ends belong to the two programs only once both have started, so a
	// client that fails ends the dump (on a broken pipe) instead of leaving it blocked.
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("pipe %s: %w", dumpTools[b.cfg.Flavor].pipe(), err)
	}
	dump.Stdout, client.Stdin = w, r
	if err := m.start(); err != nil {
		return errors.Join(err, r.Close(), w.Close())
	}
	err = errors.Join(client.Start(), dump.Start())
	r.Close()
	w.Close()
	if client.Process != nil {
		err = errors.Join(err, client.Wait())
	}
	if dump.Process != nil {
		err = errors.Join(err, dump.Wait())
	}
	if err != nil {
		return fmt.Errorf("%s | %s: %w\n%s%s", dump, client, err, dumpErr.String(), clientErr.String())
	}
	if err := m.stop(); err != nil {
		return err
	}
	m.s.ClientCPUS = cpuSeconds(dump) + cpuSeconds(client)
	return b.checkCount(ctx, db, b.cfg.Rows)
}

// cpuSeconds is the user and system CPU time of an exited command.
func cpuSeconds(cmd *exec.Cmd) float64 {
	return (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
}
