package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os/exec"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
)

// scan is (a): a Go client selects every row in PK order and discards it; the
// ceiling on how fast the source hands out the table.
func (b *bench) scan(ctx context.Context, m *meter) error {
	if err := m.start(); err != nil {
		return err
	}
	rows, err := b.SrcDB.QueryContext(ctx, "SELECT id, sig, c FROM "+sourceDB+"."+table+" ORDER BY id, c")
	if err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	defer rows.Close()
	var id, sig, c sql.RawBytes
	var n, size int64
	for rows.Next() {
		if err := rows.Scan(&id, &sig, &c); err != nil {
			return fmt.Errorf("scan: %w", err)
		}
		n++
		size += int64(len(id) + len(sig) + len(c))
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
	if _, err := b.TgtDB.ExecContext(ctx, fmt.Sprintf(benchkit.StressDDL, db)); err != nil {
		return fmt.Errorf("create %s.%s: %w", db, table, err)
	}
	if err := m.start(); err != nil {
		return err
	}
	if err := benchkit.LoadStress(ctx, b.TgtDB, db, 1, b.cfg.Rows); err != nil {
		return err
	}
	if err := m.stop(); err != nil {
		return err
	}
	return b.checkCount(ctx, db, b.cfg.Rows)
}

// dumpPipe is (c): mariadb-dump of the source table piped into the mariadb client
// on the target, the usual way to copy a table by hand. The client CPU is that of
// the shell, the dump and the client.
func (b *bench) dumpPipe(ctx context.Context, m *meter) error {
	const db = "bench_dump"
	dump, err := firstInPath("mariadb-dump", "mysqldump")
	if err != nil {
		return err
	}
	client, err := firstInPath("mariadb", "mysql")
	if err != nil {
		return err
	}
	if err := b.resetTarget(ctx, db); err != nil {
		return err
	}
	script := fmt.Sprintf("set -o pipefail; '%s' --no-defaults -h127.0.0.1 -P%d -uroot --single-transaction --skip-lock-tables %s %s"+
		" | '%s' --no-defaults -h127.0.0.1 -P%d -uroot %s",
		dump, b.Source.Port, sourceDB, table, client, b.Target.Port, db)
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := m.start(); err != nil {
		return err
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w\n%s", script, err, stderr.String())
	}
	if err := m.stop(); err != nil {
		return err
	}
	// The wait status of the shell counts the children it waited for.
	m.s.ClientCPUS = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	return b.checkCount(ctx, db, b.cfg.Rows)
}

func firstInPath(names ...string) (string, error) {
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("none of %v is installed (run `make setup`)", names)
}
