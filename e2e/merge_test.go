package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/testhook"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// mergeBase is the distance between the merge sources' keys: source a holds
// and writes keys (and uniq emails e0, e1, ...) below it, source b from it on
// (b's race tables are filled from base + i: ints from 2*mergeBase, uniq
// from 3*mergeBase and its emails from e1000000, composite and types from
// mergeBase; b's writers write mergeBase to mergeBase+keys-1).
const mergeBase = 1_000_000

// mergeEnv is a merge without key ranges: sources "a" and "b", each with its
// streamer, hold the race tables with disjoint keys, and the workflow
// "merge" moves both into one target "main" (its applier polls every 50 ms),
// a plain multi-source move of whole tables. Race writers write on each
// source, each only its source's keys.
type mergeEnv struct {
	*shardEnv
	spec *rowliftv1.WorkflowSpec
	keys int
	// stop ends the writers and returns how many transactions they committed.
	stop func() int
}

// mergeTables are the race tables as a merge moves them: whole, with no
// sharding column.
func mergeTables() []*rowliftv1.TableSpec {
	return []*rowliftv1.TableSpec{{Name: "ints"}, {Name: "composite"}, {Name: "uniq"}, {Name: "types"}}
}

// newMergeEnv starts the servers and processes of the merge, starts the
// writers on both sources, creates and starts the workflow "merge" (97-row
// chunks) through the Control API while they write, and waits until it runs.
func newMergeEnv(t *testing.T, flavor sandbox.Flavor, keys int) *mergeEnv {
	t.Helper()
	require.Less(t, keys+2000, mergeBase, "the sources' keys must stay apart")
	seed := testSeed(t)
	hooks := []string{testhook.EnvVar + fmt.Sprintf("=chunk_read=0-20ms,replay_exec=0-5ms,seed=%d", seed)}
	e := newShardEnv(t, flavor, keys, hooks, []string{"", ""}, []string{""}, false,
		withShardNames([]string{"a", "b"}, []string{"main"}), withDisjointSources(mergeBase))
	m := &mergeEnv{shardEnv: e, spec: e.spec("merge", mergeTables()), keys: keys}
	ctx, cancel := context.WithCancel(context.Background())
	var waits []func() int
	for i, s := range e.sources {
		waits = append(waits, startRoutedWritersAt(ctx, func() *sql.DB { return s.db }, seed, uint64(i*raceWriters), s.base, keys,
			new(atomic.Int64), nil))
	}
	m.stop = func() int {
		cancel()
		n := 0
		for _, w := range waits {
			n += w()
		}
		return n
	}
	t.Cleanup(func() { m.stop() })
	w := call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) {
		return e.ctl.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: m.spec})
	})
	require.Len(t, w.GetStatus().GetStreams(), 2, "one stream per source into main")
	call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) {
		return e.ctl.StartWorkflow(ctx, &rowliftv1.WorkflowRef{Name: "merge"})
	})
	e.waitState(m.spec, state.Running, 3*time.Minute)
	return m
}

// waitFor polls cond until it holds, for at most timeout (env.waitFor's
// signature, for verifyUnderKills).
func (m *mergeEnv) waitFor(what string, timeout time.Duration, cond func() (bool, string)) {
	m.t.Helper()
	waitWithin(m.t, what, timeout, cond)
}

// checkUnion stops the writers, waits until main has applied every source
// transaction, and checks that main holds exactly the union of the sources'
// rows, table by table, and that no key is on both sources.
func (m *mergeEnv) checkUnion() {
	m.t.Helper()
	m.t.Logf("%d source transactions", m.stop())
	m.waitCaughtUp(m.spec, 2*time.Minute)
	for _, tbl := range m.spec.GetTables() {
		key := raceKeys[tbl.GetName()]
		a := m.shardRows("a", tbl.GetName(), key, "", "", nil)
		b := m.shardRows("b", tbl.GetName(), key, "", "", nil)
		require.NotEmpty(m.t, a, "source a's %s", tbl.GetName())
		require.NotEmpty(m.t, b, "source b's %s", tbl.GetName())
		both := slices.DeleteFunc(slices.Collect(maps.Keys(a)), func(k string) bool { _, ok := b[k]; return !ok })
		require.Empty(m.t, both, "table %s: keys on both sources; the harness must keep them apart", tbl.GetName())
	}
	m.checkShards(m.spec, false)
}

// plantMergeDifferences adds rows on the sources past the writers' keys,
// waits until main has them, then changes main behind rowlift's back, and
// returns the differences a verify of the merge must name, exactly, all in
// table ints:
//
//   - keys+1001, from source a, deleted on main: missing on target;
//   - keys+1002, on no source, inserted on main: extra on target;
//   - mergeBase+keys+1003, from source b, one byte of v changed on main: different;
//   - keys+1005, inserted on a ('on a', replicated to main) and on b ('on b',
//     with sql_log_bin=0, as its replay would stop the merge on a duplicate
//     key): on several sources (a, b), counted as different.
func (m *mergeEnv) plantMergeDifferences() []string {
	t := m.t
	t.Helper()
	k, bk := m.keys+1000, mergeBase+m.keys+1000
	a, b, main := m.servers["a"].db, m.servers["b"].db, m.servers["main"].db
	sandboxtest.Exec(t, a, fmt.Sprintf("INSERT INTO race.ints VALUES (%d, 'missing', 1), (%d, 'on a', 5)", k+1, k+5))
	sandboxtest.Exec(t, b, fmt.Sprintf("INSERT INTO race.ints VALUES (%d, 'abcdef', 3)", bk+3))
	ctx := context.Background()
	conn, err := b.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	for _, q := range []string{"SET SESSION sql_log_bin = 0", fmt.Sprintf("INSERT INTO race.ints VALUES (%d, 'on b', 5)", k+5),
		"SET SESSION sql_log_bin = 1"} {
		_, err := conn.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	m.waitFor("the planted rows on main", time.Minute, func() (bool, string) {
		n := count(t, main, fmt.Sprintf("race.ints WHERE id IN (%d, %d, %d)", k+1, k+5, bk+3))
		return n == 3, fmt.Sprintf("%d of 3", n)
	})
	sandboxtest.Exec(t, main,
		fmt.Sprintf("DELETE FROM race.ints WHERE id = %d", k+1),
		fmt.Sprintf("INSERT INTO race.ints VALUES (%d, 'extra', 2)", k+2),
		fmt.Sprintf("UPDATE race.ints SET v = 'abcdeF' WHERE id = %d", bk+3))
	return []string{
		fmt.Sprintf("missing on target: (id=%d)", k+1),
		fmt.Sprintf("extra on target: (id=%d)", k+2),
		fmt.Sprintf("different: (id=%d)", bk+3),
		fmt.Sprintf("on several sources (a, b): (id=%d)", k+5),
	}
}

// TestMergeCopiesAndReplays merges two sources with disjoint keys into one
// target under writes on both: main ends with exactly a ∪ b.
func TestMergeCopiesAndReplays(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		m := newMergeEnv(t, flavor, envInt("ROWLIFT_MERGE_KEYS", 1500))
		time.Sleep(time.Second) // replay after the copy too
		m.checkUnion()
		st := call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) {
			return m.ctl.GetWorkflow(ctx, &rowliftv1.WorkflowRef{Name: "merge"})
		}).GetStatus()
		require.Equal(t, rowliftv1.WorkflowPhase_WORKFLOW_PHASE_RUNNING, st.GetPhase())
		var copied int64
		for _, s := range st.GetStreams() {
			require.Positive(t, s.GetRowsCopied(), "stream %s → %s copied rows", s.GetSource(), s.GetTarget())
			copied += s.GetRowsCopied()
		}
		require.Equal(t, st.GetRowsCopied(), copied, "the streams' rows add up to the workflow's")
	})
}

// TestVerifyOfMerge verifies a merge under writes on both sources: clean,
// then after differences planted on main, exactly those, the key both
// sources hold named as on several sources.
func TestVerifyOfMerge(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		m := newMergeEnv(t, flavor, 1500)
		found, code := m.cli.verify("merge")
		require.Zero(t, code, "verify of an identical merge under writes")
		require.Empty(t, found)
		planted := m.plantMergeDifferences()
		found, code = m.cli.verify("merge")
		require.Equal(t, 1, code, "verify of a changed target exits 1")
		require.ElementsMatch(t, planted, found)
		t.Logf("%d writes during the verifies", m.stop())
	})
}

// TestVerifyOfMergeSurvivesKills slows every verify chunk down and kills
// main's applier and b's streamer with SIGKILL in the middle of a verify of
// the merge: it ends naming exactly the planted keys, each counted once.
func TestVerifyOfMergeSurvivesKills(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		m := newMergeEnv(t, flavor, 1500)
		applier := m.servers["main"].proc
		applier.kill()
		// The env's hooks (one ROWLIFT_TEST_HOOKS, shared with the other
		// processes) and a slow check of each verify chunk.
		applier.env = []string{applier.env[0] + "," + string(testhook.VerifyCheck) + "=150-250ms"}
		applier.restart()
		planted := m.plantMergeDifferences()
		v := verifyUnderKills(t, m.cli, m.waitFor, "merge", applier, m.servers["b"].proc)
		require.EqualValues(t, [3]int64{1, 1, 2}, [3]int64{v.GetMissing(), v.GetExtra(), v.GetDifferent()},
			"each planted key counted once, the one on several sources as different")
		require.ElementsMatch(t, planted, verifyExamples(v))
		t.Logf("%d writes during the verify", m.stop())
	})
}

// TestVerifyOfMergeRefusesRepair: --repair cannot tell which source a row of
// a merge must come from, so it is refused, saying so, and changes nothing
// on main.
func TestVerifyOfMergeRefusesRepair(t *testing.T) {
	m := newMergeEnv(t, sandbox.MariaDB, 1500)
	m.stop()
	m.waitCaughtUp(m.spec, 2*time.Minute)
	m.plantMergeDifferences()
	before := map[string]map[string]string{}
	for _, tbl := range m.spec.GetTables() {
		before[tbl.GetName()] = m.shardRows("main", tbl.GetName(), raceKeys[tbl.GetName()], "", "", nil)
	}
	r := m.cli.run("workflow", "verify", "merge", "--repair", "--wait", "--interval", "200ms")
	require.NotZero(t, r.code, "verify --repair of a merge")
	require.Contains(t, r.stderr, "a repair cannot tell which source's row a key should get")
	require.NotContains(t, strings.ToLower(r.stdout), "repaired")
	for _, tbl := range m.spec.GetTables() {
		require.Equal(t, before[tbl.GetName()], m.shardRows("main", tbl.GetName(), raceKeys[tbl.GetName()], "", "", nil),
			"table %s on main is unchanged", tbl.GetName())
	}
}
