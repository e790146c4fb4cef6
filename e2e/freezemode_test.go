package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/frozen"
	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/state"
)

// The cutover's other freeze modes, beside the default rename of
// cutover_test.go: --freeze lock (LOCK TABLES ... READ held by the streamer
// for the write pause) and --freeze none (the caller stopped the writes).
// A lock freeze ends as a rename freeze does: before the lock is released, the
// tables of the side that lost the writes are renamed to their frozen twins,
// so what was queued behind the lock, and any writer the routing missed, gets
// "doesn't exist" there (see handOver and strayWrite). A none freeze renames
// nothing: the tables stay writable, and only the routing keeps writers off
// them.

// sides returns the servers that lose and gain the writes in a cutover.
func (p *pairEnv) sides(direction string) (losing, gaining *sql.DB) {
	if direction == "switch" {
		return p.srcDB, p.dstDB
	}
	return p.dstDB, p.srcDB
}

// waitBlocked waits until every running writer, and extra more sessions of
// the application, wait for a table lock on db: a LOCK freeze blocks writers
// rather than failing them.
func (p *pairEnv) waitBlocked(db *sql.DB, extra int, what string) {
	p.t.Helper()
	p.waitFor("every writer to wait for the freeze lock "+what, time.Minute, func() (bool, string) {
		var n int
		err := db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = 'app' AND STATE = 'Waiting for table metadata lock'").Scan(&n)
		return err == nil && n == p.writing+extra, fmt.Sprintf("%d of %d writers wait (%v)", n, p.writing+extra, err)
	})
}

// handOver is the test's side of the routing hook of a lock cutover, which the
// coordinator runs while the lock holds: every writer waits for the lock
// (blocked, not failed), as does one more statement queued behind it (an
// INSERT of a key no writer uses), and the application is re-routed to the
// gaining side. Nothing shuts the application out of the losing side: rowlift
// renames its tables before it releases the lock, so the statements queued
// there fail with "doesn't exist" (the writers retry where they are routed
// now) instead of committing where nothing streams them. queuedKey is the
// queued INSERT's key; checkQueued checks it failed so, once the cutover is done.
func (p *pairEnv) handOver(direction string) (checkQueued func()) {
	p.t.Helper()
	ctx := context.Background()
	losing, _ := p.sides(direction)
	app := p.appSrc
	if direction == "reverse" {
		app = p.appDst
	}
	conn, err := app.Conn(ctx)
	require.NoError(p.t, err)
	// Bounds a lock never released, so a broken cutover fails the test
	// rather than hang it.
	_, err = conn.ExecContext(ctx, "SET SESSION lock_wait_timeout = 600")
	require.NoError(p.t, err)
	key := 10*p.keys + 1 // no writer's
	queued := make(chan error, 1)
	go func() {
		defer conn.Close()
		_, err := conn.ExecContext(ctx, fmt.Sprintf("INSERT INTO race.ints VALUES (%d, 'queued', NULL)", key))
		queued <- err
	}()
	p.waitBlocked(losing, 1, "in the routing hook")
	p.reroute(direction)
	return func() {
		p.t.Helper()
		err := <-queued
		require.Error(p.t, err, "the INSERT queued behind the lock on the side that lost the writes must not commit")
		require.Contains(p.t, err.Error(), "doesn't exist", "the INSERT queued behind the lock")
		fz, err := frozen.Name("ints")
		require.NoError(p.t, err)
		var n int
		require.NoError(p.t, losing.QueryRow(fmt.Sprintf("SELECT COUNT(*) FROM race.%s WHERE id = %d", fz, key)).Scan(&n))
		require.Zero(p.t, n, "the queued INSERT is nowhere on the side that lost the writes")
	}
}

// strayWrite writes a row on the side that lost the writes, as a writer the
// routing missed (or re-routed back naively) would. After a lock freeze it
// fails with "doesn't exist": the tables were renamed before the lock was
// released. After a none freeze nothing stops it (the tables are there), and
// nothing moves it: the stopping workflow is parked, its streams short of it;
// the row is removed again.
func (p *pairEnv) strayWrite(direction string) {
	p.t.Helper()
	ctx := context.Background()
	losing, _ := p.sides(direction)
	p.strays++
	key := 10*p.keys + p.strays // no writer's, and no earlier stray write's
	if p.freeze == "lock" {
		_, err := losing.ExecContext(ctx, fmt.Sprintf("INSERT INTO race.ints VALUES (%d, 'stray', NULL)", key))
		require.Error(p.t, err, "a write into race.ints on the side that lost the writes under a lock freeze")
		require.Contains(p.t, err.Error(), "doesn't exist")
		return
	}
	store, stopped := p.store, "race"
	if direction == "reverse" {
		store, stopped = p.srcStore, "race_reverse"
	}
	conn, err := losing.Conn(ctx)
	require.NoError(p.t, err)
	defer conn.Close()
	// A lock left in place fails the write rather than hang the test.
	_, err = conn.ExecContext(ctx, "SET SESSION lock_wait_timeout = 10")
	require.NoError(p.t, err)
	_, err = conn.ExecContext(ctx, fmt.Sprintf("INSERT INTO race.ints VALUES (%d, 'stray', NULL)", key))
	require.NoError(p.t, err, "a write into race.ints on the side that lost the writes")
	var gtid string
	require.NoError(p.t, conn.QueryRowContext(ctx, "SELECT @@last_gtid").Scan(&gtid))

	w, err := store.Workflow(ctx, stopped)
	require.NoError(p.t, err)
	require.Equal(p.t, state.Switched, w.State, "%s is parked", stopped)
	streams, err := store.Streams(ctx, stopped)
	require.NoError(p.t, err)
	for _, st := range streams {
		require.False(p.t, covers(p.t, st.Position, gtid), "%s applied the stray write %s", stopped, gtid)
	}
	_, err = conn.ExecContext(ctx, fmt.Sprintf("DELETE FROM race.ints WHERE id = %d", key))
	require.NoError(p.t, err)
}

// covers reports whether GTID set a contains b.
func covers(t *testing.T, a, b string) bool {
	t.Helper()
	ok, err := gtid.Covers(a, b)
	require.NoError(t, err)
	return ok
}

// freezeCycles switches and reverses the race workflow n times each with
// p.freeze. With live writers they write through every cutover (a lock
// freeze blocks them, the routing hook moves them); otherwise they stop before
// it, as --freeze none requires, and start again on the gaining side after.
// After each cutover: the write pause was printed, the freeze position covers
// every write the losing side had before it, the losing side's tables are as
// the freeze leaves them (renamed after a lock, where a stray write fails;
// in place after none, where a stray write goes through and nowhere),
// and once the writers have written on the gaining side and stopped, the
// workflow that follows them has brought the losing side to identical.
func (p *pairEnv) freezeCycles(n int, live bool) {
	p.t.Helper()
	for i := range 2 * n {
		direction := []string{"switch", "reverse"}[i%2]
		losing, _ := p.sides(direction)
		stop := p.writers(p.keys)
		p.waitWrites("writes before the " + direction)
		if !live {
			stop()
		}
		before := position(p.t, losing)
		sw := p.cutover(direction)
		require.True(p.t, covers(p.t, sw.freezePos, before), "freeze position %s covers the writes before the %s (%s)", sw.freezePos, direction, before)
		p.frozenSide(losing)
		p.strayWrite(direction)
		if !live {
			stop = p.writers(p.keys)
		}
		p.waitWrites("writes after the " + direction)
		writes := stop()
		p.identicalAfter(direction)
		p.t.Logf("%s %d with --freeze %s: write pause %d ms, %d writes, identical", direction, i/2+1, p.freeze, sw.pause, writes)
	}
}

// TestSwitchFreezeLock switches and reverses under live writers with --freeze
// lock, three times each: the writers block on the lock during the pause, the
// routing hook moves them while it holds, and both sides end identical after
// every cutover. Before the lock is released the tables of the side that lost
// the writes are renamed to their frozen twins, as a rename freeze leaves
// them: a statement queued behind the lock there fails with "doesn't exist"
// instead of committing, and so does a writer the routing missed.
func TestSwitchFreezeLock(t *testing.T) {
	p := newPairEnv(t, sandbox.MariaDB, 900, nil)
	p.freeze = "lock"
	p.freezeCycles(envInt("ROWLIFT_FREEZE_CYCLES", 3), true)
}

// TestSwitchFreezeNone switches and reverses with --freeze none, three times
// each, the writers stopped before each cutover as that mode requires: the
// cutover records the position, which covers every write, and completes; the
// sides end identical and the move stays reversible.
func TestSwitchFreezeNone(t *testing.T) {
	p := newPairEnv(t, sandbox.MariaDB, 900, nil)
	p.freeze = "none"
	p.freezeCycles(envInt("ROWLIFT_FREEZE_CYCLES", 3), false)
}

// TestLockFreezeStreamerKilled kills the source's streamer with SIGKILL while
// its LOCK freeze holds. The switch waits at step frozen (the forward applier
// is down, so the freeze position cannot be applied yet); the lock dies with
// the streamer's session and the blocked writers go on. Once both come back,
// the coordinator notices the lost lock before the park, locks again and
// waits for the new freeze position, which covers the writes made while the
// tables were unlocked; the switch completes, the source's tables renamed to
// their frozen twins (a statement queued behind the new lock fails with
// "doesn't exist"), and the sides end identical.
func TestLockFreezeStreamerKilled(t *testing.T) {
	p := newPairEnv(t, sandbox.MariaDB, 900, nil)
	p.freeze = "lock"
	stop := p.writers(p.keys)
	p.waitWrites("writes before the switch")
	p.applier.kill()
	p.waitWrites("writes the target has not applied")

	finish := p.startCutover("switch", "--max-lag", "1h")
	p.waitFor("the switch to freeze", time.Minute, func() (bool, string) {
		step := p.journalStep()
		return step == "switch/frozen", step
	})
	p.waitBlocked(p.srcDB, 0, "at step frozen")
	j, err := p.store.Journal(context.Background(), "race")
	require.NoError(t, err)
	first := j.FreezePositions["main"]

	p.streamer.kill()
	p.waitWrites("the writers to go on: the lock died with the streamer's session")
	unlocked := position(t, p.srcDB)
	require.False(t, covers(t, first, unlocked), "writes made while unlocked are past the first freeze position %s", first)
	p.streamer.restart()
	p.applier.restart()

	r := finish()
	require.Zero(t, r.code, "the switch completes: %s", r.stderr)
	require.Contains(t, r.stdout, "hook: routed switch")
	j, err = p.store.Journal(context.Background(), "race")
	require.NoError(t, err)
	require.Equal(t, "done", j.Step)
	require.Contains(t, j.Message, "the freeze lock on main was lost")
	require.True(t, covers(t, j.FreezePositions["main"], unlocked), "the new freeze position %s covers the writes made while unlocked (%s)",
		j.FreezePositions["main"], unlocked)
	require.Contains(t, r.stdout, "freeze position: main: "+j.FreezePositions["main"])
	require.Contains(t, p.coord.logText(), "freeze lock lost before the park and taken again")
	p.frozenSide(p.srcDB)
	p.strayWrite("switch")

	p.waitWrites("writes on the target")
	require.Positive(t, stop())
	p.identicalAfter("switch")
}
