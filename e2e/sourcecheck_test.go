package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/verify"
)

// sourceMismatch replays the source server's whole binlog into a fresh server
// and compares the named tables of database db with the source's own. A source
// whose tables do not follow from its binlog lost or invented committed work in
// crash recovery: rowlift copies what the binlog says, so a run against such a
// source proves nothing. It returns the differences, empty when the source is
// consistent.
func sourceMismatch(t *testing.T, e *env, db string, tables []string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(e.src.DataDir, "binlog.[0-9]*"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("source binlog files: %v (%d found)", err, len(files))
	}
	sort.Strings(files)
	fresh := sandboxtest.Start(t, sandbox.Options{Flavor: e.src.Flavor})
	dump, err := e.src.Tool(context.Background(), sandbox.BinlogDump, files...)
	if err != nil {
		return nil, err
	}
	var dumpErr strings.Builder
	dump.Stderr = &dumpErr
	load, err := fresh.Tool(context.Background(), sandbox.Client, "--protocol=socket", "--socket="+fresh.Socket, "-uroot")
	if err != nil {
		return nil, err
	}
	load.Stdin, err = dump.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := dump.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", dump.Path, err)
	}
	out, loadErr := load.CombinedOutput()
	err = dump.Wait()
	if msg := dumpErr.String(); strings.Contains(msg, "read_log_event") {
		// A kill tore the event being written: no replica can read past it.
		return []string{"the source's own binlog cannot be read: " + strings.TrimSpace(msg)}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s", dump.Path, err, dumpErr.String())
	}
	if loadErr != nil {
		return nil, fmt.Errorf("replay the source's binlog: %w: %s", loadErr, out)
	}
	freshDB := sandboxtest.Open(t, fresh, "")
	var diffs []string
	for _, table := range tables {
		r, err := verify.Table(context.Background(), e.srcDB, freshDB, db, db, table, verify.Options{})
		if err != nil {
			return nil, err
		}
		if !r.Identical() {
			diffs = append(diffs, "the source's tables differ from a replay of its own binlog: "+r.String())
		}
	}
	return diffs, nil
}

// TestSourceMatchesItsBinlogAfterKills: the oracle the race test uses to tell a
// source that broke in crash recovery works, and finds a consistent source
// consistent after kills and restarts under writes.
func TestSourceMatchesItsBinlogAfterKills(t *testing.T) {
	e := newEnv(t)
	names := createRaceTables(e, 300)
	for range 2 {
		ctx, stop := context.WithCancel(context.Background())
		wait := startRaceWriters(ctx, e, testSeed(t), 300, 300)
		time.Sleep(300 * time.Millisecond)
		require.NoError(t, e.src.Kill())
		stop()
		wait()
		require.NoError(t, e.src.Restart(context.Background()))
	}
	diffs, err := sourceMismatch(t, e, "race", names)
	require.NoError(t, err)
	require.Empty(t, diffs)

	// And it notices a source that differs from its binlog: a change made with
	// the binlog off.
	conn, err := e.srcDB.Conn(context.Background())
	require.NoError(t, err)
	defer conn.Close()
	for _, q := range []string{"SET SESSION sql_log_bin = 0", "UPDATE race.ints SET v = 'not in the binlog' ORDER BY id LIMIT 1"} {
		_, err := conn.ExecContext(context.Background(), q)
		require.NoError(t, err)
	}
	diffs, err = sourceMismatch(t, e, "race", names)
	require.NoError(t, err)
	require.Len(t, diffs, 1)
}
