package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// bigBinlogBytes is how much the slow-start test writes to one binlog file:
// at least 600 MB (15 s to read at the test's 40 MB/s, longer than the 10 s read
// timeout the streamer had), below the 1 GiB max_binlog_size, so it stays one
// file.
const bigBinlogBytes = 600_000_000

// fastSourceArgs make a source write its binlog without syncing, so a
// binlog of hundreds of megabytes takes seconds.
var fastSourceArgs = []string{"--sync-binlog=0", "--innodb-flush-log-at-trx-commit=0"}

// fillBinlog writes rows of 1 MiB to a BLACKHOLE table (logged, not stored)
// until the source's current binlog file holds bigBinlogBytes, and checks
// that it is still one file.
func fillBinlog(t *testing.T, db *sql.DB, flavor sandbox.Flavor) string {
	t.Helper()
	var maxSize int64
	require.NoError(t, db.QueryRow("SELECT @@max_binlog_size").Scan(&maxSize))
	require.Greater(t, maxSize, int64(bigBinlogBytes), "max_binlog_size must let one file hold the test's binlog")
	if flavor == sandbox.MariaDB {
		// Debian's MariaDB builds BLACKHOLE as a plugin; MySQL has it built in.
		if _, err := db.Exec("INSTALL SONAME 'ha_blackhole'"); err != nil && !strings.Contains(err.Error(), "already") {
			require.NoError(t, err)
		}
	}
	sandboxtest.Exec(t, db, "CREATE TABLE w.filler (id INT PRIMARY KEY, b LONGBLOB) ENGINE=BLACKHOLE")
	for i := 0; ; i++ {
		file, size := currentBinlog(t, db)
		if size >= bigBinlogBytes {
			return file
		}
		sandboxtest.Exec(t, db, fmt.Sprintf("INSERT INTO w.filler SELECT %d * 100 + i, REPEAT(CHAR(97 + i %% 26), 1048576) "+
			"FROM (WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 50) SELECT i FROM s) AS seq", i))
	}
}

// currentBinlog returns the source's last binlog file and its size.
func currentBinlog(t *testing.T, db *sql.DB) (string, int64) {
	t.Helper()
	rows, err := db.Query("SHOW BINARY LOGS")
	require.NoError(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	var name string
	var size int64
	for rows.Next() {
		vals := []any{&name, &size}
		for len(vals) < len(cols) {
			vals = append(vals, new(any))
		}
		require.NoError(t, rows.Scan(vals...))
	}
	require.NoError(t, rows.Err())
	return name, size
}

// slowReads makes the server's reads from disk slow, as on a machine whose
// disk is saturated: its binlog leaves the page cache and the server process
// goes into a blkio cgroup that reads bytesPerSecond from the binlog's disk.
// The server is really slow for every reader of its files; the client is
// untouched. It needs root (cgroup v1 blkio, as on the test machines) and
// fails the test otherwise. The returned function lifts the limit.
func slowReads(t *testing.T, server *sandbox.Server, binlog string, bytesPerSecond int64) (lift func()) {
	t.Helper()
	path := filepath.Join(server.DataDir, binlog)
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	// Dirty pages cannot be dropped: write them first.
	require.NoError(t, f.Sync())
	require.NoError(t, unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED))
	var st unix.Stat_t
	require.NoError(t, unix.Stat(path, &st))
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	// Limits apply to whole disks: a partition's limit goes to its disk.
	if _, err := os.Stat("/sys/dev/block/" + dev + "/partition"); err == nil {
		parent, err := os.ReadFile("/sys/dev/block/" + dev + "/../dev")
		require.NoError(t, err)
		dev = strings.TrimSpace(string(parent))
	}
	root := "/sys/fs/cgroup/blkio"
	group := filepath.Join(root, fmt.Sprintf("rowlift-test-%d", server.Port))
	require.NoError(t, os.Mkdir(group, 0o755), "the slow-disk test needs root and cgroup v1 blkio at %s", root)
	pid := strconv.Itoa(server.Pid())
	write := func(file, value string) {
		require.NoError(t, os.WriteFile(file, []byte(value), 0o644), "%s", file)
	}
	write(filepath.Join(group, "blkio.throttle.read_bps_device"), fmt.Sprintf("%s %d", dev, bytesPerSecond))
	write(filepath.Join(group, "cgroup.procs"), pid)
	var once sync.Once
	lift = func() {
		once.Do(func() {
			write(filepath.Join(root, "cgroup.procs"), pid)
			require.NoError(t, os.Remove(group))
		})
	}
	t.Cleanup(lift)
	return lift
}

// streamOpens counts the streams the streamer has opened so far.
func (e *env) streamOpens() int { return strings.Count(e.streamer.logText(), `"stream started"`) }

// TestSlowBinlogStartIsWaitedFor: a stream that starts at the end of a 600 MB
// binlog file on a source whose disk reads are slow waits while the server
// locates its start position (reading the file takes about 15 s, longer than
// the 10 s read timeout the streamer had, and MariaDB sends nothing
// meanwhile): the status says so, the stream is opened once and never
// restarted, and once located the writes made meanwhile arrive and the target
// matches the source.
func TestSlowBinlogStartIsWaitedFor(t *testing.T) {
	sandboxtest.EachFlavor(t, testSlowBinlogStartIsWaitedFor)
}

func testSlowBinlogStartIsWaitedFor(t *testing.T, flavor sandbox.Flavor) {
	// The source's binlog on a disk, whose reads slowReads can throttle.
	e := newEnvOf(t, sandbox.Options{Flavor: flavor, Args: fastSourceArgs, Root: sandbox.DiskRoot()}, sandbox.Options{Flavor: flavor})
	e.sourceExec("CREATE DATABASE w", "CREATE TABLE w.t (id INT PRIMARY KEY, v VARCHAR(40))", "CREATE TABLE w.u (id INT PRIMARY KEY)",
		"INSERT INTO w.t SELECT i, LEFT(SHA2(i, 256), 40) FROM (WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 1000) SELECT i FROM s) AS seq")
	filled := time.Now()
	file := fillBinlog(t, e.srcDB, flavor)
	t.Logf("%s holds %d bytes (%s)", file, bigBinlogBytes, time.Since(filled).Round(time.Millisecond))
	e.startStreamer()
	e.startApplier()
	_, ctl, _ := e.startCoordinator()
	e.start(e.workflow("slow", "w", "t"))
	e.waitState("slow", state.Running, time.Minute)
	e.waitCaughtUp("slow", time.Minute)

	// The applier stops with the workflow at the end of the big file, as a
	// reverse workflow waits after a switch; writes go on meanwhile.
	e.applier.stop()
	e.waitFor("the binlog dump to end", 30*time.Second, func() (bool, string) {
		n := count(t, e.srcDB, "information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
		return n == 0, fmt.Sprintf("%d dump threads", n)
	})
	e.sourceExec("INSERT INTO w.t VALUES (1001, 'while stopped')", "UPDATE w.t SET v = 'changed' WHERE id = 7", "DELETE FROM w.t WHERE id = 9")
	opens := e.streamOpens()

	// The stream resumes right after the filler: its dump makes the server
	// read the whole file to find the position, at 40 MB/s.
	lift := slowReads(t, e.src, file, 40<<20)
	started := time.Now()
	e.applier.restart()
	var waiting string
	e.waitFor("the status to say the source locates the start in "+file, time.Minute, func() (bool, string) {
		st := get(t, ctl, "slow")
		waiting = st.GetWaiting()
		return strings.Contains(waiting, "source is locating GTID") && strings.Contains(waiting, "in binlog "+file), fmt.Sprintf("%v", st)
	})
	t.Logf("status: %s", waiting)
	require.Contains(t, waiting, "nothing to do")
	require.Zero(t, get(t, ctl, "slow").GetStreams()[0].GetRetrying(), "a stream that waits is not retrying")
	e.sourceExec("INSERT INTO w.t VALUES (1002, 'during the scan')")
	// Creating a workflow probes the binlog grant with a dump at the source's
	// position, in the same big file: the server is as slow to locate it,
	// and the probe takes a dump it did not refuse for the grant it checks.
	_, err := ctl.CreateWorkflow(context.Background(), &rowliftv1.CreateWorkflowRequest{Spec: e.workflow("probe", "w", "u")})
	require.NoError(t, err, "a workflow created while the source scans a large binlog file")
	e.waitFor("the located stream to deliver", 5*time.Minute, func() (bool, string) {
		var n int
		err := e.dstDB.QueryRow("SELECT COUNT(*) FROM w.t WHERE id IN (1001, 1002)").Scan(&n)
		return err == nil && n == 2, fmt.Sprintf("%v %d; status %v", err, n, get(t, ctl, "slow"))
	})
	located := time.Since(started)
	lift()
	t.Logf("the slowed source located the start and the stream delivered after %s", located.Round(time.Second))
	e.waitCaughtUp("slow", time.Minute)
	e.identical("w", "t")
	e.waitFor("the status to stop saying the source locates", time.Minute, func() (bool, string) {
		st := get(t, ctl, "slow")
		return st.GetWaiting() == "", st.GetWaiting()
	})
	require.Equal(t, opens+1, e.streamOpens(), "the stream is opened once and never restarted")
	require.NotContains(t, e.applier.logText(), "i/o timeout")
}

// TestDeadBinlogDumpIsReopened: a source that stops answering (its process
// stopped) after the stream runs is found dead by the missing heartbeats, the
// stream ends with a message that says so, and once the server runs again the
// stream reopens and the target catches up.
func TestDeadBinlogDumpIsReopened(t *testing.T) {
	sandboxtest.EachFlavor(t, testDeadBinlogDumpIsReopened)
}

func testDeadBinlogDumpIsReopened(t *testing.T, flavor sandbox.Flavor) {
	e := newEnvWith(t, sandbox.Options{Flavor: flavor})
	e.sourceExec("CREATE DATABASE w", "CREATE TABLE w.t (id INT PRIMARY KEY, v VARCHAR(40))", "CREATE TABLE w.u (id INT PRIMARY KEY)", "INSERT INTO w.t VALUES (1, 'a')")
	e.startStreamer()
	e.startApplier()
	e.start(e.workflow("dead", "w", "t"))
	e.waitState("dead", state.Running, time.Minute)
	e.sourceExec("INSERT INTO w.t VALUES (2, 'b')")
	e.waitCaughtUp("dead", time.Minute)
	require.Equal(t, 1, e.streamOpens())

	pid := e.src.Pid()
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	e.waitFor("the streamer to find the dump dead", time.Minute, func() (bool, string) {
		log := e.streamer.logText()
		return strings.Contains(log, "binlog dump is dead"), sandbox.Tail(log, 5)
	})
	require.Contains(t, e.streamer.logText(), "not even a heartbeat")
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))

	e.waitFor("the stream to reopen", time.Minute, func() (bool, string) {
		return e.streamOpens() == 2, sandbox.Tail(e.streamer.logText(), 5)
	})
	e.sourceExec("INSERT INTO w.t VALUES (3, 'after')")
	e.waitCaughtUp("dead", time.Minute)
	e.identical("w", "t")
}
