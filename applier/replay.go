package applier

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	"github.com/rowlift/rowlift/applier/schedule"
	"github.com/rowlift/rowlift/applier/writeset"
	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/testhook"
	"github.com/rowlift/rowlift/internal/tracing"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// Replay defaults for zero WorkflowOptions values.
const (
	defaultBatchItems = 256
	defaultBatchBytes = 4 << 20
	defaultBatchWait  = 5 * time.Millisecond
	// maxPendingGroups bounds the groups read ahead of the oldest uncommitted
	// one: enough to keep every worker busy.
	maxPendingGroups = 1024
	// maxPendingBytes bounds the same groups by their row images, so memory
	// does not grow with the width of the rows (1024 groups of 4 MiB would
	// be 4 GiB): 16 full groups keep every worker busy. A transaction is held
	// whole, so one larger than this still goes, alone.
	maxPendingBytes = 64 << 20
	// unstickEvery is how often the stuck-group rule looks at the replay's
	// state (schedule.Unstick): a sampling rate, not a threshold; the server
	// is asked for lock waits at most as often as lockProbe allows.
	unstickEvery = 10 * time.Millisecond
	// maxQuery bounds the statements sent in one query.
	maxQuery = 1 << 20
)

// readAheadFull reports whether the stream must wait before it submits
// another transaction: groups scheduled and not committed reach
// maxPendingGroups, or their bytes maxPendingBytes. Bytes count only
// scheduled groups, so a full read-ahead always has a group to commit.
func readAheadFull(groups, bytes int) bool {
	return groups >= maxPendingGroups || (groups > 0 && bytes >= maxPendingBytes)
}

// batchLimits end a commit group.
type batchLimits struct {
	items int
	bytes int
	wait  time.Duration
}

func limitsOf(opts *rowliftv1.WorkflowOptions) batchLimits {
	l := batchLimits{items: int(opts.GetCommitBatchItems()), bytes: int(opts.GetCommitBatchBytes()),
		wait: time.Duration(opts.GetCommitBatchMs()) * time.Millisecond}
	if l.items <= 0 {
		l.items = defaultBatchItems
	}
	if l.bytes <= 0 {
		l.bytes = defaultBatchBytes
	}
	if l.wait <= 0 {
		l.wait = defaultBatchWait
	}
	return l
}

// group is consecutive source transactions committed as one target
// transaction, with the position after the last of them.
type group struct {
	txs        []*rowliftv1.Transaction
	idempotent []bool
	keys       []uint64
	barrier    bool
	bytes      int
	// rows counts the transactions' row changes.
	rows int
	// position is the GTID set after the last transaction, parsed from its
	// text (positionText) once, when the group first runs: one parse per
	// group, not per transaction.
	position     *gtid.Set
	positionText string
	sourceUS     int64
	// since is when it last started running, or was queued to run (added, or
	// rolled back); attempt counts its starts. headAt is when it became the
	// oldest uncommitted group.
	since   time.Time
	headAt  time.Time
	attempt uint64
	// abort asks the worker holding it executed to roll it back: an earlier
	// group is stuck, perhaps on its locks.
	abort bool
	// stuck is set when later groups were rolled back for it in this attempt:
	// its execution time says how long it was stuck, not how fast the target
	// is, and stays out of the latency the timing fallback learns from.
	stuck bool
}

// groupEnd is the position after a group and its source commit time.
type groupEnd struct {
	position *gtid.Set
	sourceUS int64
}

// replayer applies binlog transactions with several connections. Each
// transaction's writeset (its rows' keys) decides what may run at once: a group
// starts once every earlier group it shares a key with has committed. By
// default groups commit in source order, so the target is a consistent prefix
// of the source at every instant; out of order, a low watermark is kept and a
// restart after a crash rewrites the uncertain window idempotently. Each worker
// records progress in its own slot row, in the group's transaction.
type replayer struct {
	play       *player
	outOfOrder bool
	limits     batchLimits
	keys       map[string]*writeset.Table
	maxPacket  int
	log        *zap.Logger

	mu    sync.Mutex
	cond  *sync.Cond
	sched *schedule.Scheduler
	// groups are the added, uncommitted groups by sequence number.
	groups map[schedule.Seq]*group
	// done are where committed groups above the watermark end (out of order).
	done map[schedule.Seq]groupEnd
	// open is the group being filled; timer closes it after limits.wait.
	open  *group
	timer *time.Timer
	// maybeApplied covers every group handed to a commit, and whatever the
	// previous run may have committed: each slot write records it, so a slot
	// overwritten by a commit of an earlier group (out of order) still covers
	// the later ones.
	maybeApplied *gtid.Set
	err          error
	// scratch holds the writeset of the transaction being submitted; only the
	// stream's goroutine submits.
	scratch []uint64
	// held is what each worker holds, by slot, for the stuck-group rule
	// (Seq 0: nothing); window bounds how far ahead of the oldest uncommitted
	// group the workers start groups (in order), and latency keeps recent
	// groups' execution times for the rule's timing fallback.
	held    []schedule.Held
	window  *schedule.Window
	latency schedule.Latency
	// unstuck counts the rollbacks the stuck-group rule decided, by reason.
	unstuck map[schedule.Reason]int
	// probe asks the target for lock waits; nil when the target user may not.
	probe *lockProbe
	// pendingBytes are the bytes of the groups handed to the scheduler and
	// not committed yet.
	pendingBytes int

	cancel context.CancelFunc
	g      *errgroup.Group
}

func newReplayer(ctx context.Context, db *sql.DB, play *player, opts *rowliftv1.WorkflowOptions, workers, maxPacket int, log *zap.Logger) (*replayer, error) {
	keys, err := loadKeys(ctx, db, play, log)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	g, ctx := errgroup.WithContext(ctx)
	r := &replayer{play: play, outOfOrder: opts.GetOutOfOrderCommit(), limits: limitsOf(opts), keys: keys, maxPacket: min(maxPacket, maxQuery), log: log,
		sched: schedule.New(opts.GetOutOfOrderCommit()), groups: map[schedule.Seq]*group{}, done: map[schedule.Seq]groupEnd{},
		maybeApplied: play.maybeApplied.Clone(), cancel: cancel, g: g,
		held: make([]schedule.Held, workers), window: schedule.NewWindow(workers), unstuck: map[schedule.Reason]int{}}
	r.cond = sync.NewCond(&r.mu)
	context.AfterFunc(ctx, func() { r.fail(ctx.Err()) })
	for slot := range workers {
		conn, err := db.Conn(ctx)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("replay connection: %w", err)
		}
		// Read committed takes no gap locks, which are what make transactions
		// with disjoint writesets wait for each other.
		if _, err := conn.ExecContext(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"); err != nil {
			conn.Close()
			cancel()
			return nil, fmt.Errorf("replay connection: %w", err)
		}
		if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&r.held[slot].Conn); err != nil {
			conn.Close()
			cancel()
			return nil, fmt.Errorf("replay connection: %w", err)
		}
		g.Go(func() error {
			defer release(ctx, conn)
			return r.work(ctx, conn, slot)
		})
	}
	if !r.outOfOrder {
		if r.probe, err = newLockProbe(ctx, db, log); err != nil {
			cancel()
			return nil, err
		}
		g.Go(func() error { return r.breakDeadlocks(ctx) })
	}
	return r, nil
}

// loadKeys reads the target tables' unique keys and foreign keys, which decide
// what may replay at once.
func loadKeys(ctx context.Context, db *sql.DB, play *player, log *zap.Logger) (map[string]*writeset.Table, error) {
	keys := map[string]*writeset.Table{}
	for name, t := range play.tables {
		k, err := writeset.Load(ctx, db, t.database, t.table, t.fields)
		if err != nil {
			return nil, fmt.Errorf("keys of %s: %w", name, err)
		}
		if barrier, why := k.Barrier(); barrier {
			log.Info("changes to this table replay alone", zap.String("table", name), zap.String("why", why))
		}
		if coarse := k.Coarse(); len(coarse) > 0 {
			log.Info("keys under non-binary collations do not tell rows apart; their changes replay one at a time",
				zap.String("table", name), zap.Strings("keys", coarse))
		}
		keys[name] = k
	}
	return keys, nil
}

// fail records the first error and wakes everyone up to see it.
func (r *replayer) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
	r.cond.Broadcast()
}

// submit queues one transaction; it blocks while too many groups wait.
func (r *replayer) submit(trx *rowliftv1.Transaction) error {
	applied, maybe, err := r.play.seen(trx.GetGtid())
	if err != nil {
		return err
	}
	if applied {
		// Sent again after a reconnect: already committed.
		r.log.Debug("transaction skipped: the target has it", zap.String("gtid", trx.GetGtid()))
		return nil
	}
	var barrier bool
	r.scratch, barrier = writeset.Transaction(r.scratch, trx, r.keys)
	size := proto.Size(trx)
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.err == nil && readAheadFull(r.sched.Pending(), r.pendingBytes) {
		r.cond.Wait()
	}
	if r.err != nil {
		return r.err
	}
	if barrier {
		r.closeOpen()
	}
	g := r.open
	if g == nil {
		g = &group{}
		r.open = g
		if r.limits.items > 1 {
			r.timer = time.AfterFunc(r.limits.wait, func() { r.closeIfOpen(g) })
		}
	}
	g.txs = append(g.txs, trx)
	g.idempotent = append(g.idempotent, maybe)
	g.keys = append(g.keys, r.scratch...)
	g.barrier = g.barrier || barrier
	g.bytes += size
	for _, ev := range trx.GetEvents() {
		g.rows += len(ev.GetChanges())
	}
	g.positionText = trx.GetPosition().GetGtidSet()
	g.sourceUS = trx.GetCommitTimeUs()
	if barrier || len(g.txs) >= r.limits.items || g.bytes >= r.limits.bytes {
		r.closeOpen()
	}
	return nil
}

func (r *replayer) closeIfOpen(g *group) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.open == g {
		r.closeOpen()
	}
}

// closeOpen hands the group being filled to the scheduler. r.mu is held.
func (r *replayer) closeOpen() {
	g := r.open
	if g == nil {
		return
	}
	r.open = nil
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	seq := r.sched.Add(g.keys, g.barrier)
	g.keys = nil
	r.groups[seq] = g
	r.pendingBytes += g.bytes
	g.since = time.Now()
	r.cond.Broadcast()
}

// failure is the error that stopped replay, if any: a stream with nothing more
// to submit learns of it at its next heartbeat.
func (r *replayer) failure() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// idle reports whether everything submitted has committed.
func (r *replayer) idle() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.open == nil && r.sched.Pending() == 0
}

// drain commits everything submitted and waits for it: a copy chunk, a DDL or
// a heartbeat comes after all earlier transactions.
func (r *replayer) drain() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closeOpen()
	for r.err == nil && r.sched.Pending() > 0 {
		r.cond.Wait()
	}
	return r.err
}

// close stops the workers; uncommitted groups roll back with their connections.
func (r *replayer) close() error {
	r.cancel()
	r.mu.Lock()
	if r.timer != nil {
		r.timer.Stop()
	}
	r.mu.Unlock()
	err := r.g.Wait()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// work is one replay worker: it takes groups the scheduler allows, executes
// them, waits for its commit turn and commits.
func (r *replayer) work(ctx context.Context, conn *sql.Conn, slot int) error {
	w := &rowWriter{p: r.play, keys: r.keys}
	for {
		r.mu.Lock()
		seq, ok := r.sched.NextWithin(r.allowed())
		for r.err == nil && !ok {
			r.cond.Wait()
			seq, ok = r.sched.NextWithin(r.allowed())
		}
		if r.err != nil {
			r.mu.Unlock()
			return nil
		}
		g := r.groups[seq]
		g.since, g.abort, g.stuck = time.Now(), false, false
		g.attempt++
		r.held[slot].Seq, r.held[slot].Attempt, r.held[slot].Executed = seq, g.attempt, false
		r.mu.Unlock()
		if err := r.run(ctx, conn, w, slot, seq, g); err != nil {
			r.fail(err)
			return err
		}
	}
}

// build puts a group's statements in w: coalesced per table when coalesce
// allows it and no transaction is to be written idempotently (see
// applier/coalesce.go), else one statement per change; coalesced says which.
func (r *replayer) build(w *rowWriter, g *group, coalesce bool) (coalesced bool, err error) {
	w.reset()
	if coalesce && !slices.Contains(g.idempotent, true) {
		if coalesced, err = w.addCoalesced(g.txs, r.maxPacket/2); coalesced || err != nil {
			return coalesced, err
		}
	}
	for i, trx := range g.txs {
		if err := w.add(trx, g.idempotent[i]); err != nil {
			return false, err
		}
	}
	return false, nil
}

// allowed is how many groups after the low watermark the workers may start:
// the window's limit in order, any out of order. r.mu is held.
func (r *replayer) allowed() int {
	if r.outOfOrder {
		return 0
	}
	return r.window.Limit()
}

// run applies one group. A lock conflict or a stuck earlier group rolls it
// back and puts it back in the queue; any other error ends the stream. The
// worker holds nothing once it returns.
func (r *replayer) run(ctx context.Context, conn *sql.Conn, w *rowWriter, slot int, seq schedule.Seq, g *group) (err error) {
	defer func() {
		r.mu.Lock()
		r.held[slot].Seq = 0
		r.mu.Unlock()
	}()
	began := time.Now()
	span := r.play.startSpan(ctx, "rowlift.applier.replay_group", nil, "")
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(tracing.Transactions.Int(len(g.txs)))
			tracing.End(span, err, int64(g.rows), int64(g.bytes))
		}
	}()
	if g.position == nil {
		if g.position, err = gtid.Parse(g.positionText); err != nil {
			return fmt.Errorf("position of %s: %w", g.txs[len(g.txs)-1].GetGtid(), err)
		}
	}
	coalesced, err := r.build(w, g, true)
	if err != nil {
		return err
	}
	slotWrite, err := r.slotWrite(w, slot, g)
	if err != nil {
		return err
	}
	testhook.Delay(ctx, testhook.ReplayExec)
	saved, err := w.exec(ctx, conn, r.maxPacket, slotWrite)
	if err != nil && coalesced && !retryable(err) {
		// Only the plain statements name what diverged, if anything did.
		if rerr := rollback(ctx, conn); rerr != nil {
			return rerr
		}
		if _, err := r.build(w, g, false); err != nil {
			return err
		}
		saved, err = w.exec(ctx, conn, r.maxPacket, slotWrite)
	}
	if err != nil {
		if rerr := rollback(ctx, conn); rerr != nil {
			return rerr
		}
		if retryable(err) {
			return r.requeue(ctx, conn, slot, seq, g)
		}
		if IsPermanent(err) {
			return err
		}
		if derr := w.diagnose(ctx, conn); derr != nil {
			if retryable(derr) {
				return r.requeue(ctx, conn, slot, seq, g)
			}
			return derr
		}
		return fmt.Errorf("replay %s: %w", g.txs[0].GetGtid(), err)
	}
	if err := state.SlotSaved(r.play.workflow, r.play.source, saved); err != nil {
		return err
	}
	testhook.Delay(ctx, testhook.SlowTarget)
	r.mu.Lock()
	r.sched.Executed(seq)
	if seq == r.sched.LowWatermark()+1 && !g.stuck {
		// How long the oldest group takes to execute, from when it started or
		// became the oldest: the same measure the timing fallback applies to
		// it. A later group's time also counts its waits for earlier groups'
		// locks, which says nothing of the target.
		r.latency.Observe(time.Since(later(g.since, g.headAt)))
	}
	// Only now does it wait for its commit turn alone: recording its progress
	// took a share lock on the stream row, which a stop's fence may have made
	// it wait for, behind later groups' own share locks.
	r.held[slot].Executed = true
	for r.err == nil && !g.abort && !r.sched.MayCommit(seq) {
		r.cond.Wait()
	}
	stopped, abort := r.err != nil, g.abort
	r.mu.Unlock()
	switch {
	case stopped:
		return rollback(ctx, conn)
	case abort:
		return r.requeue(ctx, conn, slot, seq, g)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("replay: commit %s: %w", g.txs[len(g.txs)-1].GetGtid(), err)
	}
	r.play.stats.GroupCommitted(len(g.txs), g.rows, time.Since(began))
	if end, ok := r.committed(slot, seq, g); ok {
		return r.settle(ctx, conn, w, slot, end)
	}
	return nil
}

// settle records in the worker's slot the low watermark an out-of-order commit
// left with nothing in flight. Each group's slot write holds the watermark from
// before its commit, so without this the end of a burst would show in the
// position, and in the lag, only at the stream's next idle heartbeat, up to a
// second later. A group committed meanwhile only writes a later watermark.
func (r *replayer) settle(ctx context.Context, conn *sql.Conn, w *rowWriter, slot int, end groupEnd) error {
	r.mu.Lock()
	applied := r.maybeApplied.String()
	r.mu.Unlock()
	w.slot = state.AppendSaveSlot(w.slot[:0], r.play.workflow, r.play.source, r.play.owner, slot, end.position.String(), applied, end.sourceUS)
	res, err := conn.ExecContext(ctx, string(w.slot))
	if err != nil {
		return fmt.Errorf("replay: record the low watermark %s: %w", end.position, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("replay: record the low watermark %s: %w", end.position, err)
	}
	return state.SlotSaved(r.play.workflow, r.play.source, n)
}

// slotWrite is the statement that records a group's progress in its
// transaction (state.AppendSaveSlot), sent with its statements: the group's
// position as the watermark in order, the low watermark out of order, and
// everything handed to a commit so far as maybe applied. It counts the group
// as maybe applied before it runs: should it roll back, a restart rewrites it
// idempotently, which is right whether it committed or not.
func (r *replayer) slotWrite(w *rowWriter, slot int, g *group) ([]byte, error) {
	r.mu.Lock()
	watermark := g.position
	if r.outOfOrder {
		watermark = r.play.position() // the low watermark's
	}
	err := r.maybeApplied.Advance(g.position)
	applied := r.maybeApplied.String()
	r.mu.Unlock()
	if err != nil {
		return nil, permanent("replay %s: %v", g.txs[0].GetGtid(), err)
	}
	w.slot = state.AppendSaveSlot(w.slot[:0], r.play.workflow, r.play.source, r.play.owner, slot, watermark.String(), applied, g.sourceUS)
	return w.slot, nil
}

// release ends whatever transaction a worker left open (a group cut short by
// an error, a fence or a stop) before its connection goes back to the pool,
// where the transaction would keep its row locks, and its share lock on the
// stream row that a cutover's Follow waits for, until the connection's next
// user. A connection that cannot roll back is closed instead.
func release(ctx context.Context, conn *sql.Conn) {
	if _, err := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	conn.Close()
}

// rollback ends the connection's transaction, if it has one.
func rollback(ctx context.Context, conn *sql.Conn) error {
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		return fmt.Errorf("replay: roll back: %w", err)
	}
	return nil
}

// requeue rolls a group back and returns it to the scheduler, which restarts
// it once every earlier group has committed.
func (r *replayer) requeue(ctx context.Context, conn *sql.Conn, slot int, seq schedule.Seq, g *group) error {
	if err := rollback(ctx, conn); err != nil {
		return err
	}
	r.play.stats.Conflict()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !g.abort {
		// The server rolled it back (a deadlock, a lock wait timeout): a
		// conflict the writesets missed, which fewer groups at once avoid.
		r.window.RolledBack()
	}
	r.sched.Requeue(seq)
	r.held[slot].Seq = 0
	g.abort, g.since = false, time.Now()
	r.cond.Broadcast()
	return nil
}

// committed records a group's commit and moves the watermark. Out of order,
// it returns where the watermark ends when the commit leaves nothing in
// flight, for settle to record.
func (r *replayer) committed(slot int, seq schedule.Seq, g *group) (settled groupEnd, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.held[slot].Seq = 0
	before := r.sched.LowWatermark()
	r.sched.Committed(seq)
	r.window.Committed()
	delete(r.groups, seq)
	r.pendingBytes -= g.bytes
	r.done[seq] = groupEnd{g.position, g.sourceUS}
	var watermark groupEnd
	for s := before + 1; s <= r.sched.LowWatermark(); s++ {
		watermark = r.done[s]
		delete(r.done, s)
	}
	if watermark.position != nil {
		r.play.committed(watermark.position, watermark.sourceUS)
	}
	if head := r.groups[r.sched.LowWatermark()+1]; head != nil {
		head.headAt = time.Now()
	}
	r.cond.Broadcast()
	if r.outOfOrder && watermark.position != nil && r.open == nil && r.sched.Pending() == 0 {
		return watermark, true
	}
	return groupEnd{}, false
}

// breakDeadlocks runs the stuck-group rule (schedule.Unstick): it rolls back
// the later groups waiting for their commit turn only when the oldest group
// waits for their locks, by the server's evidence, or has no worker while
// they hold every one; without the evidence, when the oldest group has run
// far longer than groups do on this target lately. Each rollback it decides
// shrinks the window of groups started ahead, which clean commits widen again.
func (r *replayer) breakDeadlocks(ctx context.Context) error {
	if r.probe != nil {
		defer r.probe.close()
	}
	tick := time.NewTicker(unstickEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		r.mu.Lock()
		o := r.observe()
		r.mu.Unlock()
		if r.probe != nil {
			// No news is no wait: the lock-wait case is decided on probes.
			o.Waits.Known = true
			if r.probeWanted(o) && r.probe.due(time.Now()) {
				waits, known, err := r.probe.waits(ctx)
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					err = fmt.Errorf("replay: %w", err)
					r.fail(err)
					return err
				}
				before := o.Held
				r.mu.Lock()
				o = r.observe()
				r.mu.Unlock()
				o.Waits = schedule.LockWaits{Known: known, Before: before, Waits: waits}
			}
		}
		r.mu.Lock()
		// The groups may have moved since o was observed: decide on the state
		// now, with the evidence taken.
		now := r.observe()
		now.Waits = o.Waits
		if v := schedule.Unstick(now); len(v.Rollback) > 0 {
			r.unstick(now, v)
		}
		r.mu.Unlock()
	}
}

// probeWanted reports whether the server's lock waits could decide anything:
// the oldest group runs while later ones wait for their commit turn, or it
// has no worker while a worker runs a later one.
func (r *replayer) probeWanted(o schedule.Observation) bool {
	headRunning, laterExecuted, laterRunning := false, false, false
	for _, h := range o.Held {
		switch {
		case h.Seq == o.Head:
			headRunning = !h.Executed
		case h.Executed:
			laterExecuted = true
		default:
			laterRunning = true
		}
	}
	return laterExecuted && (headRunning || laterRunning)
}

// observe returns what the stuck-group rule looks at, with no evidence from
// the server. A group already asked to roll back is leaving its worker: it
// is not decided on twice. r.mu is held.
func (r *replayer) observe() schedule.Observation {
	o := schedule.Observation{Workers: len(r.held), Patience: r.latency.Patience()}
	for _, h := range r.held {
		if g := r.groups[h.Seq]; h.Seq != 0 && g != nil && !g.abort {
			o.Held = append(o.Held, h)
		}
	}
	if r.sched.Pending() == 0 {
		return o
	}
	o.Head = r.sched.LowWatermark() + 1
	for _, h := range o.Held {
		if head := r.groups[h.Seq]; h.Seq == o.Head && !h.Executed && head != nil {
			o.HeadFor = time.Since(later(head.since, head.headAt))
		}
	}
	return o
}

// unstick rolls back the groups of a verdict. r.mu is held.
func (r *replayer) unstick(o schedule.Observation, v schedule.Verdict) {
	for _, seq := range v.Rollback {
		r.groups[seq].abort = true
	}
	if head := r.groups[o.Head]; head != nil {
		head.stuck = true
	}
	r.window.RolledBack()
	r.unstuck[v.Reason] += len(v.Rollback)
	r.log.Info("the oldest replay group cannot commit; rolling back later ones waiting to commit", zap.Stringer("why", v.Reason),
		zap.Int("rolled_back", len(v.Rollback)), zap.Duration("running_for", o.HeadFor), zap.Duration("patience", o.Patience),
		zap.Int("window", r.window.Limit()))
	r.cond.Broadcast()
}

// later returns the later of two times.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// retryable reports lock conflicts, which another attempt resolves.
func retryable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1205 || me.Number == 1213)
}
