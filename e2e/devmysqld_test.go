package e2e

import (
	"bufio"
	"bytes"
	"database/sql"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
)

// TestDevMysqldCtrlC starts `rowlift dev mysqld`, uses the DSN it prints, sends
// SIGINT as Ctrl-C would, and checks the server and its datadir are gone. What
// it does before the DSN (a minute or more on a first run) is said on stderr,
// and stdout holds the server's details alone, for a script to read.
func TestDevMysqldCtrlC(t *testing.T) {
	cmd := exec.Command(rowliftBin, "dev", "mysqld", "--arg=--max-connections=77")
	var stderr bytes.Buffer
	cmd.Stderr = io.MultiWriter(os.Stderr, &stderr)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	info := map[string]string{}
	field := regexp.MustCompile(`^\s+(\w+):\s+(.*)$`)
	lines := bufio.NewScanner(stdout)
	var printed []string
	for lines.Scan() && !strings.HasPrefix(lines.Text(), "Press Ctrl-C") {
		printed = append(printed, lines.Text())
		if m := field.FindStringSubmatch(lines.Text()); m != nil {
			info[m[1]] = m[2]
		}
	}
	require.NotEmpty(t, printed, "nothing on stdout")
	require.Regexp(t, `(?i)mariadb|mysql`, printed[0], "stdout starts with the server's version, no progress line")
	require.Len(t, printed, 1+len(info), "stdout is the version and the server's details: %q", printed)
	require.NotEmpty(t, info["dsn"], "no DSN printed")
	require.NotContains(t, info["dsn"], ":@", "DSN must not carry an empty password field")

	db, err := sql.Open("mysql", info["dsn"])
	require.NoError(t, err)
	defer db.Close()
	var maxConn int
	require.NoError(t, db.QueryRow("SELECT @@max_connections").Scan(&maxConn))
	require.Equal(t, 77, maxConn, "--arg reaches the server")

	var serverPid int
	_, err = fmt.Sscan(info["pid"], &serverPid)
	require.NoError(t, err)

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	for lines.Scan() {
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	select {
	case err := <-waitErr:
		require.NoError(t, err, "Ctrl-C is a clean exit")
	case <-time.After(time.Minute):
		t.Fatal("rowlift dev mysqld did not exit after SIGINT")
	}
	require.Error(t, syscall.Kill(serverPid, 0), "server %d still running", serverPid)
	require.True(t, strings.HasPrefix(stderr.String(), "starting a throwaway server (the first run on this machine initializes a datadir, a minute or two) ...\n"),
		"stderr says what happens before the DSN: %q", stderr.String())
	_, err = os.Stat(info["datadir"])
	require.True(t, os.IsNotExist(err), "datadir %s left behind", info["datadir"])
}
