package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/testhook"
	"github.com/rowlift/rowlift/internal/verify"
	"github.com/rowlift/rowlift/state"
)

// crashTables are three tables of different key shapes and row sizes.
var crashTables = []struct {
	name, ddl, fill string
	rows            int
}{
	{"ints", "CREATE TABLE crash.ints (id INT PRIMARY KEY, v VARCHAR(40), n INT NULL)",
		"INSERT INTO crash.ints SELECT i, LEFT(SHA2(i, 256), 40), IF(i % 7 = 0, NULL, i) FROM crash.seq", 30000},
	{"composite", "CREATE TABLE crash.composite (region VARCHAR(8) COLLATE utf8mb4_general_ci, id BIGINT, note TEXT, PRIMARY KEY (region, id))",
		"INSERT INTO crash.composite SELECT ELT(1 + i % 4, 'eu', 'US', 'ap', 'Sa'), i, REPEAT('x', i % 50) FROM crash.seq WHERE i <= 20000", 20000},
	{"blobs", "CREATE TABLE crash.blobs (id BIGINT UNSIGNED PRIMARY KEY, b BLOB)",
		"INSERT INTO crash.blobs SELECT i, RANDOM_BYTES(1024) FROM crash.seq WHERE i <= 5000", 5000},
}

// TestCopySurvivesKills copies three tables while the applier and the streamer are
// each killed with SIGKILL three times at points where the copy is under way,
// and checks the target ends identical to the source with every row counted once.
func TestCopySurvivesKills(t *testing.T) {
	sandboxtest.EachFlavor(t, testCopySurvivesKills)
}

func testCopySurvivesKills(t *testing.T, flavor sandbox.Flavor) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("ROWLIFT_TEST_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (rerun with ROWLIFT_TEST_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))

	e := newEnvWith(t, sandbox.Options{Flavor: flavor})
	// A few milliseconds per chunk, so the copy is still running when a kill
	// lands: the progress it waits for is seen up to 50 ms late.
	e.hooks = []string{testhook.EnvVar + "=chunk_apply=5ms-10ms"}
	e.sourceExec("CREATE DATABASE crash", "CREATE TABLE crash.seq (i INT PRIMARY KEY)",
		"INSERT INTO crash.seq WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 30000) SELECT i FROM s")
	var names []string
	total := 0
	for _, tbl := range crashTables {
		e.sourceExec(tbl.ddl, tbl.fill)
		names = append(names, tbl.name)
		total += tbl.rows
	}
	e.startStreamer()
	e.startApplier()
	spec := e.workflow("crash", "crash", names...)
	// Small chunks and packets make many commits, so kills land between and inside them.
	spec.Options.ChunkRows, spec.Options.PacketBytes, spec.Options.ParallelTables, spec.Options.ApplyWorkers = 300, 8<<10, 2, 3
	e.start(spec)

	copied := func() int64 {
		cs, err := e.store.CopyState(context.Background(), "crash", "")
		require.NoError(t, err)
		var n int64
		for _, c := range cs {
			n += c.RowsCopied
		}
		return n
	}
	victims := []*proc{e.applier, e.streamer, e.applier, e.streamer, e.applier, e.streamer}
	rng.Shuffle(len(victims), func(i, j int) { victims[i], victims[j] = victims[j], victims[i] })
	for i, p := range victims {
		from := copied()
		// Kill once the copy has moved on by a random share of what is left
		// for this kill and those after it, less a reserve of chunks for
		// each, so every kill interrupts a copy in progress, however fast the
		// restarted copy runs.
		left := int64(len(victims) - i)
		room := (int64(total) - from - 2000*left) / (left + 1)
		target := from + 1 + rng.Int64N(max(room, 1))
		e.waitFor(fmt.Sprintf("copy progress past %d rows before kill %d", target, i+1), time.Minute, func() (bool, string) {
			n := copied()
			return n >= target, fmt.Sprintf("%d rows copied", n)
		})
		p.kill()
		n := copied()
		require.Less(t, n, int64(total), "kill %d (%s) came after the copy finished; the test proves nothing", i+1, p.name)
		t.Logf("kill %d: SIGKILL %s at %d of %d rows", i+1, p.name, n, total)
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		p.restart()
	}
	e.waitState("crash", state.Running, 2*time.Minute)

	require.Equal(t, int64(total), copied(), "rows_copied counts every row exactly once")
	for _, name := range names {
		res, err := verify.Table(context.Background(), e.srcDB, e.dstDB, "crash", "crash", name, verify.Options{})
		require.NoError(t, err)
		require.True(t, res.Identical(), "%s", res)
		require.EqualValues(t, count(t, e.srcDB, "crash."+name), res.TargetRows)
	}
}
