package coordinator

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// listFixture is two target servers, a and b, and a coordinator that knows
// them plus a dead address as "dead"; workflows are recorded straight in the
// targets' state, as creation would leave them.
type listFixture struct {
	a, b   *sandbox.Server
	aDB    *sql.DB
	aStore *state.Store
	bStore *state.Store
	coord  *Server
}

func newListFixture(t *testing.T) *listFixture {
	f := &listFixture{a: sandboxtest.Start(t, sandbox.Options{}), b: sandboxtest.Start(t, sandbox.Options{})}
	f.aDB = sandboxtest.Open(t, f.a, "")
	ctx := context.Background()
	var err error
	f.aStore, err = state.Open(ctx, f.aDB)
	require.NoError(t, err)
	f.bStore, err = state.Open(ctx, sandboxtest.Open(t, f.b, ""))
	require.NoError(t, err)
	f.coord, err = New(Config{Targets: map[string]string{"a": f.a.DSN(""), "b": f.b.DSN(""), "dead": "root:s3cret-pass@tcp(" + deadAddr(t) + ")/"}})
	require.NoError(t, err)
	t.Cleanup(f.coord.Close)
	return f
}

// record stores a workflow on the stores of the targets it names that exist.
func (f *listFixture) record(t *testing.T, name string, targets ...string) {
	spec := &rowliftv1.WorkflowSpec{Name: name, SourceDatabase: "shop", Tables: []*rowliftv1.TableSpec{{Name: "orders"}},
		Sources: []*rowliftv1.SourceShard{{Name: "main", StreamerAddress: "127.0.0.1:1"}}}
	for _, tn := range targets {
		spec.Targets = append(spec.Targets, &rowliftv1.TargetShard{Name: tn})
	}
	for _, tn := range targets {
		store := map[string]*state.Store{"a": f.aStore, "b": f.bStore}[tn]
		if store != nil {
			require.NoError(t, store.CreateWorkflow(context.Background(), spec, tn))
		}
	}
}

func (f *listFixture) list(t *testing.T, targets ...string) *rowliftv1.ListWorkflowsResponse {
	resp, err := f.coord.ListWorkflows(context.Background(), &rowliftv1.ListWorkflowsRequest{Targets: targets})
	require.NoError(t, err)
	return resp
}

func names(ws []*rowliftv1.Workflow) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.GetSpec().GetName())
	}
	return out
}

// targetErrors is each target error as "target: workflows | message".
func targetErrors(resp *rowliftv1.ListWorkflowsResponse) map[string]string {
	out := map[string]string{}
	for _, e := range resp.GetTargetErrors() {
		out[e.GetTarget()] = fmt.Sprintf("%v | %s", e.GetWorkflows(), e.GetMessage())
	}
	return out
}

// TestListReportsTargetsPerEntry: a target that is down, one a workflow
// names but the coordinator does not know, and one asked for that does not
// exist each get an entry of their own, with the workflows they hide; the
// workflows whose targets all answered are listed, as GetWorkflow shows them.
func TestListReportsTargetsPerEntry(t *testing.T) {
	f := newListFixture(t)
	f.record(t, "solo", "a")
	f.record(t, "pair", "a", "b")
	f.record(t, "lost", "a", "dead")
	f.record(t, "ghost", "a", "gone")

	resp := f.list(t)
	require.Equal(t, []string{"pair", "solo"}, names(resp.GetWorkflows()))
	errs := targetErrors(resp)
	require.Len(t, errs, 2, "%v", errs)
	require.Regexp(t, `^\[lost\] \| target dead \(127\.0\.0\.1:\d+\): .*cannot reach target server 127\.0\.0\.1:\d+`, errs["dead"])
	require.NotContains(t, errs["dead"], "s3cret-pass")
	require.Equal(t, `[ghost] | target "gone" is not configured on this coordinator (it has a, b, dead): add --target gone=DSN to the coordinator`,
		errs["gone"])
	for _, w := range resp.GetWorkflows() {
		got, err := f.coord.GetWorkflow(context.Background(), &rowliftv1.WorkflowRef{Name: w.GetSpec().GetName()})
		require.NoError(t, err)
		require.True(t, proto.Equal(got, w), "list and get differ:\nlist %v\nget  %v", w, got)
	}

	require.Equal(t, []string{"a", "b"}, resp.GetTargetsRead())

	resp = f.list(t, "b", "nosuch")
	require.Equal(t, []string{"pair"}, names(resp.GetWorkflows()), "pair is on b; its other target a is read too")
	require.Equal(t, map[string]string{"nosuch": `[] | target "nosuch" is not configured on this coordinator (it has a, b, dead): ` +
		"add --target nosuch=DSN to the coordinator"}, targetErrors(resp))

	require.NoError(t, f.b.Stop())
	resp = f.list(t)
	require.Equal(t, []string{"solo"}, names(resp.GetWorkflows()))
	require.Equal(t, []string{"a"}, resp.GetTargetsRead())
	errs = targetErrors(resp)
	require.Equal(t, []string{"b", "dead", "gone"}, sortedKeys(errs))
	require.Regexp(t, `^\[pair\] \| .*cannot reach target server `+f.b.Addr(), errs["b"])

	resp = f.list(t, "b")
	require.Empty(t, resp.GetWorkflows())
	require.Empty(t, resp.GetTargetsRead(), "nothing answered")
	require.Regexp(t, `^\[\] \| .*cannot reach target server `+f.b.Addr(), targetErrors(resp)["b"])
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

// TestListReadsEachTargetInFixedQueries counts the SELECTs a listing runs on
// a target (the server's Com_select): the same with 3 workflows as with 12.
func TestListReadsEachTargetInFixedQueries(t *testing.T) {
	f := newListFixture(t)
	selects := func() int64 {
		var name string
		var n int64
		require.NoError(t, f.aDB.QueryRow("SHOW GLOBAL STATUS LIKE 'Com_select'").Scan(&name, &n))
		return n
	}
	cost := func() int64 {
		f.list(t, "a") // the first call also opens the target's store
		before := selects()
		f.list(t, "a")
		return selects() - before
	}
	for i := range 3 {
		f.record(t, fmt.Sprintf("w%d", i), "a")
	}
	few := cost()
	t.Logf("SELECTs per listing: %d", few)
	for i := 3; i < 12; i++ {
		f.record(t, fmt.Sprintf("w%d", i), "a")
	}
	require.Len(t, f.list(t, "a").GetWorkflows(), 12)
	require.Equal(t, few, cost(), "a listing's queries grow with the number of workflows")
}

// TestNamingTarget: a target error names its target once, whether the
// message already starts with it (t.fail's) or not (a cancelled call), and
// a message about target "mainline" does not pass for one about "main".
func TestNamingTarget(t *testing.T) {
	for msg, want := range map[string]string{
		"target main (10.0.0.5:3306): server unreachable": "target main (10.0.0.5:3306): server unreachable",
		"target main: workflow already exists":            "target main: workflow already exists",
		"context canceled":                                "target main: context canceled",
		"target mainline (10.0.0.6:3306): unreachable":    "target main: target mainline (10.0.0.6:3306): unreachable",
	} {
		require.Equal(t, want, namingTarget("main", msg), msg)
	}
}
