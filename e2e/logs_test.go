package e2e

import (
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLogsHideThePassword plants a distinctive password in the source and
// target users' DSNs, runs the streamer, applier and coordinator at debug with
// them, drives a workflow through the CLI, makes requests fail (an unknown
// workflow, a source nobody listens for, a source server that is down, bad
// DSNs, an address in use), and then finds the password in no process's
// output. Every line the roles write is zap's JSON: the MySQL libraries' own
// lines and the error a role stops with go through zap too.
func TestLogsHideThePassword(t *testing.T) {
	const password = "Pl4nted-pw-7Qx"
	e := newEnv(t)
	const user = "'mover'@'127.0.0.1'"
	e.sourceExec("CREATE DATABASE lg", "CREATE TABLE lg.t (id INT PRIMARY KEY, v VARCHAR(20))",
		"INSERT INTO lg.t VALUES (1, 'a'), (2, 'b'), (3, 'c')",
		"CREATE USER "+user+" IDENTIFIED BY '"+password+"'", "GRANT ALL PRIVILEGES ON *.* TO "+user)
	for _, stmt := range []string{"CREATE USER " + user + " IDENTIFIED BY '" + password + "'", "GRANT ALL PRIVILEGES ON *.* TO " + user} {
		_, err := e.dstDB.Exec(stmt)
		require.NoError(t, err)
	}
	dsn := func(addr string) string { return "mover:" + password + "@tcp(" + addr + ")/" }
	debug := []string{"--log-level", "debug", "--log-format", "json"}
	withDebug := func(args ...string) []string { return append(args, debug...) }

	procs := []*proc{
		startProc(t, "streamer", nil, withDebug("streamer", "--listen", e.streamerAddr, "--source-dsn", dsn(e.src.Addr()))...),
		startProc(t, "applier", nil, withDebug("applier", "--target-dsn", dsn(e.dst.Addr()), "--poll-interval", "50ms")...),
	}
	// A streamer whose source server is down: a stream through it fails.
	downAddr := freeAddr(t)
	procs = append(procs, startProc(t, "streamer-down", nil,
		withDebug("streamer", "--listen", downAddr, "--source-dsn", dsn(freeAddr(t)))...))
	// A streamer that cannot listen (the test holds the address) stops with a
	// last log line, in JSON like the others.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	busy := startProc(t, "streamer-busy", nil, withDebug("streamer", "--listen", taken.Addr().String(), "--source-dsn", dsn(e.src.Addr()))...)
	busy.exited(30 * time.Second)
	require.Regexp(t, `"level":"error".*"msg":"stopped","error":"listen on `+taken.Addr().String(), busy.logText())
	procs = append(procs, busy)
	coordAddr := freeAddr(t)
	procs = append(procs, startProc(t, "coordinator", nil,
		withDebug("coordinator", "--listen", coordAddr, "--target", "main="+dsn(e.dst.Addr()))...))

	c := newCLIAt(t, coordAddr)
	var outputs []result
	run := func(args ...string) result {
		r := c.run(args...)
		outputs = append(outputs, r)
		return r
	}
	e.waitFor("the coordinator to answer", 30*time.Second, func() (bool, string) {
		r := run("workflow", "list")
		return r.code == 0, r.stderr
	})
	create := func(name, source string) result {
		return run("workflow", "create", "--name", name, "--source", "main="+source, "--target", "main",
			"--source-database", "lg", "--table", "t", "--start")
	}
	require.Zero(t, create("lg", e.streamerAddr).code)
	require.Zero(t, run("workflow", "watch", "lg", "--until", "running", "--interval", "200ms").code)
	require.Zero(t, run("workflow", "show", "lg").code)
	require.Zero(t, run("workflow", "list").code)

	require.Equal(t, 1, run("workflow", "show", "nosuch").code)
	require.Equal(t, 1, create("nobody", freeAddr(t)).code, "no streamer listens there")
	require.Equal(t, 1, create("down", downAddr).code, "the streamer's source server is down")
	r := run("coordinator", "--listen", freeAddr(t), "--target", "main=mover:"+password+"@tcp(127.0.0.1:1")
	require.Equal(t, 2, r.code, "a DSN with no closing parenthesis")
	r = run("applier", "--target-dsn", "mover:"+password+"@tcp(127.0.0.1:1)/?nosuchparam=1&timeout=x")
	require.NotZero(t, r.code, "a DSN with a bad parameter")
	r = run("streamer", "--source-dsn", dsn(e.src.Addr()), "--log-level", "loud")
	require.Equal(t, 2, r.code)
	require.Equal(t, "rowlift: log level \"loud\": want one of debug, info, warn, error\n", r.stderr)
	r = run("applier", "--target-dsn", dsn(e.dst.Addr()), "--log-format", "xml")
	require.Equal(t, 2, r.code)
	require.Equal(t, "rowlift: log format \"xml\": want one of json, console\n", r.stderr)

	for _, p := range procs {
		p.stop()
		text := p.logText()
		require.NotContains(t, text, password, "log of %s", p.name)
		for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
			if strings.HasPrefix(line, "--- start ") {
				continue
			}
			require.True(t, json.Valid([]byte(line)), "%s logged a line that is not zap's JSON: %s", p.name, line)
		}
	}
	require.Contains(t, procs[2].logText(), `"workflow":"down"`, "the down source's failure is logged, with its workflow")
	for _, r := range outputs {
		require.NotContains(t, r.stdout+r.stderr, password)
	}
}
