package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/testhook"
	"github.com/rowlift/rowlift/internal/verify"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// wideRows is the wide table's rows: blobs of 10 to 200 KiB (105 KiB on
// average, about 300 MiB in all), the rows issue 24 copied 0 of in five
// minutes with the default chunk_rows.
const wideRows = 3000

// fillWide creates db.blobs on pool and fills it with rows of 10 to 200 KiB,
// in statements of 250 rows.
func fillWide(t *testing.T, pool *sql.DB, db string, rows int) {
	t.Helper()
	sandboxtest.Exec(t, pool, "CREATE TABLE "+db+".blobs (id INT PRIMARY KEY, n INT NOT NULL, b LONGBLOB NOT NULL)")
	for first := 1; first <= rows; first += 250 {
		sandboxtest.Exec(t, pool, fmt.Sprintf("INSERT INTO %s.blobs WITH RECURSIVE s(i) AS (SELECT %d UNION ALL SELECT i + 1 FROM s WHERE i < %d) "+
			"SELECT i, i * 7, LEFT(REPEAT(SHA2(i, 256), 3200), 10240 + (i * 7919) %% (194560 + 1)) FROM s", db, first, min(first+249, rows)))
	}
}

// killPoints returns where the wide tests kill a process: kills rows-copied
// counts, one at a random place in each of kills equal spans of 10-85 % of
// total. Kills follow the copy's progress, not the clock, so they all land
// while it runs on a fast machine as on a slow one, each at a different place
// of a chunk from one seed to the next.
func killPoints(rng *rand.Rand, total int64, kills int) []int64 {
	span := total * 75 / 100 / int64(kills)
	points := make([]int64, kills)
	for i := range points {
		points[i] = total/10 + int64(i)*span + rng.Int64N(span)
	}
	return points
}

// killUntilDone kills victims in turn as progress passes each of points,
// restarting each at once and waiting until the committed progress moves past
// where the kill found it; it returns the number of kills, fewer than points
// only if the copy ended first.
func killUntilDone(t *testing.T, points []int64, victims []*proc, progress func() (int64, bool), waitFor func(string, time.Duration, func() (bool, string))) int {
	t.Helper()
	kills := 0
	for kills < len(points) {
		n, done := progress()
		if done {
			return kills
		}
		if n < points[kills] {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		victim := victims[kills%len(victims)]
		victim.kill()
		kills++
		t.Logf("kill %d: SIGKILL %s at %d rows copied", kills, victim.name, n)
		victim.restart()
		waitFor(fmt.Sprintf("copy progress past %d rows after kill %d", n, kills), 2*time.Minute, func() (bool, string) {
			now, done := progress()
			return now > n || done, fmt.Sprintf("%d rows copied", now)
		})
	}
	return kills
}

// TestWideCopySurvivesKills copies a table of 10-200 KiB rows with the default
// chunk settings while the streamer and the applier are killed with SIGKILL
// in turn four times, at random points of the copy; the target must end
// identical to the source with every row counted once. Each kill must land
// while the copy is under way, and after each restart the committed progress
// must move past where the kill left it: the work a kill loses is the chunk in
// flight, not the copy. The applier waits a little before each part it writes
// (test hook), so a kill finds a chunk in flight.
func TestWideCopySurvivesKills(t *testing.T) {
	sandboxtest.EachFlavor(t, testWideCopySurvivesKills)
}

func testWideCopySurvivesKills(t *testing.T, flavor sandbox.Flavor) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, seed))

	e := newEnvWith(t, sandbox.Options{Flavor: flavor})
	e.sourceExec("CREATE DATABASE wide")
	fillWide(t, e.srcDB, "wide", wideRows)
	e.hooks = []string{testhook.EnvVar + "=chunk_apply=150-250ms"}
	e.startStreamer()
	e.startApplier()
	e.start(e.workflow("wide", "wide", "blobs"))

	copied := func() (int64, bool) {
		cs, err := e.store.CopyState(context.Background(), "wide", "")
		require.NoError(t, err)
		var n int64
		done := len(cs) > 0
		for _, c := range cs {
			n += c.RowsCopied
			done = done && c.Done
		}
		return n, done
	}
	points := killPoints(rng, wideRows, 4)
	kills := killUntilDone(t, points, []*proc{e.applier, e.streamer}, copied, e.waitFor)
	require.Equal(t, len(points), kills, "the copy finished before every kill at %v rows; the test proves less than it says", points)
	e.waitState("wide", state.Running, 2*time.Minute)

	n, _ := copied()
	require.EqualValues(t, wideRows, n, "rows_copied counts every row exactly once")
	res, err := verify.Table(context.Background(), e.srcDB, e.dstDB, "wide", "wide", "blobs", verify.Options{})
	require.NoError(t, err)
	require.True(t, res.Identical(), "%s", res)
	require.EqualValues(t, wideRows, res.TargetRows)
}

// TestWideReshardSurvivesKills splits a table of 10-200 KiB rows 1→2 with the
// default chunk settings, where each chunk is read whole and shared by the two
// streams (the chunk cache, bounded in bytes), while the streamer and an
// applier are killed with SIGKILL in turn three times, at random points of
// the copy; each target must hold exactly its range's rows.
func TestWideReshardSurvivesKills(t *testing.T) {
	sandboxtest.EachFlavor(t, testWideReshardSurvivesKills)
}

func testWideReshardSurvivesKills(t *testing.T, flavor sandbox.Flavor) {
	const rows = 1500
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, seed))
	// Two appliers write at once, each a part per 0.25-0.35 s: about 20 s.
	e := newShardEnv(t, flavor, 10, []string{testhook.EnvVar + "=chunk_apply=250-350ms"}, []string{""}, []string{"-80", "80-"}, false)
	fillWide(t, e.sources[0].db, "race", rows)
	spec := e.spec("widesplit", []*rowliftv1.TableSpec{{Name: "blobs", ShardingColumn: "id", ShardingFunction: "hash"}})
	spec.Options = &rowliftv1.WorkflowOptions{}
	call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) {
		return e.ctl.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: spec})
	})
	call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) {
		return e.ctl.StartWorkflow(ctx, &rowliftv1.WorkflowRef{Name: "widesplit"})
	})
	copied := func() (int64, bool) {
		st := call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) {
			return e.ctl.GetWorkflow(ctx, &rowliftv1.WorkflowRef{Name: "widesplit"})
		}).GetStatus()
		return st.GetRowsCopied(), st.GetPhase() == rowliftv1.WorkflowPhase_WORKFLOW_PHASE_RUNNING
	}
	waitFor := func(what string, timeout time.Duration, cond func() (bool, string)) {
		t.Helper()
		require.Eventually(t, func() bool { ok, _ := cond(); return ok }, timeout, 50*time.Millisecond, what)
	}
	points := killPoints(rng, rows, 3)
	kills := killUntilDone(t, points, []*proc{e.sources[0].proc, e.targets[1].proc}, copied, waitFor)
	require.Equal(t, len(points), kills, "the copy finished before every kill at %v rows; the test proves less than it says", points)
	e.waitState(spec, state.Running, 2*time.Minute)
	e.checkShards(spec, false)
	n, _ := copied()
	require.EqualValues(t, rows, n, "rows_copied counts every row exactly once")
}
