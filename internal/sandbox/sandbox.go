// Package sandbox starts throwaway MariaDB and MySQL (8.4, 9.x) servers for tests,
// benchmarks and the demo: each with its own datadir, port, socket and server ID,
// binlog set up the way rowlift requires (ROW, FULL image, FULL row metadata, GTID),
// and a small buffer pool. Instances are copied from a template datadir that is
// initialized once per server version, so starting one takes well under a second
// (MariaDB) or about two (MySQL).
package sandbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Flavor is the kind of server a sandbox runs.
type Flavor string

// The flavors a sandbox can run. MySQL is used only when asked for, because the
// machine's mysqld is often MariaDB's under another name.
const (
	MariaDB Flavor = "mariadb"
	MySQL   Flavor = "mysql"
)

// FlavorEnv names the environment variable that selects the flavor when Options
// leaves it empty, so a whole test run can be pointed at MySQL.
const FlavorEnv = "ROWLIFT_TEST_FLAVOR"

// ErrNoServer means no server binary of the requested flavor is installed; the fix
// is `make setup`.
var ErrNoServer = errors.New("no database server binary found")

// Options configure a sandbox. The zero value starts a MariaDB server (or the flavor
// named by $ROWLIFT_TEST_FLAVOR) under the system temp dir.
type Options struct {
	// Flavor to run; empty means $ROWLIFT_TEST_FLAVOR, or MariaDB.
	Flavor Flavor
	// Root is the directory that holds instance directories and templates;
	// empty means DefaultRoot(). Keep it short: the unix socket path lives
	// under it and is limited to about 100 bytes.
	Root string
	// ServerID of the instance; zero derives a unique one from the port.
	ServerID uint32
	// Args are extra server options, appended after the defaults so they win
	// (for example "--innodb-flush-log-at-trx-commit=1").
	Args []string
}

// Server is one running sandbox instance.
type Server struct {
	Flavor   Flavor
	Version  string
	Dir      string // instance directory: datadir, socket, logs
	DataDir  string
	Socket   string
	Port     int
	ServerID uint32

	prog program
	args []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the current process has exited
}

const (
	startTimeout = 60 * time.Second
	stopTimeout  = 60 * time.Second
	// templateFormat is bumped whenever the template's contents change, so stale
	// cached templates are not reused.
	templateFormat = "3"
)

// Start initializes (or reuses) the template datadir, copies it into a new instance
// directory and starts a server on a free port. It returns once the server accepts
// connections.
func Start(ctx context.Context, opts Options) (*Server, error) {
	flavor, err := resolveFlavor(opts.Flavor)
	if err != nil {
		return nil, err
	}
	prog, version, err := findProgram(flavor)
	if err != nil {
		return nil, err
	}
	root := opts.Root
	if root == "" {
		root = DefaultRoot()
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("sandbox root: %w", err)
	}
	reapOrphans(root)
	template, err := ensureTemplate(ctx, root, flavor, prog, version)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(root, "inst-")
	if err != nil {
		return nil, fmt.Errorf("sandbox instance dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("sandbox owner file: %w", err)
	}
	s := &Server{
		Flavor:  flavor,
		Version: version,
		Dir:     dir,
		DataDir: filepath.Join(dir, "data"),
		Socket:  filepath.Join(dir, "mysqld.sock"),
		prog:    prog,
	}
	if err := copyDir(template, s.DataDir); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("copy template datadir: %w", err)
	}
	if err := os.Mkdir(s.TmpDir(), 0o750); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("sandbox tmpdir: %w", err)
	}
	// A free port can be taken between our probe and the server's bind; try again
	// with another one when that happens.
	for attempt := 0; ; attempt++ {
		port, err := FreePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s.Port = port
		s.ServerID = opts.ServerID
		if s.ServerID == 0 {
			s.ServerID = uint32(port)
		}
		s.args = append(serverArgs(flavor, s), opts.Args...)
		err = s.start(ctx)
		if err == nil {
			return s, nil
		}
		if attempt < 3 && strings.Contains(s.ErrorLog(), "Address already in use") {
			continue
		}
		os.RemoveAll(dir)
		return nil, err
	}
}

// TmpDir is the server's own temporary directory. Servers must not share one: a
// starting server deletes every "#sql" file it finds there as left over from a
// crash, including the temporary tables of servers running next to it, whose
// queries then fail or crash.
func (s *Server) TmpDir() string { return filepath.Join(s.Dir, "tmp") }

// DSN returns a go-sql-driver DSN for root over TCP to the given database (may be
// empty). The sandbox's root has no password.
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("root@tcp(%s)/%s", s.Addr(), db)
}

// Addr is the server's host:port.
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
}

// Pid is the pid of the running server process, or 0 when it is not running.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.exited() {
		return 0
	}
	return s.cmd.Process.Pid
}

// ErrorLog returns the server's error log, for failure reports.
func (s *Server) ErrorLog() string {
	b, err := os.ReadFile(filepath.Join(s.Dir, "error.log"))
	if err != nil {
		return fmt.Sprintf("(no error log: %v)", err)
	}
	return string(b)
}

// Stop shuts the server down cleanly (SIGTERM), and kills it if it has not exited
// after a minute. The datadir is kept, so Restart can bring it back.
func (s *Server) Stop() error {
	return s.signalAndWait(syscall.SIGTERM, stopTimeout)
}

// Kill kills the server with SIGKILL, as a crash would, and waits for it to exit.
// The datadir is kept, so Restart runs crash recovery on it.
func (s *Server) Kill() error {
	return s.signalAndWait(syscall.SIGKILL, stopTimeout)
}

// Restart starts the server again on the same datadir and port.
func (s *Server) Restart(ctx context.Context) error {
	if s.Pid() != 0 {
		return fmt.Errorf("restart %s: server is still running", s.Dir)
	}
	return s.start(ctx)
}

// Remove kills the server and deletes its instance directory. It does not shut down
// cleanly, since the data goes anyway: a clean MySQL shutdown takes over a second.
func (s *Server) Remove() error {
	stopErr := s.Kill()
	if err := os.RemoveAll(s.Dir); err != nil {
		return errors.Join(stopErr, fmt.Errorf("remove %s: %w", s.Dir, err))
	}
	return stopErr
}

func (s *Server) start(ctx context.Context) error {
	// Not CommandContext: the server outlives the context that starts it.
	cmd, err := s.prog.command(context.Background(), s.args...)
	if err != nil {
		return err
	}
	// Own process group: a Ctrl-C at the terminal reaches us, not the server, and we
	// shut it down in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.prog.path, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	if err := os.WriteFile(filepath.Join(s.Dir, serverPidFile), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		_ = s.Kill()
		return fmt.Errorf("write pid file: %w", err)
	}
	if err := waitReady(ctx, s.Socket, done); err != nil {
		_ = s.Kill()
		return fmt.Errorf("server in %s did not start: %w\n%s", s.Dir, err, Tail(s.ErrorLog(), 20))
	}
	return nil
}

// exited reports whether the current process has exited; s.mu must be held.
func (s *Server) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func (s *Server) signalAndWait(sig syscall.Signal, timeout time.Duration) error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal server %d: %w", cmd.Process.Pid, err)
	}
	select {
	case <-done:
		return nil
	case <-time.After(timeout):
	}
	_ = cmd.Process.Kill()
	<-done
	return fmt.Errorf("server %d did not stop within %s after %s; killed it", cmd.Process.Pid, timeout, sig)
}

// waitReady polls the unix socket until a query succeeds, the process exits, or the
// context or start timeout ends.
func waitReady(ctx context.Context, socket string, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "unix"
	cfg.Addr = socket
	cfg.Timeout = time.Second
	var lastErr error
	for {
		select {
		case <-exited:
			return errors.New("server process exited")
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), lastErr)
		case <-time.After(20 * time.Millisecond):
		}
		if _, err := os.Stat(socket); err != nil {
			lastErr = err
			continue
		}
		if lastErr = ping(ctx, cfg); lastErr == nil {
			return nil
		}
	}
}

func ping(ctx context.Context, cfg *mysql.Config) error {
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	var one int
	return db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
}

func serverArgs(flavor Flavor, s *Server) []string {
	args := []string{
		"--datadir=" + s.DataDir,
		"--socket=" + s.Socket,
		"--port=" + strconv.Itoa(s.Port),
		"--bind-address=127.0.0.1",
		"--pid-file=" + filepath.Join(s.Dir, "mysqld.pid"),
		"--log-error=" + filepath.Join(s.Dir, "error.log"),
		"--tmpdir=" + s.TmpDir(),
		"--server-id=" + strconv.FormatUint(uint64(s.ServerID), 10),
		"--log-bin=binlog",
		"--binlog-format=ROW",
		"--binlog-row-image=FULL",
		"--binlog-row-metadata=FULL",
		"--innodb-buffer-pool-size=64M",
		redoLogArg(flavor),
		"--skip-name-resolve",
		"--performance-schema=OFF",
		"--max-connections=500",
		// LOAD DATA and SELECT ... INTO OUTFILE anywhere (MySQL refuses to start when
		// its default directory is missing), and LOAD DATA LOCAL allowed (MySQL's
		// default is OFF).
		"--secure-file-priv=",
		"--local-infile=ON",
	}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	switch flavor {
	case MariaDB:
		args = append(args,
			"--gtid-strict-mode=ON",
			"--log-slave-updates=ON",
			// The default reserves a multi-terabyte virtual range for resizing.
			"--innodb-buffer-pool-size-max=256M",
			// Tests and the demo fill tables with recursive CTEs.
			"--max-recursive-iterations=100000000",
		)
	case MySQL:
		args = append(args,
			"--gtid-mode=ON",
			"--enforce-gtid-consistency=ON",
			"--log-replica-updates=ON",
			"--mysqlx=OFF",
			"--cte-max-recursion-depth=100000000",
		)
	}
	return args
}

// redoLogArg keeps the redo log small (48 MB) under each flavor's name for it: MySQL
// 8.0.30 replaced innodb_log_file_size with innodb_redo_log_capacity, and 9.x refuses
// the old name.
func redoLogArg(flavor Flavor) string {
	if flavor == MySQL {
		return "--innodb-redo-log-capacity=48M"
	}
	return "--innodb-log-file-size=48M"
}

func resolveFlavor(f Flavor) (Flavor, error) {
	if f == "" {
		f = Flavor(os.Getenv(FlavorEnv))
	}
	switch f {
	case "", MariaDB:
		return MariaDB, nil
	case MySQL:
		return MySQL, nil
	}
	return "", fmt.Errorf("unknown sandbox flavor %q (want %q or %q)", f, MariaDB, MySQL)
}

// copyDir copies a datadir tree. Datadirs hold only regular files and directories.
func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o750)
		}
		return copyFile(path, target)
	})
}

// copyFile copies one file in the kernel (io.Copy between files uses copy_file_range),
// which matters for MySQL's 140 MB template.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Tail returns the last n lines of a log, for failure reports.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
