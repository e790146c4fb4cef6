package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/verify"
	"github.com/rowlift/rowlift/state"
)

// liveTables are the tables writers change while they are copied.
var liveTables = []struct{ name, ddl string }{
	{"ints", "CREATE TABLE live.ints (id INT PRIMARY KEY, v VARCHAR(40), n INT NULL)"},
	{"composite", "CREATE TABLE live.composite (region VARCHAR(8) COLLATE utf8mb4_general_ci, id INT, v VARCHAR(40), n INT NULL, " +
		"PRIMARY KEY (region, id))"},
}

// writer runs random single-row transactions on the live tables until ctx ends:
// inserts, updates, deletes, key-changing updates and NULL toggles.
func writer(ctx context.Context, db *sql.DB, rng *rand.Rand, keys int) int {
	n := 0
	regions := []string{"eu", "EU", "us", "ap", "Sa"}
	for ctx.Err() == nil {
		id := rng.IntN(keys)
		region := regions[rng.IntN(len(regions))]
		v := fmt.Sprint(rng.Uint64())
		var q string
		var args []any
		switch table := rng.IntN(2); rng.IntN(5) {
		case 0:
			q, args = map[int]string{0: "INSERT IGNORE INTO live.ints VALUES (?, ?, ?)", 1: "INSERT IGNORE INTO live.composite VALUES (?, ?, ?, ?)"}[table],
				map[int][]any{0: {id, v, id}, 1: {region, id, v, id}}[table]
		case 1:
			q, args = map[int]string{0: "UPDATE live.ints SET v = ? WHERE id = ?", 1: "UPDATE live.composite SET v = ? WHERE region = ? AND id = ?"}[table],
				map[int][]any{0: {v, id}, 1: {v, region, id}}[table]
		case 2:
			q, args = map[int]string{0: "DELETE FROM live.ints WHERE id = ?", 1: "DELETE FROM live.composite WHERE region = ? AND id = ?"}[table],
				map[int][]any{0: {id}, 1: {region, id}}[table]
		case 3:
			to := rng.IntN(keys)
			q, args = map[int]string{0: "UPDATE IGNORE live.ints SET id = ? WHERE id = ?", 1: "UPDATE IGNORE live.composite SET id = ? WHERE region = ? AND id = ?"}[table],
				map[int][]any{0: {to, id}, 1: {to, region, id}}[table]
		default:
			q, args = map[int]string{0: "UPDATE live.ints SET n = IF(n IS NULL, ?, NULL) WHERE id = ?", 1: "UPDATE live.composite SET n = IF(n IS NULL, ?, NULL) WHERE region = ? AND id = ?"}[table],
				map[int][]any{0: {id, id}, 1: {id, region, id}}[table]
		}
		if _, err := db.ExecContext(ctx, q, args...); err == nil {
			n++
		}
	}
	return n
}

// waitCaughtUp waits until the workflow's applied position covers the source's.
func (e *env) waitCaughtUp(workflow string, timeout time.Duration) {
	e.t.Helper()
	var src string
	require.NoError(e.t, e.srcDB.QueryRow("SELECT @@gtid_binlog_pos").Scan(&src))
	want, err := gomysql.ParseMariadbGTIDSet(src)
	require.NoError(e.t, err)
	e.waitFor("the target to apply up to "+src, timeout, func() (bool, string) {
		streams, err := e.store.Streams(context.Background(), workflow)
		if err != nil || len(streams) == 0 {
			return false, fmt.Sprint(err)
		}
		got, err := gomysql.ParseMariadbGTIDSet(streams[0].Position)
		if err != nil {
			return false, err.Error()
		}
		return got.Contain(want), "applied " + streams[0].Position
	})
}

func testSeed(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("ROWLIFT_TEST_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (rerun with ROWLIFT_TEST_SEED=%d)", seed, seed)
	return seed
}

// TestCopyUnderLiveTraffic copies tables while writers change them, then checks
// the target ends identical once it has applied everything.
func TestCopyUnderLiveTraffic(t *testing.T) {
	seed := testSeed(t)
	e := newEnv(t)
	e.sourceExec("CREATE DATABASE live", "SET SESSION max_recursive_iterations = 100000")
	const keys = 3000
	for _, tbl := range liveTables {
		e.sourceExec(tbl.ddl)
	}
	e.sourceExec("INSERT INTO live.ints WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 2 FROM s WHERE i < 2998) SELECT i, SHA1(i), i FROM s",
		"INSERT INTO live.composite WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < 1999) "+
			"SELECT ELT(1 + i % 4, 'eu', 'us', 'ap', 'sa'), i, SHA1(i), NULL FROM s")

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var writes sync.Map
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			writes.Store(i, writer(ctx, e.srcDB, rand.New(rand.NewPCG(seed, uint64(i))), keys))
		}()
	}
	e.startStreamer()
	e.startApplier()
	spec := e.workflow("live", "live", "ints", "composite")
	spec.Options.ChunkRows, spec.Options.PacketBytes = 150, 4<<10
	e.start(spec)
	e.waitState("live", state.Running, time.Minute)
	time.Sleep(500 * time.Millisecond) // some replay after the copy too
	stop()
	wg.Wait()
	total := 0
	writes.Range(func(_, n any) bool { total += n.(int); return true })
	t.Logf("%d writes while copying", total)
	require.Greater(t, total, 100, "the writers barely ran; the test proves little")

	e.waitCaughtUp("live", time.Minute)
	for _, tbl := range liveTables {
		res, err := verify.Table(context.Background(), e.srcDB, e.dstDB, "live", "live", tbl.name, verify.Options{})
		require.NoError(t, err)
		require.True(t, res.Identical(), "%s", res)
	}
}

// TestResumeAfterApplierDowntime: changes made while the applier is down are
// applied when it comes back, from the position it had committed.
func TestResumeAfterApplierDowntime(t *testing.T) {
	e := newEnv(t)
	e.sourceExec("CREATE DATABASE r", "CREATE TABLE r.t (id INT PRIMARY KEY, v INT)", "INSERT INTO r.t VALUES (1, 1), (2, 2)")
	e.startStreamer()
	e.startApplier()
	e.start(e.workflow("resume", "r", "t"))
	e.waitState("resume", state.Running, 30*time.Second)
	e.sourceExec("INSERT INTO r.t VALUES (3, 3)")
	e.waitCaughtUp("resume", 30*time.Second)

	e.applier.kill()
	e.sourceExec("INSERT INTO r.t VALUES (4, 4)", "UPDATE r.t SET v = 20 WHERE id = 2", "DELETE FROM r.t WHERE id = 1")
	e.applier.restart()
	e.waitCaughtUp("resume", 30*time.Second)
	res, err := verify.Table(context.Background(), e.srcDB, e.dstDB, "r", "r", "t", verify.Options{})
	require.NoError(t, err)
	require.True(t, res.Identical(), "%s", res)
	require.EqualValues(t, 3, res.TargetRows)
}
