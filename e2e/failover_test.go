package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/state"
)

// TestFailover moves a table while its source fails over three times, under
// writers, through the real binary. The source A has a replica B, B a
// replica C and C a replica D (GTID auto-positioning, replica updates logged).
//
// Unplanned, with nothing lost: the streamer reaches its source through an
// address that is switched underneath it (a TCP proxy, as a virtual IP or a
// DNS name would be). The streamer loses A, A is killed with SIGKILL while the
// writers run, B is promoted once it has applied everything A could have
// streamed, and the address then reaches B; the writers, which reach the
// primary the same way, fail meanwhile and carry on against B. The workflow
// never stops and the table ends identical to B's.
//
// Planned: the writers stop, C catches up with B and is promoted, the streamer
// is restarted with C's DSN on the same address, and the writers resume on C.
// The table ends identical to C's.
//
// A failover that loses writes: D, a replica of C, misses C's last
// transactions, which the target applied; C dies and D is promoted. The
// workflow stops naming them, `rowlift workflow rewind` goes on from D's
// history, and the verify with repair it starts puts right the rows only the
// lost transactions changed, through a kill of the applier.
//
// After each failover the target's position holds transactions the new
// primary wrote itself (on MySQL, the GTID set names every primary's
// server_uuid), so the streamer did read the new primary's binlog.
func TestFailover(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		const rows = 3000
		seed := testSeed(t)
		e := newEnvWith(t, sandbox.Options{Flavor: flavor})
		a, aDB := e.src, e.srcDB
		b, bDB := startReplica(t, a)
		c, cDB := startReplica(t, b)
		d, dDB := startReplica(t, c)
		aName, bName, cName := serverName(t, a, aDB), serverName(t, b, bDB), serverName(t, c, cDB)

		// The writers and the test reach the primary through app, the
		// streamer through src: both are switched when a replica is promoted.
		app, src := newSwitchProxy(t, a.Addr()), newSwitchProxy(t, a.Addr())
		e.srcDB = openAt(t, app.addr())
		e.sourceExec("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY, v INT NOT NULL)",
			fmt.Sprintf("INSERT INTO d.t WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < %d) SELECT i, i FROM s", rows))
		e.streamer = startProc(t, "streamer", e.hooks, "streamer", "--listen", e.streamerAddr, "--source-dsn", "root@tcp("+src.addr()+")/")
		e.startApplier()
		spec := e.workflow("failover", "d", "t")
		spec.Options.ChunkRows = 100
		e.start(spec)
		stopWriters := e.idWriters(seed, []string{"d.t", "d.t"}, rows+500, nil)
		e.waitState("failover", state.Running, 2*time.Minute)
		e.waitCaughtUp("failover", time.Minute)

		// Unplanned. Replication is asynchronous, so a crash can leave the
		// target with transactions B never got (a failover that loses
		// writes). To lose nothing, the streamer loses A first: a write A
		// commits after that lands in A's binlog after everything the target
		// may have got, and B applies it before A dies.
		src.switchTo("")
		sandboxtest.Exec(t, aDB, "INSERT INTO d.t (id, v) VALUES (0, 0) ON DUPLICATE KEY UPDATE v = v + 1")
		waitReplicated(t, flavor, bDB, position(t, aDB))
		require.NoError(t, a.Kill())
		promote(t, flavor, bDB)
		app.switchTo(b.Addr())
		src.switchTo(b.Addr())
		e.writesApplied("failover")
		t.Logf("writes: %v", stopWriters())
		e.waitSettled("failover")
		e.identical("d", "t")
		e.positionNames("failover", flavor, aName, bName)
		require.Contains(t, e.applier.logText(), "the stream's source is another server than before", "the applier logs the failover")

		// Planned: the writers stopped above; C takes over from B.
		waitReplicated(t, flavor, cDB, position(t, bDB))
		promote(t, flavor, cDB)
		app.switchTo(c.Addr())
		e.streamer.stop()
		e.src = c
		e.startStreamer()
		stopWriters = e.idWriters(seed+1, []string{"d.t", "d.t"}, rows+500, nil)
		e.writesApplied("failover")
		t.Logf("writes: %v", stopWriters())
		e.waitSettled("failover")
		e.identical("d", "t")
		e.positionNames("failover", flavor, bName, cName)

		// A failover that loses writes, under writers: D stops replicating,
		// C commits transactions that the target applies and D never gets, C
		// dies and D is promoted, then writes over the same rows: a key the
		// lost INSERT took, rows the lost UPDATE changed and the lost DELETE
		// removed.
		waitReplicated(t, flavor, dDB, position(t, cDB))
		sandboxtest.Exec(t, dDB, replications[flavor].detach[0])
		stopWriters = e.idWriters(seed+2, []string{"d.t", "d.t"}, rows+500, nil)
		sandboxtest.Exec(t, cDB, "UPDATE d.t SET v = v + 1000 WHERE id BETWEEN 1 AND 20", "INSERT INTO d.t (id, v) VALUES (100001, 1), (100002, 2)",
			"DELETE FROM d.t WHERE id BETWEEN 21 AND 30")
		e.waitApplied("failover", position(t, cDB), time.Minute)
		require.NoError(t, c.Kill())
		// Still read-only, D is taken for a replica on its way: the stream waits.
		e.streamer.stop()
		e.src = d
		e.startStreamer()
		e.waitFor("the stream to wait for the read-only source", time.Minute, func() (bool, string) {
			msg := e.streamMessage("failover")
			return strings.Contains(msg, "is read-only and has not applied transactions the target has: "), msg
		})
		promote(t, flavor, dDB)
		app.switchTo(d.Addr())
		e.sourceExec("INSERT INTO d.t (id, v) VALUES (100001, 7) ON DUPLICATE KEY UPDATE v = 7", "UPDATE d.t SET v = -1 WHERE id IN (1, 21)")
		w := e.waitState("failover", state.Error, time.Minute)
		require.Contains(t, w.Message, "lacks transactions the target has applied: ")
		require.Contains(t, w.Message, cName, "the lost transactions are C's")
		require.Contains(t, w.Message, "Nothing was purged")
		require.Contains(t, w.Message, "rowlift workflow rewind failover")
		cl := e.newCLI()
		show := cl.ok("workflow", "show", "failover")
		require.Contains(t, show, "its source lacks transactions the target applied: ")
		require.Contains(t, show, "reads source server "+strings.Trim(cName, "-"), "status names the server the stream last read")

		// The rewind goes on from D's history; replay writes over what the lost
		// transactions left, and a verify with repair puts the rest right.
		require.Contains(t, cl.ok("workflow", "rewind", "failover"), "rewound")
		require.Contains(t, cl.fails(1, "workflow", "rewind", "failover"), "nothing to rewind")
		// The repair's state is the target's: an applier killed right after the
		// rewind goes on with it.
		e.applier.kill()
		e.applier.restart()
		e.writesApplied("failover")
		t.Logf("writes: %v", stopWriters())
		e.waitCaughtUp("failover", time.Minute)
		e.waitFor("the repair to finish", 2*time.Minute, func() (bool, string) {
			streams, err := e.store.Streams(context.Background(), "failover")
			require.NoError(t, err)
			return streams[0].Repairing == "", "repairing " + streams[0].Repairing
		})
		tv, err := e.store.Verify(context.Background(), "failover", "main")
		require.NoError(t, err)
		require.Len(t, tv, 1)
		require.True(t, tv[0].Repair)
		require.Positive(t, tv[0].Repaired, "the rows only the lost transactions changed were repaired: %v", tv[0].Examples)
		e.waitState("failover", state.Running, 10*time.Second)
		e.identical("d", "t")
	})
}

// TestMoveFromAReplica moves a table read from a replica of the primary that
// takes the writes, as Vitess reads by default to spare the primary the copy.
// The streamer's user has only the grants the README lists. A replica that
// does not log what it replicates is refused, saying so; one that does is
// read under writers on the primary, its chunk fence holding the replica's
// SQL thread like any other writer, and the table ends identical.
func TestMoveFromAReplica(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		const rows = 3000
		seed := testSeed(t)
		e := newEnvWith(t, sandbox.Options{Flavor: flavor})
		logsOff, logs := "--log-replica-updates=OFF", "log_replica_updates"
		if flavor == sandbox.MariaDB {
			logsOff, logs = "--log-slave-updates=OFF", "log_slave_updates"
		}
		silent, _ := startReplica(t, e.src, logsOff)
		replica, replicaDB := startReplica(t, e.src)
		e.sourceExec("CREATE USER mover IDENTIFIED BY 'pw'", "GRANT SELECT, LOCK TABLES ON d.* TO mover", "GRANT REPLICATION SLAVE ON *.* TO mover",
			"CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY, v INT NOT NULL)",
			fmt.Sprintf("INSERT INTO d.t WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < %d) SELECT i, i FROM s", rows))
		waitReplicated(t, flavor, replicaDB, position(t, e.srcDB))
		e.streamer = startProc(t, "streamer", e.hooks, "streamer", "--listen", e.streamerAddr, "--source-dsn", "mover:pw@tcp("+silent.Addr()+")/")
		e.startApplier()
		spec := e.workflow("replica", "d", "t")
		spec.Options.ChunkRows = 100
		e.start(spec)
		w := e.waitState("replica", state.Error, time.Minute)
		require.Contains(t, w.Message, "is read-only, so a replica, and has "+logs+"=OFF")

		e.streamer.stop()
		e.streamer = startProc(t, "streamer", e.hooks, "streamer", "--listen", e.streamerAddr, "--source-dsn", "mover:pw@tcp("+replica.Addr()+")/")
		require.NoError(t, e.store.SetState(context.Background(), "replica", state.Copying, ""))
		stopWriters := e.idWriters(seed, []string{"d.t", "d.t"}, rows+500, nil)
		e.waitState("replica", state.Running, 2*time.Minute)
		t.Logf("writes: %v", stopWriters())
		waitReplicated(t, flavor, replicaDB, position(t, e.srcDB))
		e.waitApplied("replica", position(t, replicaDB), time.Minute)
		e.waitState("replica", state.Running, 10*time.Second)
		e.identical("d", "t")
		require.Contains(t, e.streamer.logText(), `"fence_locks"`, "chunks were fenced on the replica")
	})
}

// writesApplied waits until the writers have written to the primary (the
// source's position moves) and the target has applied what they wrote.
func (e *env) writesApplied(workflow string) {
	e.t.Helper()
	before := position(e.t, e.srcDB)
	e.waitFor("writes on the primary", time.Minute, func() (bool, string) {
		now := position(e.t, e.srcDB)
		covered, err := gtid.Covers(before, now)
		require.NoError(e.t, err)
		return !covered, "at " + now
	})
	e.waitCaughtUp(workflow, time.Minute)
}

// positionNames checks that the workflow's applied position holds
// transactions the new primary wrote under its own name, and on MySQL those
// of the old primary too (a MySQL GTID set keeps every server_uuid; a MariaDB
// position keeps the last GTID of each domain, the new primary's). The names
// are serverName's.
func (e *env) positionNames(workflow string, flavor sandbox.Flavor, old, promoted string) {
	e.t.Helper()
	streams, err := e.store.Streams(context.Background(), workflow)
	require.NoError(e.t, err)
	require.Len(e.t, streams, 1)
	pos := streams[0].Position
	if flavor == sandbox.MySQL {
		require.Contains(e.t, pos, old, "the position keeps the old primary's transactions")
	}
	require.Contains(e.t, pos, promoted, "the position holds the new primary's own transactions")
}

// serverName is how a server's own transactions are named in a GTID set:
// its server_uuid on MySQL, "-server_id-" on MariaDB.
func serverName(t *testing.T, s *sandbox.Server, db *sql.DB) string {
	t.Helper()
	if s.Flavor == sandbox.MariaDB {
		return fmt.Sprintf("-%d-", s.ServerID)
	}
	var uuid string
	require.NoError(t, db.QueryRow("SELECT @@GLOBAL.server_uuid").Scan(&uuid))
	return uuid
}

// openAt opens a pool to the server at addr (a proxy's), closed when the
// test ends.
func openAt(t *testing.T, addr string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", "root@tcp("+addr+")/")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// replication is how a flavor's replication is driven (the statements of
// benchmarks/apply/native.go).
type replication struct {
	// changeSource points the replica at the source, given its port.
	changeSource string
	start        string
	// detach stops replicating and forgets the source.
	detach []string
	// wait returns 0 once the replica has applied the GTID set of its first
	// argument, waiting at most its second argument's seconds.
	wait string
	// status shows the replica's state.
	status string
}

var replications = map[sandbox.Flavor]replication{
	sandbox.MariaDB: {
		changeSource: "CHANGE MASTER TO master_host = '127.0.0.1', master_port = %d, master_user = 'root', master_use_gtid = slave_pos",
		start:        "START SLAVE",
		detach:       []string{"STOP SLAVE", "RESET SLAVE ALL"},
		wait:         "MASTER_GTID_WAIT",
		status:       "SHOW SLAVE STATUS",
	},
	sandbox.MySQL: {
		// The sandbox's root has no password, so caching_sha2_password needs
		// neither TLS nor the source's public key.
		changeSource: "CHANGE REPLICATION SOURCE TO SOURCE_HOST = '127.0.0.1', SOURCE_PORT = %d, SOURCE_USER = 'root', SOURCE_AUTO_POSITION = 1",
		start:        "START REPLICA",
		detach:       []string{"STOP REPLICA", "RESET REPLICA ALL"},
		wait:         "WAIT_FOR_EXECUTED_GTID_SET",
		status:       "SHOW REPLICA STATUS",
	},
}

// startReplica starts a server of source's flavor, with args, replicating
// from source with GTID auto-positioning, read-only until promoted, and
// returns it with a pool to it.
func startReplica(t *testing.T, source *sandbox.Server, args ...string) (*sandbox.Server, *sql.DB) {
	t.Helper()
	r := sandboxtest.Start(t, sandbox.Options{Flavor: source.Flavor, Args: args})
	db := sandboxtest.Open(t, r, "")
	rpl := replications[source.Flavor]
	sandboxtest.Exec(t, db, "SET GLOBAL read_only = ON", fmt.Sprintf(rpl.changeSource, source.Port), rpl.start)
	return r, db
}

// waitReplicated waits until the replica has applied every transaction of
// the GTID set pos.
func waitReplicated(t *testing.T, flavor sandbox.Flavor, replica *sql.DB, pos string) {
	t.Helper()
	rpl := replications[flavor]
	var res int
	require.NoError(t, replica.QueryRow("SELECT "+rpl.wait+"(?, ?)", pos, 60).Scan(&res))
	if res != 0 {
		t.Fatalf("the replica did not apply %s within 60 s: %s", pos, replicaStatus(t, replica, rpl.status))
	}
}

// replicaStatus is the replica's errors and positions, for failure messages.
func replicaStatus(t *testing.T, db *sql.DB, query string) string {
	t.Helper()
	rows, err := db.Query(query)
	require.NoError(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	if !rows.Next() {
		return "not a replica"
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	require.NoError(t, rows.Scan(ptrs...))
	var out []string
	for i, col := range cols {
		if strings.Contains(col, "Error") || strings.Contains(col, "Running") || strings.Contains(col, "Gtid") {
			out = append(out, col+"="+strings.ReplaceAll(vals[i].String, "\n", ""))
		}
	}
	return strings.Join(out, ", ")
}

// promote makes a replica a primary: it stops replicating, forgets its
// source and takes writes.
func promote(t *testing.T, flavor sandbox.Flavor, replica *sql.DB) {
	t.Helper()
	sandboxtest.Exec(t, replica, append(replications[flavor].detach, "SET GLOBAL read_only = OFF")...)
}

// switchProxy forwards TCP connections to a target address that can be
// switched; a switch closes the connections it forwards, as a moved virtual
// IP would, and an empty target refuses new ones (closes them at once).
type switchProxy struct {
	ln net.Listener
	mu sync.Mutex
	// target is where new connections go, gen counts the switches.
	target string
	gen    int
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newSwitchProxy(t *testing.T, target string) *switchProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &switchProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.switchTo("")
		p.wg.Wait()
	})
	return p
}

func (p *switchProxy) addr() string { return p.ln.Addr().String() }

// switchTo sends new connections to target and closes those open.
func (p *switchProxy) switchTo(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
	p.gen++
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *switchProxy) serve() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.forward(client)
		}()
	}
}

func (p *switchProxy) forward(client net.Conn) {
	defer client.Close()
	p.mu.Lock()
	target, gen := p.target, p.gen
	p.mu.Unlock()
	if target == "" {
		return
	}
	server, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		return
	}
	defer server.Close()
	p.mu.Lock()
	if p.gen != gen { // switched while dialing
		p.mu.Unlock()
		return
	}
	p.conns[client], p.conns[server] = struct{}{}, struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(server, client); done <- struct{}{} }()
	go func() { _, _ = io.Copy(client, server); done <- struct{}{} }()
	<-done
	client.Close()
	server.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, client)
	delete(p.conns, server)
	p.mu.Unlock()
}
