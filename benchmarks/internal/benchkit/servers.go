package benchkit

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/rowlift/rowlift/internal/sandbox"
)

// ServerConfig is what the benchmarks let a user set on both servers.
type ServerConfig struct {
	// Flavor is the kind of every server of a run, so a result on MySQL puts
	// rowlift beside MySQL's own tools and replication.
	Flavor      sandbox.Flavor `json:"flavor"`
	BufferPool  string         `json:"buffer_pool"`
	LogFileSize string         `json:"log_file_size"`
	Flush       int            `json:"flush"`
}

// RegisterFlags adds -flavor, -buffer-pool, -log-file-size and -flush to fs.
func (c *ServerConfig) RegisterFlags(fs *flag.FlagSet) {
	c.Flavor = sandbox.MariaDB
	fs.Func("flavor", `server flavor of every server: "mariadb" or "mysql" (default "mariadb")`, func(v string) error {
		switch f := sandbox.Flavor(v); f {
		case sandbox.MariaDB, sandbox.MySQL:
			c.Flavor = f
			return nil
		}
		return fmt.Errorf("want %q or %q", sandbox.MariaDB, sandbox.MySQL)
	})
	fs.StringVar(&c.BufferPool, "buffer-pool", "1G", "innodb_buffer_pool_size of both servers")
	fs.StringVar(&c.LogFileSize, "log-file-size", "512M", "innodb_log_file_size of both servers (innodb_redo_log_capacity on MySQL)")
	fs.IntVar(&c.Flush, "flush", 1, "innodb_flush_log_at_trx_commit of both servers (1 = durable)")
}

// Options are the sandbox options of both servers of a benchmark: the data fits
// in the buffer pool, and every method commits with the same durability.
func (c ServerConfig) Options() sandbox.Options {
	args := []string{
		"--innodb-buffer-pool-size=" + c.BufferPool,
		fmt.Sprintf("--innodb-flush-log-at-trx-commit=%d", c.Flush),
		"--local-infile=ON",
	}
	if c.Flavor == sandbox.MySQL {
		// MySQL 9 refuses innodb_log_file_size; its redo log is sized as a whole.
		args = append(args, "--innodb-redo-log-capacity="+c.LogFileSize)
	} else {
		args = append(args, "--innodb-log-file-size="+c.LogFileSize, "--innodb-buffer-pool-size-max="+c.BufferPool)
	}
	// A root of its own: servers kept with -keep outlive this process, and test runs
	// reap orphaned servers under the default root.
	return sandbox.Options{Flavor: c.Flavor, Root: filepath.Join(os.TempDir(), "rowlift-bench"), Args: args}
}

// Settings is the memory and redo log settings as every printed table shows
// them, under the flavor's own name for the redo log's size.
func (c ServerConfig) Settings() string {
	if c.Flavor == sandbox.MySQL {
		return fmt.Sprintf("buffer_pool=%s redo_log_capacity=%s", c.BufferPool, c.LogFileSize)
	}
	return fmt.Sprintf("buffer_pool=%s log_file_size=%s", c.BufferPool, c.LogFileSize)
}

// ResultPath is the default JSON result path of the benchmark result called
// name: benchmarks/results/<name>.json, with "-mysql" before the extension on
// MySQL, so a MySQL run does not overwrite the MariaDB result beside it.
func (c ServerConfig) ResultPath(name string) string {
	if c.Flavor == sandbox.MySQL {
		name += "-mysql"
	}
	return filepath.Join("benchmarks", "results", name+".json")
}

// Quiesce waits until every server has flushed its dirty pages down to maxDirty
// (at most two minutes each), so a measurement does not include the background
// writes of the one before it. maxDirty leaves room for what keeps writing: a
// running workflow commits its position every second even when idle.
func Quiesce(ctx context.Context, maxDirty int, dbs ...*sql.DB) error {
	for _, db := range dbs {
		var pct string
		if err := db.QueryRowContext(ctx, "SELECT @@innodb_max_dirty_pages_pct").Scan(&pct); err != nil {
			return fmt.Errorf("quiesce: %w", err)
		}
		if _, err := db.ExecContext(ctx, "SET GLOBAL innodb_max_dirty_pages_pct = 0"); err != nil {
			return fmt.Errorf("quiesce: %w", err)
		}
		if err := waitClean(ctx, db, maxDirty, 2*time.Minute); err != nil {
			return err
		}
		if _, err := db.ExecContext(ctx, "SET GLOBAL innodb_max_dirty_pages_pct = "+pct); err != nil {
			return fmt.Errorf("quiesce: %w", err)
		}
	}
	return nil
}

// waitClean polls until the buffer pool has at most maxDirty dirty pages or
// timeout has passed.
func waitClean(ctx context.Context, db *sql.DB, maxDirty int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var name string
		var dirty int
		if err := db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'").Scan(&name, &dirty); err != nil {
			return fmt.Errorf("quiesce: %w", err)
		}
		if dirty <= maxDirty || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
