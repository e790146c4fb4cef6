package coordinator

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
	"github.com/rowlift/rowlift/streamer/streamertest"
)

// deadAddr is a local address nothing listens on: a port FreePort hands to
// no one else, where a listen on port 0 in another test cannot land either.
func deadAddr(t *testing.T) string {
	port, err := sandbox.FreePort()
	require.NoError(t, err)
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// createFixture is a source (with its streamer) and a target, and a
// coordinator configured with the target as "main", the same server again as
// "twin", and a dead address as "dead".
type createFixture struct {
	src          *sandbox.Server
	srcDB, dstDB *sql.DB
	streamer     string
	coord        *Server
	store        *state.Store
}

// servers starts a source and a target of flavor.
func servers(t *testing.T, flavor sandbox.Flavor) (src, dst *sandbox.Server) {
	src = sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
	dst = sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
	return src, dst
}

// shopCharset is the default character set of the test's databases, the same
// on both flavors (their own defaults differ), so that tables created alike on
// source and target have the same shape. The tables a target must take have
// no integer column: a MariaDB source shows int(11) where MySQL shows int.
const shopCharset = "CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"

func newCreateFixture(t *testing.T, flavor sandbox.Flavor) *createFixture {
	src, dst := servers(t, flavor)
	f := &createFixture{src: src, srcDB: sandboxtest.Open(t, src, ""), dstDB: sandboxtest.Open(t, dst, ""), streamer: streamertest.Serve(t, src)}
	sandboxtest.Exec(t, f.srcDB, "CREATE DATABASE shop "+shopCharset,
		"CREATE TABLE shop.orders (id INT PRIMARY KEY, total DECIMAL(10,2), note VARCHAR(20))",
		"INSERT INTO shop.orders VALUES (1, 9.99, 'a'), (2, 5.00, NULL)",
		"CREATE TABLE shop.items (sku VARCHAR(10) NOT NULL, qty DECIMAL(10,0), UNIQUE KEY (sku))",
		"CREATE TABLE shop.nokey (a INT, b INT NULL, UNIQUE KEY (b))")
	coord, err := New(Config{Targets: map[string]string{
		"main": dst.DSN(""),
		"twin": dst.DSN(""),
		"dead": "root:s3cret-pass@tcp(" + deadAddr(t) + ")/",
	}})
	require.NoError(t, err)
	t.Cleanup(coord.Close)
	f.coord = coord
	f.store, err = state.Open(context.Background(), f.dstDB)
	require.NoError(t, err)
	return f
}

func (f *createFixture) spec(name string, tables ...string) *rowliftv1.WorkflowSpec {
	spec := &rowliftv1.WorkflowSpec{
		Name:           name,
		SourceDatabase: "shop",
		Sources:        []*rowliftv1.SourceShard{{Name: "main", StreamerAddress: f.streamer}},
		Targets:        []*rowliftv1.TargetShard{{Name: "main"}},
	}
	for _, tbl := range tables {
		spec.Tables = append(spec.Tables, &rowliftv1.TableSpec{Name: tbl})
	}
	return spec
}

// nothingWritten checks that the target has no state of the workflow and no
// database or table it would have created.
func (f *createFixture) nothingWritten(t *testing.T, name string) {
	t.Helper()
	for _, table := range []string{"workflow", "stream", "copy_state"} {
		col := "workflow"
		if table == "workflow" {
			col = "name"
		}
		var n int
		require.NoError(t, f.dstDB.QueryRow("SELECT COUNT(*) FROM "+state.Schema+"."+table+" WHERE "+col+" = ?", name).Scan(&n))
		require.Zero(t, n, "%s rows of workflow %s", table, name)
	}
	var tables int
	require.NoError(t, f.dstDB.QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'shop'").Scan(&tables))
	require.Zero(t, tables, "no target table may be created")
}

// TestCreateRefusesBadWorkflows sends each request an operator can get wrong:
// each is refused with the code a client branches on and a message that names
// the table, setting or address, and leaves nothing on the target.
func TestCreateRefusesBadWorkflows(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		f := newCreateFixture(t, flavor)
		ctx := context.Background()
		badSrc := sandboxtest.Start(t, sandbox.Options{Flavor: f.src.Flavor, Args: []string{"--binlog-format=STATEMENT", "--binlog-row-image=MINIMAL"}})
		sandboxtest.Exec(t, sandboxtest.Open(t, badSrc, ""), "CREATE DATABASE shop", "CREATE TABLE shop.orders (id INT PRIMARY KEY)")
		badStreamer := streamertest.Serve(t, badSrc)
		dead := deadAddr(t)

		cases := []struct {
			name   string
			edit   func(*rowliftv1.WorkflowSpec)
			tables []string
			code   codes.Code
			want   []string
		}{
			{name: "nokey", tables: []string{"orders", "nokey"}, code: codes.FailedPrecondition,
				want: []string{"shop.nokey has no PRIMARY KEY and no UNIQUE key on NOT NULL columns", "add a primary key"}},
			{name: "missing-table", tables: []string{"orders", "ghost"}, code: codes.InvalidArgument,
				want: []string{"shop.ghost", "does not exist", "check the workflow's table list"}},
			{name: "missing-database", tables: []string{"orders"}, code: codes.InvalidArgument,
				edit: func(s *rowliftv1.WorkflowSpec) { s.SourceDatabase = "nowhere" }, want: []string{"nowhere.orders", "does not exist"}},
			{name: "binlog-settings", tables: []string{"orders"}, code: codes.FailedPrecondition,
				edit: func(s *rowliftv1.WorkflowSpec) { s.Sources[0].StreamerAddress = badStreamer },
				want: []string{"binlog_format=STATEMENT; rowlift needs binlog_format=ROW", "binlog_row_image=MINIMAL; rowlift needs binlog_row_image=FULL",
					setting(f.src.Flavor)}},
			{name: "unreachable-streamer", tables: []string{"orders"}, code: codes.Unavailable,
				edit: func(s *rowliftv1.WorkflowSpec) { s.Sources[0].StreamerAddress = dead },
				want: []string{"source main (streamer " + dead + ")", "connection refused", "is the streamer running"}},
			{name: "unreachable-target", tables: []string{"orders"}, code: codes.Unavailable,
				edit: func(s *rowliftv1.WorkflowSpec) { s.Targets = append(s.Targets, &rowliftv1.TargetShard{Name: "dead"}) },
				want: []string{"target dead", "cannot reach target server"}},
			{name: "unknown-target", tables: []string{"orders"}, code: codes.InvalidArgument,
				edit: func(s *rowliftv1.WorkflowSpec) { s.Targets[0].Name = "elsewhere" },
				want: []string{`"elsewhere"`, "not configured on this coordinator", "dead, main, twin"}},
			{name: "bad-target-name", tables: []string{"orders"}, code: codes.InvalidArgument,
				edit: func(s *rowliftv1.WorkflowSpec) { s.Targets[0].Name = "main.1" }, want: []string{`target name "main.1": use 1 to 64 letters`}},
			{name: "bad-reverse-target", tables: []string{"orders"}, code: codes.InvalidArgument,
				edit: func(s *rowliftv1.WorkflowSpec) { s.Sources[0].ReverseTarget = "old source" },
				want: []string{`source main's reverse target: target name "old source": use 1 to 64 letters`}},
			{name: "bad-key-range", tables: []string{"orders"}, code: codes.InvalidArgument,
				edit: func(s *rowliftv1.WorkflowSpec) { s.Targets[0].KeyRange = "80-4x" }, want: []string{`key range "80-4x"`, "hexadecimal"}},
			{name: "reversed-key-range", tables: []string{"orders"}, code: codes.InvalidArgument,
				edit: func(s *rowliftv1.WorkflowSpec) { s.Targets[0].KeyRange = "80-40" }, want: []string{`key range "80-40"`, "start is not below end"}},
			{name: "unknown-column", tables: []string{"orders"}, code: codes.InvalidArgument,
				edit: func(s *rowliftv1.WorkflowSpec) { s.Tables[0].Columns = []string{"id", "totl"} }, want: []string{`shop.orders has no column "totl"`}},
			{name: "key-column-left-out", tables: []string{"orders"}, code: codes.InvalidArgument,
				edit: func(s *rowliftv1.WorkflowSpec) { s.Tables[0].Columns = []string{"total"} }, want: []string{"must include key column id"}},
			{name: "bad name", tables: []string{"orders"}, code: codes.InvalidArgument, want: []string{"workflow name", "letters, digits"}},
			{name: "table-twice", tables: []string{"orders", "ORDERS"}, code: codes.InvalidArgument, want: []string{`table "orders" is named twice`}},
			{name: "target-table-twice", tables: []string{"orders", "items"}, code: codes.InvalidArgument,
				edit: func(s *rowliftv1.WorkflowSpec) { s.Tables[1].TargetTable = "Orders" }, want: []string{`target table "orders" is named twice`}},
			{name: "mapped-target-missing", tables: []string{"orders"}, code: codes.FailedPrecondition,
				edit: func(s *rowliftv1.WorkflowSpec) { s.Tables[0].TargetTable = "_orders_frozen" },
				want: []string{"target table shop._orders_frozen (the target_table of orders) does not exist", "never creates a mapped target table"}},
			{name: "bad-lag-query", tables: []string{"orders"}, code: codes.InvalidArgument,
				edit: func(s *rowliftv1.WorkflowSpec) {
					s.Options = &rowliftv1.WorkflowOptions{Throttle: &rowliftv1.Throttle{
						Source: &rowliftv1.ThrottleLimits{LagQuery: "SELECT lag FROM nowhere.replicas", MaxLagSeconds: 10}}}
				},
				want: []string{"source lag unreadable", "nowhere.replicas", "fix the source throttle's lag setting"}},
			{name: "negative-chunk-bytes", tables: []string{"orders"}, code: codes.InvalidArgument,
				edit: func(s *rowliftv1.WorkflowSpec) { s.Options = &rowliftv1.WorkflowOptions{ChunkBytes: -1} },
				want: []string{"option chunk_bytes is -1: use a positive number, or 0 for the default"}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				spec := f.spec(tc.name, tc.tables...)
				if tc.edit != nil {
					tc.edit(spec)
				}
				_, err := f.coord.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: spec})
				t.Log(err)
				require.Equal(t, tc.code, status.Code(err), "%v", err)
				for _, part := range tc.want {
					require.Contains(t, status.Convert(err).Message(), part)
				}
				require.NotContains(t, err.Error(), "s3cret-pass", "a password leaked")
				f.nothingWritten(t, tc.name)
			})
		}
	})
}

// setting is how the fix of a source setting begins on the flavor: MySQL's
// SET PERSIST survives a restart.
func setting(flavor sandbox.Flavor) string {
	if flavor == sandbox.MySQL {
		return "SET PERSIST"
	}
	return "SET GLOBAL"
}

// intType is an integer COLUMN_TYPE as the flavor shows it: MySQL dropped
// the display width.
func intType(flavor sandbox.Flavor, name string, width int) string {
	if flavor == sandbox.MySQL {
		return name
	}
	return fmt.Sprintf("%s(%d)", name, width)
}

// TestCreateRefusesIncompatibleTargetTables: an existing target table of
// another shape, or one that holds rows, fails the creation with what differs.
func TestCreateRefusesIncompatibleTargetTables(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		f := newCreateFixture(t, flavor)
		ctx := context.Background()
		sandboxtest.Exec(t, f.dstDB, "CREATE DATABASE shop "+shopCharset,
			"CREATE TABLE shop.orders (id BIGINT PRIMARY KEY, total DECIMAL(10,2), note VARCHAR(20))",
			"CREATE TABLE shop.items (sku VARCHAR(10) NOT NULL, qty DECIMAL(10,0), UNIQUE KEY (sku))", "INSERT INTO shop.items VALUES ('x', 1)")
		for _, tc := range []struct {
			table string
			want  []string
		}{
			{"orders", []string{"target main", "target table shop.orders differs from the source",
				"column id is " + intType(flavor, "bigint", 20) + ", source has " + intType(f.src.Flavor, "int", 11)}},
			{"items", []string{"target main", "target table shop.items already has rows",
				"create the workflow with --allow-nonempty-target (allow_nonempty_target in the API)"}},
		} {
			_, err := f.coord.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: f.spec("incompatible", tc.table)})
			require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
			for _, part := range tc.want {
				require.Contains(t, status.Convert(err).Message(), part)
			}
			ws, err := f.store.Workflows(ctx)
			require.NoError(t, err)
			require.Empty(t, ws)
		}
		var n int
		require.NoError(t, f.dstDB.QueryRow("SELECT COUNT(*) FROM shop.items").Scan(&n))
		require.Equal(t, 1, n, "the target table is left as it was")

		// Told to copy into a non-empty table, the same creation passes.
		spec := f.spec("nonempty-ok", "items")
		spec.Options = &rowliftv1.WorkflowOptions{AllowNonemptyTarget: true}
		_, err := f.coord.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: spec})
		require.NoError(t, err)

		// A table mapped to another target table is checked against that one.
		sandboxtest.Exec(t, f.dstDB, "CREATE TABLE shop.items_mapped (sku VARCHAR(10) NOT NULL, qty DECIMAL(10,0), UNIQUE KEY (sku))")
		spec = f.spec("mapped", "items")
		spec.Tables[0].TargetTable = "items_mapped"
		_, err = f.coord.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: spec})
		require.NoError(t, err)
	})
}

// TestCreateDuplicateAndRollback: a name taken on a target is refused with
// AlreadyExists; a workflow whose second target fails while being written is
// removed again from the first.
func TestCreateDuplicateAndRollback(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		f := newCreateFixture(t, flavor)
		ctx := context.Background()
		w, err := f.coord.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: f.spec("move", "orders", "items")})
		require.NoError(t, err)
		require.Equal(t, rowliftv1.WorkflowState_WORKFLOW_STATE_INIT, w.GetStatus().GetState())
		require.Equal(t, rowliftv1.WorkflowPhase_WORKFLOW_PHASE_INIT, w.GetStatus().GetPhase())
		require.EqualValues(t, 2, w.GetStatus().GetTables()[0].GetRowsEstimate(), "the source's estimate is recorded at creation")
		require.Positive(t, w.GetStatus().GetTables()[0].GetBytesEstimate(), "the source's size too")

		_, err = f.coord.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: f.spec("move", "orders")})
		require.Equal(t, codes.AlreadyExists, status.Code(err), "%v", err)
		require.Contains(t, err.Error(), `workflow "move" already exists on target main (state init)`)
		stored, err := f.store.Workflow(ctx, "move")
		require.NoError(t, err)
		require.Len(t, stored.Spec.GetTables(), 2, "the existing workflow is untouched")

		// "twin" is the same server as "main": it passes every check, and writing it
		// fails after main is written, which must be undone.
		spec := f.spec("both", "orders")
		spec.Targets = append(spec.Targets, &rowliftv1.TargetShard{Name: "twin"})
		_, err = f.coord.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: spec})
		require.Equal(t, codes.AlreadyExists, status.Code(err), "%v", err)
		require.Contains(t, err.Error(), "target twin")
		f.nothingWritten(t, "both")
	})
}

func TestNewRefusesBadTargetName(t *testing.T) {
	_, err := New(Config{Targets: map[string]string{"main": "root@tcp(127.0.0.1:1)/", "shard 2": "root@tcp(127.0.0.1:1)/"}})
	require.EqualError(t, err, `target name "shard 2": use 1 to 64 letters, digits, '_' or '-', e.g. main or shard-80`)
}

// A new workflow that leaves on_ddl unset applies schema changes (EXEC),
// stored as such, since a stored unset on_ddl means STOP; a set one is kept,
// and the request is not changed.
func TestNewWorkflowsExecSchemaChanges(t *testing.T) {
	unset := &rowliftv1.WorkflowSpec{Name: "w"}
	require.Equal(t, rowliftv1.OnDDL_ON_DDL_EXEC, withDefaults(unset).GetOptions().GetOnDdl())
	require.Nil(t, unset.GetOptions(), "the request is not changed")
	for _, d := range []rowliftv1.OnDDL{rowliftv1.OnDDL_ON_DDL_STOP, rowliftv1.OnDDL_ON_DDL_IGNORE, rowliftv1.OnDDL_ON_DDL_EXEC} {
		spec := &rowliftv1.WorkflowSpec{Name: "w", Options: &rowliftv1.WorkflowOptions{OnDdl: d, ChunkRows: 5}}
		require.Equal(t, d, withDefaults(spec).GetOptions().GetOnDdl())
		require.Equal(t, int64(5), withDefaults(spec).GetOptions().GetChunkRows())
	}
}
