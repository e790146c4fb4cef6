package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/rowlift/rowlift/internal/grpcopt"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/verify"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// streamerClient returns a client of the env's streamer, as a coordinator's
// cutover uses it.
func (e *env) streamerClient() rowliftv1.StreamerClient {
	e.t.Helper()
	conn, err := grpc.NewClient(e.streamerAddr, grpcopt.DialOptions(nil)...)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { conn.Close() })
	return rowliftv1.NewStreamerClient(conn)
}

// identical checks that every table of db is the same on source and target.
func (e *env) identical(db string, tables ...string) {
	e.t.Helper()
	for _, table := range tables {
		res, err := verify.Table(context.Background(), e.srcDB, e.dstDB, db, db, table, verify.Options{})
		require.NoError(e.t, err)
		require.True(e.t, res.Identical(), "%s", res)
	}
}

// TestFrozenSourceKeepsStreaming: a cutover's freeze (RENAME) on the source
// leaves the workflow running and its position reaches the freeze position;
// with the tables frozen, a killed applier and streamer come back up, and
// writes into the frozen twins (the reverse workflow's) are not streamed
// forward; after the unfreeze, writes flow again.
func TestFrozenSourceKeepsStreaming(t *testing.T) {
	e := newEnv(t)
	e.sourceExec("CREATE DATABASE f", "CREATE TABLE f.t1 (id INT PRIMARY KEY, v INT)", "CREATE TABLE f.t2 (id INT PRIMARY KEY, v INT)",
		"CREATE TABLE f.other (id INT PRIMARY KEY)", "INSERT INTO f.t1 VALUES (1, 1), (2, 2)", "INSERT INTO f.t2 VALUES (1, 1), (2, 2)")
	e.startStreamer()
	e.startApplier()
	e.start(e.workflow("frz", "f", "t1", "t2"))
	e.waitState("frz", state.Running, 30*time.Second)
	e.sourceExec("INSERT INTO f.t1 VALUES (3, 3)", "UPDATE f.t2 SET v = 9 WHERE id = 1")

	client := e.streamerClient()
	req := &rowliftv1.FreezeRequest{Workflow: "frz", Database: "f", Tables: []string{"t1", "t2"}}
	frozen := call(t, func(ctx context.Context) (*rowliftv1.FreezeResponse, error) { return client.Freeze(ctx, req) })
	require.True(t, frozen.GetChanged())
	e.waitApplied("frz", frozen.GetPosition().GetGtidSet(), 30*time.Second)
	e.waitState("frz", state.Running, time.Second) // not stopped at the rename

	e.applier.kill()
	e.streamer.kill()
	e.streamer.restart()
	e.applier.restart()
	// The reverse workflow writes into the twins: never streamed forward.
	e.sourceExec("INSERT INTO f._t1_frozen VALUES (100, 100)", "INSERT INTO f.other VALUES (1)")
	e.waitCaughtUp("frz", 30*time.Second)
	e.waitState("frz", state.Running, time.Second)
	require.Zero(t, count(t, e.dstDB, "f.t1 WHERE id = 100"), "a write into the frozen twin reached the target")
	require.Contains(t, e.streamer.logText(), "described from its frozen twin")
	e.sourceExec("DELETE FROM f._t1_frozen WHERE id = 100")

	unfrozen := call(t, func(ctx context.Context) (*rowliftv1.FreezeResponse, error) { return client.Unfreeze(ctx, req) })
	require.True(t, unfrozen.GetChanged())
	e.sourceExec("INSERT INTO f.t1 VALUES (4, 4)", "DELETE FROM f.t2 WHERE id = 2", "UPDATE f.t1 SET v = 7 WHERE id = 1")
	e.waitCaughtUp("frz", 30*time.Second)
	e.waitState("frz", state.Running, time.Second)
	e.identical("f", "t1", "t2")
	require.Contains(t, e.applier.logText(), "tables frozen/unfrozen by a cutover")
}

// TestTargetTableMapping: a workflow whose table is mapped to another target
// table (as a cutover maps it to a frozen twin) copies, with either copy
// method, and replays into that table, and creates nothing under the source's
// name.
func TestTargetTableMapping(t *testing.T) {
	e := newEnv(t)
	e.startStreamer()
	e.startApplier()
	_, ctl, _ := e.startCoordinator()
	methods := []rowliftv1.CopyMethod{rowliftv1.CopyMethod_COPY_METHOD_LOAD_DATA, rowliftv1.CopyMethod_COPY_METHOD_INSERT}
	for i, method := range methods {
		db, name := fmt.Sprintf("m%d", i), fmt.Sprintf("mapped%d", i)
		e.seqTable(db, "t", 500)
		sandboxtest.Exec(t, e.dstDB, "CREATE DATABASE "+db, "CREATE TABLE "+db+"._t_frozen (id INT PRIMARY KEY, v VARCHAR(100))")
		spec := e.workflow(name, db, "t")
		spec.Tables[0].TargetTable = "_t_frozen"
		spec.Options.ChunkRows = 100
		spec.Options.CopyMethod = method
		call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) {
			return ctl.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: spec})
		})
		call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) {
			return ctl.StartWorkflow(ctx, &rowliftv1.WorkflowRef{Name: name})
		})
	}
	for i := range methods {
		db, name := fmt.Sprintf("m%d", i), fmt.Sprintf("mapped%d", i)
		e.waitState(name, state.Running, 30*time.Second)
		e.sourceExec("INSERT INTO "+db+".t VALUES (1000, 'new')", "UPDATE "+db+".t SET v = 'changed' WHERE id = 7", "DELETE FROM "+db+".t WHERE id = 8")
		e.waitCaughtUp(name, 30*time.Second)
		require.Equal(t, 500, count(t, e.dstDB, db+"._t_frozen"))
		require.Zero(t, count(t, e.dstDB, "information_schema.TABLES WHERE TABLE_SCHEMA = '"+db+"' AND TABLE_NAME = 't'"), "nothing under the source's name")
	}

	// Compare under one name: with the applier stopped, the target tables
	// take the source's.
	e.applier.stop()
	for i := range methods {
		db := fmt.Sprintf("m%d", i)
		sandboxtest.Exec(t, e.dstDB, "RENAME TABLE "+db+"._t_frozen TO "+db+".t")
		e.identical(db, "t")
	}
}
