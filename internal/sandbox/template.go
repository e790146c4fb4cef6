package sandbox

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// templateSetup runs once on a new template so every instance starts with the same
// accounts: root without a password over TCP from 127.0.0.1, and no host-named
// accounts that --skip-name-resolve would warn about.
var templateSetup = []string{
	"CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'",
	"GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION",
}

// ensureTemplate returns the directory of an initialized datadir for this server
// binary and version, creating it on first use. Concurrent test processes may race
// to create it; each builds in its own directory and the first rename wins.
func ensureTemplate(ctx context.Context, root string, flavor Flavor, prog program, version string) (string, error) {
	sum := sha256.Sum256([]byte(strings.Join([]string{templateFormat, string(flavor), prog.path, version}, "\x00")))
	final := filepath.Join(root, "template-"+hex.EncodeToString(sum[:6]))
	if _, err := os.Stat(filepath.Join(final, "data")); err == nil {
		return filepath.Join(final, "data"), nil
	}
	build, err := os.MkdirTemp(root, "build-")
	if err != nil {
		return "", fmt.Errorf("template build dir: %w", err)
	}
	defer os.RemoveAll(build)
	if err := os.WriteFile(filepath.Join(build, ownerFile), []byte(fmt.Sprint(os.Getpid())), 0o644); err != nil {
		return "", fmt.Errorf("template owner file: %w", err)
	}
	data := filepath.Join(build, "data")
	if err := initDatadir(ctx, flavor, prog, data, filepath.Join(build, "init.log")); err != nil {
		return "", err
	}
	if flavor == MariaDB { // MySQL ran templateSetup at initialization
		if err := setupTemplate(ctx, flavor, prog, build); err != nil {
			return "", err
		}
	}
	// MySQL names each server by the UUID in auto.cnf, created at first start when
	// missing, and its GTIDs carry that UUID: instances copied from one template must
	// not share it, or their GTID sets and replication between them mix up.
	if err := os.Remove(filepath.Join(data, "auto.cnf")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("template: %w", err)
	}
	tmp := filepath.Join(build, "t")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(data, filepath.Join(tmp, "data")); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		if _, statErr := os.Stat(filepath.Join(final, "data")); statErr == nil {
			return filepath.Join(final, "data"), nil // another process won the race
		}
		return "", fmt.Errorf("install template %s: %w", final, err)
	}
	return filepath.Join(final, "data"), nil
}

// initDatadir initializes data with the flavor's bootstrap, whose server
// gets a tmpdir of its own beside data: a server starting up deletes every
// #sql* file in its tmpdir, so bootstraps sharing /tmp (the default) delete
// the temporary tables of each other's system table setup (ERROR 1017 "Can't
// find file: '/tmp/#sql-temptable-...MAI'", seen with eight template builds at
// once) and of any other server there.
func initDatadir(ctx context.Context, flavor Flavor, prog program, data, logPath string) error {
	tmpdir := filepath.Join(filepath.Dir(data), "tmp")
	if err := os.MkdirAll(tmpdir, 0o750); err != nil {
		return fmt.Errorf("template tmpdir: %w", err)
	}
	var cmd *exec.Cmd
	switch flavor {
	case MariaDB:
		installDB := filepath.Join(filepath.Dir(prog.path), "mariadb-install-db")
		if _, err := os.Stat(installDB); err != nil {
			if installDB, err = exec.LookPath("mariadb-install-db"); err != nil {
				return fmt.Errorf("%w: mariadb-install-db not found: run `make setup`", ErrNoServer)
			}
		}
		args := []string{"--no-defaults", "--datadir=" + data, "--auth-root-authentication-method=normal",
			"--skip-test-db", "--skip-name-resolve", "--tmpdir=" + tmpdir, redoLogArg(flavor)}
		if os.Geteuid() == 0 {
			args = append(args, "--user=root")
		}
		cmd = exec.CommandContext(ctx, installDB, args...)
	case MySQL:
		// --initialize creates only localhost accounts, so templateSetup is all the
		// setup it needs, and --init-file runs it then: no extra start and shutdown.
		initFile := filepath.Join(filepath.Dir(data), "init.sql")
		if err := os.WriteFile(initFile, []byte(strings.Join(templateSetup, ";\n")+";\n"), 0o644); err != nil {
			return fmt.Errorf("template init file: %w", err)
		}
		args := []string{"--initialize-insecure", "--init-file=" + initFile, "--datadir=" + data,
			"--tmpdir=" + tmpdir, redoLogArg(flavor), "--log-error=" + logPath}
		if os.Geteuid() == 0 {
			args = append(args, "--user=root")
		}
		var err error
		if cmd, err = prog.command(ctx, args...); err != nil {
			return err
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		log, _ := os.ReadFile(logPath)
		return fmt.Errorf("initialize datadir with %s: %w\n%s%s%s", cmd.Path, err, errorLines(string(out), 20), Tail(string(out), 20), Tail(string(log), 20))
	}
	return nil
}

// setupTemplate starts a fresh MariaDB datadir once, without binlog or networking,
// runs templateSetup and shuts it down cleanly.
func setupTemplate(ctx context.Context, flavor Flavor, prog program, build string) error {
	s := &Server{Flavor: flavor, Dir: build, DataDir: filepath.Join(build, "data"),
		Socket: filepath.Join(build, "mysqld.sock"), prog: prog}
	s.args = []string{
		"--datadir=" + s.DataDir,
		"--socket=" + s.Socket,
		"--skip-networking",
		"--skip-log-bin",
		"--pid-file=" + filepath.Join(build, "mysqld.pid"),
		"--log-error=" + filepath.Join(build, "error.log"),
		"--tmpdir=" + s.TmpDir(),
		redoLogArg(flavor),
	}
	if err := os.MkdirAll(s.TmpDir(), 0o750); err != nil {
		return fmt.Errorf("template tmpdir: %w", err)
	}
	if os.Geteuid() == 0 {
		s.args = append(s.args, "--user=root")
	}
	if err := s.start(ctx); err != nil {
		return fmt.Errorf("start template server: %w", err)
	}
	setupErr := runSetup(ctx, s.Socket)
	if err := s.Stop(); err != nil {
		return errors.Join(setupErr, fmt.Errorf("stop template server: %w", err))
	}
	return setupErr
}

func runSetup(ctx context.Context, socket string) error {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "unix", socket
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	stmts := append([]string{}, templateSetup...)
	rows, err := db.QueryContext(ctx,
		"SELECT user, host FROM mysql.user WHERE host NOT IN ('localhost', '127.0.0.1', '::1', '%')")
	if err != nil {
		return fmt.Errorf("template setup: %w", err)
	}
	for rows.Next() {
		var user, host string
		if err := rows.Scan(&user, &host); err != nil {
			rows.Close()
			return fmt.Errorf("template setup: %w", err)
		}
		stmts = append(stmts, fmt.Sprintf("DROP USER '%s'@'%s'", user, host))
	}
	if err := rows.Close(); err != nil {
		return fmt.Errorf("template setup: %w", err)
	}
	for _, q := range stmts {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("template setup %q: %w", q, err)
		}
	}
	return nil
}

// errorLines are the first n lines of s that name an error, each ending in a
// newline: mariadb-install-db prints the server's own errors before a screen
// of generic advice, which is all a tail of its output would show.
func errorLines(s string, n int) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if n == 0 {
			break
		}
		if strings.Contains(l, "ERROR") {
			b.WriteString(l + "\n")
			n--
		}
	}
	return b.String()
}
