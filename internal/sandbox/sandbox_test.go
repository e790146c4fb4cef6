package sandbox_test

import (
	"context"
	"database/sql"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
)

const (
	defaultWait = 10 * time.Second
	pollEvery   = 20 * time.Millisecond
)

func TestTwoServersAtOnce(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		a := sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
		b := sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
		require.NotEqual(t, a.Port, b.Port)
		require.NotEqual(t, a.DataDir, b.DataDir)

		var idA, idB uint32
		dbA, dbB := sandboxtest.Open(t, a, ""), sandboxtest.Open(t, b, "")
		require.NoError(t, dbA.QueryRow("SELECT @@server_id").Scan(&idA))
		require.NoError(t, dbB.QueryRow("SELECT @@server_id").Scan(&idB))
		require.Equal(t, a.ServerID, idA)
		require.Equal(t, b.ServerID, idB)
		require.NotEqual(t, idA, idB, "replication needs distinct server IDs")
		if flavor == sandbox.MySQL {
			var uuidA, uuidB string
			require.NoError(t, dbA.QueryRow("SELECT @@server_uuid").Scan(&uuidA))
			require.NoError(t, dbB.QueryRow("SELECT @@server_uuid").Scan(&uuidB))
			require.NotEqual(t, uuidA, uuidB, "servers copied from one template need their own UUID: GTIDs carry it")
		}
	})
}

// TestStartingServerKeepsOthersTempTables: each server has its own tmpdir, so a
// server that starts (and clears "#sql" files it takes for leftovers) does not
// delete the temporary tables of another server (an explicit one here; queries
// of information_schema use them too, and crashed the server when they went).
func TestStartingServerKeepsOthersTempTables(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		a := sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
		db := sandboxtest.Open(t, a, "")
		var tmpdir string
		require.NoError(t, db.QueryRow("SELECT @@tmpdir").Scan(&tmpdir))
		require.Equal(t, a.TmpDir(), tmpdir)
		conn, err := db.Conn(context.Background())
		require.NoError(t, err)
		defer conn.Close()
		_, err = conn.ExecContext(context.Background(), "CREATE DATABASE d")
		require.NoError(t, err)
		// An engine whose temporary tables are files in tmpdir (InnoDB's are not).
		engine := map[sandbox.Flavor]string{sandbox.MariaDB: "Aria", sandbox.MySQL: "MyISAM"}[flavor]
		_, err = conn.ExecContext(context.Background(), "CREATE TEMPORARY TABLE d.keep (i INT) ENGINE="+engine)
		require.NoError(t, err)
		files, err := filepath.Glob(filepath.Join(tmpdir, "#sql*"))
		require.NoError(t, err)
		require.NotEmpty(t, files, "the temporary table has a file in the server's tmpdir")

		sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
		for _, f := range files {
			_, err := os.Stat(f)
			require.NoError(t, err, "a starting server deleted another server's temporary table")
		}
		_, err = conn.ExecContext(context.Background(), "INSERT INTO d.keep VALUES (2)")
		require.NoError(t, err)
	})
}

func TestBinlogSettings(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		s := sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
		db := sandboxtest.Open(t, s, "")
		want := map[string]string{
			"log_bin":             "ON",
			"binlog_format":       "ROW",
			"binlog_row_image":    "FULL",
			"binlog_row_metadata": "FULL",
			"secure_file_priv":    "",
			"local_infile":        "ON",
		}
		switch flavor {
		case sandbox.MariaDB:
			want["gtid_strict_mode"] = "ON"
			want["log_slave_updates"] = "ON"
		case sandbox.MySQL:
			want["gtid_mode"] = "ON"
			want["enforce_gtid_consistency"] = "ON"
			want["log_replica_updates"] = "ON"
		}
		for name, value := range want {
			var got sql.NullString
			require.NoError(t, db.QueryRow("SHOW GLOBAL VARIABLES WHERE Variable_name = ?", name).Scan(new(string), &got), name)
			require.Equal(t, value, got.String, name)
		}
	})
}

func TestGTIDAdvancesAfterWrite(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		s := sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
		db := sandboxtest.Open(t, s, "")
		// MariaDB: domain-server_id-sequence; MySQL: server_uuid:first-last.
		query, source := "SELECT @@GLOBAL.gtid_binlog_pos", "0-"+strconv.FormatUint(uint64(s.ServerID), 10)+"-"
		if flavor == sandbox.MySQL {
			var uuid string
			require.NoError(t, db.QueryRow("SELECT @@server_uuid").Scan(&uuid))
			query, source = "SELECT @@GLOBAL.gtid_executed", uuid+":1-"
		}
		pos := func() string {
			var p string
			require.NoError(t, db.QueryRow(query).Scan(&p))
			return p
		}
		require.Equal(t, "", pos(), "a fresh server has an empty binlog")
		sandboxtest.Exec(t, db, "CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY)")
		before := pos()
		sandboxtest.Exec(t, db, "INSERT INTO d.t VALUES (1)")
		after := pos()
		require.Equal(t, source+"2", before)
		require.Equal(t, source+"3", after)
	})
}

func TestKillAndRestartKeepsData(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		s := sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
		db := sandboxtest.Open(t, s, "")
		sandboxtest.Exec(t, db, "CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY)", "INSERT INTO d.t VALUES (1), (2)")
		port := s.Port
		pid := s.Pid()
		cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		require.NoError(t, err)
		require.Contains(t, string(cmdline), "--datadir="+s.DataDir, "Pid is the server's own process")
		require.NoError(t, s.Kill())
		require.Zero(t, s.Pid())
		require.Error(t, syscall.Kill(pid, 0), "server process %d survived Kill", pid)
		require.Error(t, db.Ping(), "the killed server still answers")
		require.NoError(t, s.Restart(context.Background()))
		require.Equal(t, port, s.Port)
		var n int
		require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM d.t").Scan(&n))
		require.Equal(t, 2, n, "committed rows survive SIGKILL and crash recovery")
	})
}

func TestRemoveLeavesNothingBehind(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		s, err := sandbox.Start(context.Background(), sandbox.Options{Flavor: flavor})
		require.NoError(t, err)
		pid := s.Pid()
		require.NotZero(t, pid)
		require.NoError(t, s.Remove())
		require.Error(t, syscall.Kill(pid, 0), "server process %d still exists", pid)
		_, err = os.Stat(s.Dir)
		require.True(t, os.IsNotExist(err), "instance dir %s still exists", s.Dir)
	})
}

func TestExtraArgsOverrideDefaults(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		s := sandboxtest.Start(t, sandbox.Options{Flavor: flavor, Args: []string{"--binlog-row-metadata=MINIMAL", "--max-allowed-packet=4M"}})
		var meta string
		var packet int
		require.NoError(t, sandboxtest.Open(t, s, "").QueryRow("SELECT @@binlog_row_metadata, @@max_allowed_packet").Scan(&meta, &packet))
		require.Equal(t, "MINIMAL", meta)
		require.Equal(t, 4<<20, packet)
	})
}

// TestOrphansAreReaped starts a server from a child process that then dies by
// SIGKILL without cleanup, as a test binary killed on timeout would, and checks that
// the next Start kills the orphaned server and removes its directory.
func TestOrphansAreReaped(t *testing.T) {
	if os.Getenv("SANDBOX_ORPHAN_CHILD") == "1" {
		s, err := sandbox.Start(context.Background(), sandbox.Options{
			Flavor: sandbox.Flavor(os.Getenv("SANDBOX_FLAVOR")), Root: os.Getenv("SANDBOX_ROOT")})
		if err != nil {
			os.Stderr.WriteString(err.Error())
			os.Exit(2)
		}
		os.Stdout.WriteString(s.Dir + "\n" + strconv.Itoa(s.Pid()) + "\n")
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		root := shortTempDir(t)
		cmd := exec.Command(os.Args[0], "-test.run=^TestOrphansAreReaped$")
		cmd.Env = append(os.Environ(), "SANDBOX_ORPHAN_CHILD=1", "SANDBOX_ROOT="+root, "SANDBOX_FLAVOR="+string(flavor))
		cmd.Stderr = os.Stderr // the child's failure, if any, shows in the test output
		out, _ := cmd.Output()
		fields := strings.Fields(string(out))
		require.Len(t, fields, 2, "child output: %q", out)
		dir := fields[0]
		pid, err := strconv.Atoi(fields[1])
		require.NoError(t, err)
		require.NoError(t, syscall.Kill(pid, 0), "orphaned server should be running before the reap")

		s := sandboxtest.Start(t, sandbox.Options{Flavor: flavor, Root: root})
		require.NotEqual(t, dir, s.Dir)
		_, err = os.Stat(dir)
		require.True(t, os.IsNotExist(err), "orphan dir %s still exists", dir)
		require.Eventually(t, func() bool { return syscall.Kill(pid, 0) != nil }, defaultWait, pollEvery,
			"orphaned server %d still running", pid)
	})
}

// shortTempDir returns a temp dir with a short path: unix socket paths are limited
// to about 100 bytes and t.TempDir's paths can be longer.
func shortTempDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "rl-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Clean(dir)
}

func TestToolsOfEachFlavor(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		s := sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
		db := sandboxtest.Open(t, s, "")
		sandboxtest.Exec(t, db, "CREATE DATABASE tools", "CREATE TABLE tools.t (id INT PRIMARY KEY)", "INSERT INTO tools.t VALUES (7)")
		ctx := context.Background()
		client, err := s.Tool(ctx, sandbox.Client, "--protocol=socket", "--socket="+s.Socket, "-uroot", "-N", "-e", "SELECT id FROM tools.t")
		require.NoError(t, err)
		out, err := client.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Equal(t, "7", strings.TrimSpace(string(out)))
		dump, err := s.Tool(ctx, sandbox.Dump, "--protocol=socket", "--socket="+s.Socket, "-uroot", "tools", "t")
		require.NoError(t, err)
		out, err = dump.Output()
		require.NoError(t, err)
		require.Regexp(t, "INSERT INTO `t` VALUES\\s*\\(7\\)", string(out))
		files, err := filepath.Glob(filepath.Join(s.DataDir, "binlog.[0-9]*"))
		require.NoError(t, err)
		require.NotEmpty(t, files)
		binlog, err := s.Tool(ctx, sandbox.BinlogDump, files...)
		require.NoError(t, err)
		out, err = binlog.Output()
		require.NoError(t, err)
		require.Contains(t, string(out), "CREATE TABLE tools.t")
	})
}

// TestTemplateBuildKeepsOthersTempFiles: the bootstrap that builds a
// template runs with a tmpdir of its own, so it does not delete the "#sql"
// files of other servers in the system's temp dir, among them the other
// template builds of a fresh machine's first test run (which failed with
// ERROR 1017 "Can't find file: '/tmp/#sql-temptable-...MAI'").
func TestTemplateBuildKeepsOthersTempFiles(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		sentinel := filepath.Join(os.TempDir(), "#sql-rowlift-test-"+strconv.Itoa(os.Getpid())+"-"+string(flavor)+".MAI")
		require.NoError(t, os.WriteFile(sentinel, nil, 0o644))
		t.Cleanup(func() { os.Remove(sentinel) })
		root, err := os.MkdirTemp("", "rt") // short: the socket path lives under it
		require.NoError(t, err)
		t.Cleanup(func() { os.RemoveAll(root) })
		sandboxtest.Start(t, sandbox.Options{Flavor: flavor, Root: root})
		_, err = os.Stat(sentinel)
		require.NoError(t, err, "building the template deleted a #sql file of the system's temp dir")
	})
}
