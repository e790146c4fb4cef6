package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/schema"
	"github.com/rowlift/rowlift/internal/testhook"
	"github.com/rowlift/rowlift/internal/verify"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// TestDeferredKeysAreAddedAfterTheCopy copies a table with plain and unique
// secondary keys under writes. The target table is created without its plain
// keys; once its rows are copied the workflow stays copying, status names the
// keys, and the applier is killed before it adds them. After the restart the
// keys are added, the workflow runs, and the target table is the source's,
// definition and rows.
func TestDeferredKeysAreAddedAfterTheCopy(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		ctx := context.Background()
		e := newEnvWith(t, sandbox.Options{Flavor: flavor})
		e.sourceExec("CREATE DATABASE dk",
			"CREATE TABLE dk.items (id INT PRIMARY KEY, k INT NOT NULL, u VARCHAR(20) NULL, note VARCHAR(100) NOT NULL, "+
				"UNIQUE KEY u (u), KEY by_k (k), KEY by_note (note(10), k))",
			"INSERT INTO dk.items WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 20000) "+
				"SELECT i, i % 977, IF(i % 3 = 0, NULL, CONCAT('u', i)), REPEAT(CHAR(97 + i % 26), 1 + i % 90) FROM s",
			"CREATE TABLE dk.plain (id INT PRIMARY KEY, v INT)",
			"INSERT INTO dk.plain VALUES (1, 1), (2, 2)")
		// The keys wait long enough for the test to see them pending and to kill
		// the applier before they are added.
		e.hooks = []string{testhook.EnvVar + "=" + string(testhook.AddKeys) + "=2000-2500ms"}
		e.startStreamer()
		e.startApplier()
		e.start(e.workflow("dk", "dk", "items", "plain"))

		writeCtx, stopWrites := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(1, 2))
			for next := 20001; writeCtx.Err() == nil; next++ {
				id := 1 + rng.IntN(20000)
				_, _ = e.srcDB.ExecContext(writeCtx, "UPDATE dk.items SET k = k + 1, note = CONCAT(note, 'x') WHERE id = ?", id)
				_, _ = e.srcDB.ExecContext(writeCtx, "INSERT INTO dk.items VALUES (?, ?, ?, 'new')", next, next%977, fmt.Sprint("n", next))
				time.Sleep(5 * time.Millisecond)
			}
		}()
		defer func() { stopWrites(); wg.Wait() }()

		pending := func() []string {
			cs, err := e.store.CopyState(ctx, "dk", "")
			require.NoError(t, err)
			for _, c := range cs {
				if c.Table == "items" && c.Done {
					return c.KeysPending
				}
			}
			return nil
		}
		e.waitFor("items copied with its keys pending", time.Minute, func() (bool, string) {
			p := pending()
			return len(p) > 0, fmt.Sprint(p)
		})
		require.Equal(t, []string{"by_k", "by_note"}, pending())
		wf, err := e.store.Workflow(ctx, "dk")
		require.NoError(t, err)
		require.Equal(t, state.Copying, wf.State, "the copy is not done while keys are pending")
		require.ElementsMatch(t, []string{"PRIMARY", "u"}, indexes(t, e, "items"), "created without its plain keys, with its unique one")
		e.applier.kill()
		require.NotEmpty(t, pending(), "killed before the keys were added")
		e.applier.restart()

		e.waitState("dk", state.Running, 2*time.Minute)
		require.Empty(t, pending())
		require.ElementsMatch(t, []string{"PRIMARY", "u", "by_k", "by_note"}, indexes(t, e, "items"))
		stopWrites()
		wg.Wait()
		e.waitCaughtUp("dk", time.Minute)
		for _, table := range []string{"items", "plain"} {
			src, err := schema.Load(ctx, e.srcDB, "dk", table)
			require.NoError(t, err)
			dst, err := schema.Load(ctx, e.dstDB, "dk", table)
			require.NoError(t, err)
			require.Equal(t, src.CreateTable, dst.CreateTable, "%s: the source's definition", table)
			res, err := verify.Table(ctx, e.srcDB, e.dstDB, "dk", "dk", table, verify.Options{})
			require.NoError(t, err)
			require.True(t, res.Identical(), "%s: %s", table, res)
		}
		require.Contains(t, e.applier.logText(), `"secondary keys added"`)
	})
}

// TestKeepSecondaryKeysCreatesThemAtOnce: with keep_secondary_keys the target
// table has every key from the start.
func TestKeepSecondaryKeysCreatesThemAtOnce(t *testing.T) {
	e := newEnv(t)
	e.sourceExec("CREATE DATABASE dk", "CREATE TABLE dk.items (id INT PRIMARY KEY, k INT, KEY by_k (k))",
		"INSERT INTO dk.items VALUES (1, 1), (2, 2)")
	e.startStreamer()
	e.startApplier()
	spec := e.workflow("dk", "dk", "items")
	spec.Options.KeepSecondaryKeys = true
	e.start(spec)
	e.waitState("dk", state.Running, time.Minute)
	require.ElementsMatch(t, []string{"PRIMARY", "by_k"}, indexes(t, e, "items"))
	require.NotContains(t, e.applier.logText(), `"secondary keys added"`)
}

// indexes are the names of the target table dk.<table>'s indexes.
func indexes(t *testing.T, e *env, table string) []string {
	t.Helper()
	return queryStrings(t, e.dstDB, "SELECT DISTINCT INDEX_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = 'dk' AND TABLE_NAME = ?", table)
}

// TestDeleteSaysWhichKeysAKeptTableLacks: a workflow deleted while its
// deferred keys are pending keeps the table without them, and says so.
func TestDeleteSaysWhichKeysAKeptTableLacks(t *testing.T) {
	e := newEnv(t)
	e.sourceExec("CREATE DATABASE dk", "CREATE TABLE dk.items (id INT PRIMARY KEY, k INT, KEY by_k (k))",
		"INSERT INTO dk.items VALUES (1, 1), (2, 2)")
	e.hooks = []string{testhook.EnvVar + "=" + string(testhook.AddKeys) + "=60s-60s"}
	e.startStreamer()
	e.startApplier()
	e.start(e.workflow("dk", "dk", "items"))
	e.waitFor("the keys of items pending", time.Minute, func() (bool, string) {
		cs, err := e.store.CopyState(context.Background(), "dk", "")
		require.NoError(t, err)
		return len(cs) == 1 && !cs[0].Copied() && len(cs[0].KeysPending) == 1, fmt.Sprint(cs)
	})
	_, ctl, _ := e.startCoordinator()
	del := call(t, func(ctx context.Context) (*rowliftv1.DeleteWorkflowResponse, error) {
		return ctl.DeleteWorkflow(ctx, &rowliftv1.WorkflowRef{Name: "dk"})
	})
	require.Equal(t, []string{"main:dk.items (without its secondary keys by_k, which the copy adds at its end: " +
		"add them as the source has them, or drop the table before a new workflow copies into it)"}, del.GetKeptTables())
}
