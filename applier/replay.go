package applier

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
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
	defaultBatchItems = 64
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
	// stuckAfter is how long the oldest uncommitted group may run before the
	// later groups that wait for their commit turn are rolled back: it may be
	// waiting for a lock one of them holds (a commit-order deadlock, which the
	// server cannot see because the later group waits in rowlift, not InnoDB).
	stuckAfter = 100 * time.Millisecond
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
	rows     int
	position *gtid.Set
	sourceUS int64
	// running is set while a worker executes it. since is when it last
	// started running, or was queued to run (added, or rolled back).
	running bool
	since   time.Time
	// abort asks the worker holding it executed to roll it back: an earlier
	// group is stuck, perhaps on its locks.
	abort bool
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
		maybeApplied: play.maybeApplied.Clone(), cancel: cancel, g: g}
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
		g.Go(func() error {
			defer release(ctx, conn)
			return r.work(ctx, conn, slot)
		})
	}
	if !r.outOfOrder {
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

// reloadKeys reads the keys again after a schema change let through (on_ddl
// IGNORE). Nothing is in flight: the stream drained before the DDL.
func (r *replayer) reloadKeys(ctx context.Context, db *sql.DB) error {
	keys, err := loadKeys(ctx, db, r.play, r.log)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, k := range keys {
		r.keys[name] = k
	}
	return nil
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
		return nil // sent again after a reconnect: already committed
	}
	position, err := gtid.Parse(trx.GetPosition().GetGtidSet())
	if err != nil {
		return fmt.Errorf("position of %s: %w", trx.GetGtid(), err)
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
	g.position = position
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
		seq, ok := r.sched.Next()
		for r.err == nil && !ok {
			r.cond.Wait()
			seq, ok = r.sched.Next()
		}
		if r.err != nil {
			r.mu.Unlock()
			return nil
		}
		g := r.groups[seq]
		g.running, g.since, g.abort = true, time.Now(), false
		r.mu.Unlock()
		if err := r.run(ctx, conn, w, slot, seq, g); err != nil {
			r.fail(err)
			return err
		}
	}
}

// run applies one group. A lock conflict or a stuck earlier group rolls it
// back and puts it back in the queue; any other error ends the stream.
func (r *replayer) run(ctx context.Context, conn *sql.Conn, w *rowWriter, slot int, seq schedule.Seq, g *group) (err error) {
	began := time.Now()
	span := r.play.startSpan(ctx, "rowlift.applier.replay_group", nil, "")
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(tracing.Transactions.Int(len(g.txs)))
			tracing.End(span, err, int64(g.rows), int64(g.bytes))
		}
	}()
	w.reset()
	for i, trx := range g.txs {
		if err := w.add(trx, g.idempotent[i]); err != nil {
			return err
		}
	}
	testhook.Delay(ctx, testhook.ReplayExec)
	if err := w.exec(ctx, conn, r.maxPacket); err != nil {
		if rerr := rollback(ctx, conn); rerr != nil {
			return rerr
		}
		if retryable(err) {
			return r.requeue(ctx, conn, seq, g)
		}
		if IsPermanent(err) {
			return err
		}
		if derr := w.diagnose(ctx, conn); derr != nil {
			if retryable(derr) {
				return r.requeue(ctx, conn, seq, g)
			}
			return derr
		}
		return fmt.Errorf("replay %s: %w", g.txs[0].GetGtid(), err)
	}
	r.mu.Lock()
	r.sched.Executed(seq)
	g.running = false
	watermark := g.position
	if r.outOfOrder {
		watermark = r.play.position() // the low watermark's
	}
	err = r.maybeApplied.Advance(g.position)
	applied := r.maybeApplied.String()
	r.mu.Unlock()
	if err != nil {
		return permanent("replay %s: %v", g.txs[0].GetGtid(), err)
	}
	if err := state.SaveSlot(ctx, conn, r.play.workflow, r.play.source, r.play.owner, slot, watermark.String(), applied, g.sourceUS); err != nil {
		if retryable(err) {
			return r.requeue(ctx, conn, seq, g)
		}
		return err
	}
	r.mu.Lock()
	for r.err == nil && !g.abort && !r.sched.MayCommit(seq) {
		r.cond.Wait()
	}
	stopped, abort := r.err != nil, g.abort
	r.mu.Unlock()
	switch {
	case stopped:
		return rollback(ctx, conn)
	case abort:
		return r.requeue(ctx, conn, seq, g)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("replay: commit %s: %w", g.txs[len(g.txs)-1].GetGtid(), err)
	}
	r.play.stats.GroupCommitted(len(g.txs), g.rows, time.Since(began))
	r.committed(seq, g)
	return nil
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
func (r *replayer) requeue(ctx context.Context, conn *sql.Conn, seq schedule.Seq, g *group) error {
	if err := rollback(ctx, conn); err != nil {
		return err
	}
	r.play.stats.Conflict()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sched.Requeue(seq)
	g.running, g.abort, g.since = false, false, time.Now()
	r.cond.Broadcast()
	return nil
}

// committed records a group's commit and moves the watermark.
func (r *replayer) committed(seq schedule.Seq, g *group) {
	r.mu.Lock()
	defer r.mu.Unlock()
	before := r.sched.LowWatermark()
	r.sched.Committed(seq)
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
	r.cond.Broadcast()
}

// breakDeadlocks rolls back the groups waiting for their commit turn when the
// oldest group has run, or waited to run, for longer than stuckAfter: it may
// wait for their locks, or for one of the workers they hold.
func (r *replayer) breakDeadlocks(ctx context.Context) error {
	tick := time.NewTicker(stuckAfter / 2)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		r.mu.Lock()
		head := r.groups[r.sched.LowWatermark()+1]
		// The oldest group may be stuck running (waiting for the later ones'
		// locks), or stuck waiting for a worker: rolled back after a lock
		// conflict while every worker holds a later group waiting for it.
		if head != nil && time.Since(head.since) > stuckAfter {
			if later := r.sched.ExecutedAfter(r.sched.LowWatermark() + 1); len(later) > 0 {
				for _, seq := range later {
					r.groups[seq].abort = true
				}
				r.log.Info("the oldest replay group has not committed; rolling back the later ones waiting to commit, "+
					"in case it waits for their locks or for a worker they hold", zap.Bool("running", head.running),
					zap.Duration("since", time.Since(head.since)), zap.Int("rolled_back", len(later)))
				r.cond.Broadcast()
			}
		}
		r.mu.Unlock()
	}
}

// retryable reports lock conflicts, which another attempt resolves.
func retryable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1205 || me.Number == 1213)
}
