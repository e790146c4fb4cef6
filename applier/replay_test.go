package applier

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/rowlift/rowlift/applier/schedule"
	"github.com/rowlift/rowlift/applier/writeset"
	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/metrics"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// hotFields is a table whose rows the commit-order deadlock tests update: n is
// NULL in every row.
func hotFields() *rowliftv1.TableFields {
	return &rowliftv1.TableFields{
		Table: "hot",
		Fields: []*rowliftv1.Field{
			{Name: "id", DataType: "int", ColumnType: "int"},
			{Name: "v", DataType: "int", ColumnType: "int"},
			{Name: "n", DataType: "int", ColumnType: "int", Nullable: true},
		},
		PkColumns:   []int32{0},
		CreateTable: []byte("CREATE TABLE `hot` (id INT PRIMARY KEY, v INT NOT NULL, n INT NULL)"),
	}
}

// hotReplayer creates workflow w over d.hot on db with opts, fills d.hot for
// replayHot's n transactions and starts a replayer of 4 workers into it.
func hotReplayer(t *testing.T, db *sql.DB, n int, opts *rowliftv1.WorkflowOptions) (*replayer, *state.Store) {
	ctx := context.Background()
	store, err := state.Open(ctx, db)
	require.NoError(t, err)
	spec := &rowliftv1.WorkflowSpec{Name: "w", SourceDatabase: "d",
		Sources: []*rowliftv1.SourceShard{{Name: "main", StreamerAddress: "127.0.0.1:1"}},
		Targets: []*rowliftv1.TargetShard{{Name: "main"}}, Tables: []*rowliftv1.TableSpec{{Name: "hot"}},
		Options: opts}
	require.NoError(t, store.CreateWorkflow(ctx, spec, "main"))
	owner, err := store.TakeOver(ctx, "w", "main")
	require.NoError(t, err)
	tables, err := prepareTargets(ctx, db, spec, []*rowliftv1.TableFields{hotFields()}, nil, 1<<20, nil)
	require.NoError(t, err)
	seedHot(t, db, n)
	stats := metrics.OpenApplyStream("w", "main", "main", []string{"hot"})
	t.Cleanup(stats.Close)
	play, err := newPlayer(db, "w", "main", "main", owner, tables, state.Resume{}, stats)
	require.NoError(t, err)
	r, err := newReplayer(ctx, db, play, spec.GetOptions(), 4, 1<<20, zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.close()) })
	return r, store
}

// blindReplayer is hotReplayer's, one source transaction per group, in source
// order, with writesets that see nothing: they hash the rows by a unique key
// on n, NULL in every row, so every transaction may run beside every other,
// as if their conflicts were all through locks the writesets cannot see (gap
// locks, a target's own keys). Two groups that update the same row then
// conflict in the server only: a later group that locked the row first holds
// it while it waits for its commit turn, and the oldest group waits for it in
// InnoDB, a deadlock the server cannot see.
func blindReplayer(t *testing.T, db *sql.DB, n int) *replayer {
	r, _ := hotReplayer(t, db, n, &rowliftv1.WorkflowOptions{ApplyWorkers: 4, CommitBatchItems: 1})
	sandboxtest.Exec(t, db, "CREATE TABLE d.hot_blind (id INT NOT NULL, v INT NOT NULL, n INT NOT NULL PRIMARY KEY)")
	blind, err := writeset.Load(context.Background(), db, "d", "hot_blind", hotFields())
	require.NoError(t, err)
	r.mu.Lock()
	r.keys["hot"] = blind
	r.mu.Unlock()
	return r
}

// hotTransactions is how many transactions the deadlock tests replay.
const hotTransactions = 60

// privateRows is how many rows of its own each odd transaction of replayHot
// updates before the hot row: enough that the even transaction after it,
// started at the same time, reaches the hot row first even when the machine
// is loaded (with 50, a loaded MySQL run saw no deadlock in 60 transactions).
const privateRows = 400

// hotID is the hot row's key, above every private row's: a group's coalesced
// DELETE finds its rows in key order, so an odd group reaches the hot row
// only after its private rows. With the hot row first, an IN list reached it
// before the even group after it often enough that a MySQL run saw no
// deadlock in 60 transactions.
const hotID = 1 << 30

// seedHot fills d.hot for replayHot's n transactions: the hot row, and the
// private rows of the odd ones.
func seedHot(t *testing.T, db *sql.DB, n int) {
	values := []string{fmt.Sprintf("(%d, 0, NULL)", hotID)}
	for i := 1; i <= n; i += 2 {
		for j := range privateRows {
			values = append(values, fmt.Sprintf("(%d, 0, NULL)", privateRows*(i+1)+j))
		}
	}
	sandboxtest.Exec(t, db, "INSERT INTO d.hot VALUES "+strings.Join(values, ", "))
}

// replayHot submits n source transactions that each set v of the hot row to
// the transaction's number; the odd ones first set their private rows: a
// group that updates only the hot row locks it before the odd group before it
// gets there, executes and waits for its commit turn, and the older group then
// waits for it in InnoDB. It waits until every transaction has committed and
// checks that every row holds the number of the last transaction that set
// it: the commits kept source order.
func replayHot(t *testing.T, db *sql.DB, r *replayer, n int) {
	cell := func(v int) []byte { return []byte(strconv.Itoa(v)) }
	update := func(id, from, to int) *rowliftv1.RowChange {
		return &rowliftv1.RowChange{Before: row(cell(id), cell(from), nil), After: row(cell(id), cell(to), nil)}
	}
	for i := 1; i <= n; i++ {
		var changes []*rowliftv1.RowChange
		if i%2 == 1 {
			for j := range privateRows {
				changes = append(changes, update(privateRows*(i+1)+j, 0, i))
			}
		}
		changes = append(changes, update(hotID, i-1, i))
		trx := &rowliftv1.Transaction{Gtid: fmt.Sprintf("00000000-0000-0000-0000-000000000001:%d", i),
			Position: &rowliftv1.Position{GtidSet: "00000000-0000-0000-0000-000000000001:1-" + strconv.Itoa(i)},
			Events:   []*rowliftv1.RowEvent{{Table: "hot", Changes: changes}}}
		require.NoError(t, r.submit(trx))
	}
	drained := make(chan error, 1)
	go func() { drained <- r.drain() }()
	select {
	case err := <-drained:
		require.NoError(t, err)
	case <-time.After(3 * time.Minute): // a hang guard, not a speed limit
		r.mu.Lock()
		defer r.mu.Unlock()
		t.Fatalf("replay hung: low watermark %d, pending %d, workers hold %+v", r.sched.LowWatermark(), r.sched.Pending(), r.held)
	}
	var hot, wrong int
	require.NoError(t, db.QueryRow("SELECT v FROM d.hot WHERE id = ?", hotID).Scan(&hot))
	require.Equal(t, n, hot, "the hot row holds the last transaction's value")
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM d.hot WHERE id < ? AND v <> FLOOR(id / ?) - 1", hotID, privateRows).Scan(&wrong))
	require.Zero(t, wrong, "private rows hold their transaction's number")
}

// rollbacks returns the rollbacks the stuck-group rule decided, by reason.
func (r *replayer) rollbacks() map[schedule.Reason]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[schedule.Reason]int{}
	for k, v := range r.unstuck {
		out[k] = v
	}
	return out
}

// Real commit-order deadlocks are broken by the server's evidence: the
// rollbacks name the groups holding the oldest one's lock on MariaDB (through
// INNODB_LOCK_WAITS) and on MySQL with performance_schema on
// (data_lock_waits); with it off (the sandbox's default) MySQL only says the
// oldest group waits, and every later executed group is rolled back. Every
// transaction commits, in source order, and no rollback is taken on timing.
func TestReplayBreaksCommitOrderDeadlocks(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		cases := []struct {
			name string
			args []string
			want schedule.Reason
		}{{"INNODB_LOCK_WAITS", nil, schedule.LockWait}}
		if flavor == sandbox.MySQL {
			cases = []struct {
				name string
				args []string
				want schedule.Reason
			}{
				{"performance_schema off", nil, schedule.LockWaitUnnamed},
				{"performance_schema on", []string{"--performance-schema=ON"}, schedule.LockWait},
			}
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				srv := sandboxtest.Start(t, sandbox.Options{Flavor: flavor, Args: c.args})
				db, _, err := dbconn.Open(srv.DSN(""), dbconn.Target)
				require.NoError(t, err)
				t.Cleanup(func() { db.Close() })
				r := blindReplayer(t, db, hotTransactions)
				require.NotNil(t, r.probe, "root may see lock waits")
				replayHot(t, db, r, hotTransactions)
				got := r.rollbacks()
				t.Logf("rollbacks by reason: %v; window %d", got, r.window.Limit())
				require.Positive(t, got[c.want], "no deadlock was broken by %s: the test did not reach its case", c.want)
				require.Zero(t, got[schedule.Overdue], "a rollback on timing although the server could tell")
			})
		}
	})
}

// A target user without the PROCESS privilege cannot see lock waits: the
// replayer says so and falls back to timing, from the groups' own latency,
// and the deadlocks still resolve.
func TestReplayWithoutProcessPrivilegeFallsBackToTiming(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		srv := sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
		root := sandboxtest.Open(t, srv, "")
		sandboxtest.Exec(t, root, "CREATE DATABASE d", "CREATE DATABASE "+state.Schema,
			"CREATE USER 'noproc'@'%'", "GRANT ALL ON d.* TO 'noproc'@'%'", "GRANT ALL ON "+state.Schema+".* TO 'noproc'@'%'")
		db, _, err := dbconn.Open("noproc@tcp("+srv.Addr()+")/", dbconn.Target)
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		r := blindReplayer(t, db, hotTransactions)
		require.Nil(t, r.probe, "a user without PROCESS sees no lock waits")
		replayHot(t, db, r, hotTransactions)
		got := r.rollbacks()
		t.Logf("rollbacks by reason: %v; window %d", got, r.window.Limit())
		require.Positive(t, got[schedule.Overdue], "no deadlock was broken on timing: the test did not reach its case")
	})
}

// Out of order, each group's slot holds the low watermark from before its
// commit. The commit that leaves nothing in flight records the one after, so
// the position shows the end of a burst at once: this replay has no stream,
// hence no idle heartbeat to move it.
func TestOutOfOrderReplayRecordsItsEnd(t *testing.T) {
	const n = 200
	srv := sandboxtest.Start(t, sandbox.Options{})
	db, _, err := dbconn.Open(srv.DSN(""), dbconn.Target)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	r, store := hotReplayer(t, db, 0, &rowliftv1.WorkflowOptions{ApplyWorkers: 4, CommitBatchItems: 1, OutOfOrderCommit: true})
	end := "00000000-0000-0000-0000-000000000001:1-" + strconv.Itoa(n)
	for i := 1; i <= n; i++ {
		cell := []byte(strconv.Itoa(i))
		require.NoError(t, r.submit(&rowliftv1.Transaction{Gtid: fmt.Sprintf("00000000-0000-0000-0000-000000000001:%d", i),
			Position: &rowliftv1.Position{GtidSet: "00000000-0000-0000-0000-000000000001:1-" + strconv.Itoa(i)},
			Events:   []*rowliftv1.RowEvent{{Table: "hot", Changes: []*rowliftv1.RowChange{{After: row(cell, cell, nil)}}}}}))
	}
	require.NoError(t, r.drain())
	var count int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM d.hot WHERE id = v").Scan(&count))
	require.Equal(t, n, count, "every transaction applied")
	var position string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) { // a hang guard
		streams, err := store.Streams(context.Background(), "w")
		require.NoError(t, err)
		require.Len(t, streams, 1)
		position = streams[0].Position
		if covers, err := gtid.Covers(position, end); err == nil && covers {
			return
		}
	}
	t.Fatalf("the position stays at %q after every transaction up to %q committed", position, end)
}
