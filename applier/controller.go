package applier

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/ddlscope"
	"github.com/rowlift/rowlift/internal/grpcopt"
	"github.com/rowlift/rowlift/internal/grpctls"
	"github.com/rowlift/rowlift/internal/metrics"
	"github.com/rowlift/rowlift/internal/reshard"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/schema"
	"github.com/rowlift/rowlift/internal/testhook"
	"github.com/rowlift/rowlift/internal/throttle"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

const (
	minBackoff = 500 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// controller runs one (workflow, source) stream: it opens the stream from the
// committed state, applies what arrives, and on failure either retries with
// backoff (showing why in the stream's message) or, when retrying cannot help,
// puts the workflow in state error with a message that says what to do.
type controller struct {
	engine *Engine
	pair   reshard.Stream
	// spec and source are the stream's: spec holds only the tables it carries.
	spec   *rowliftv1.WorkflowSpec
	source *rowliftv1.SourceShard
	log    *zap.Logger
	// stats records the stream's metrics while run runs.
	stats *metrics.ApplyStream
}

func (c *controller) run(ctx context.Context) {
	store := c.engine.store
	var tables []string
	for _, t := range c.spec.GetTables() {
		tables = append(tables, t.GetName())
	}
	c.stats = metrics.OpenApplyStream(c.spec.GetName(), c.source.GetName(), c.pair.Target.GetName(), tables)
	defer c.stats.Close()
	backoff := minBackoff
	for attempt := 1; ; attempt++ {
		progressed, err := c.stream(ctx)
		if ctx.Err() != nil || errors.Is(err, errNotRunning) {
			return // the engine runs it again if it is resumed
		}
		if errors.Is(err, errReopen) {
			attempt, backoff = 0, minBackoff
			continue
		}
		if IsPermanent(err) {
			st := state.Error
			var pe *permanentError
			if errors.As(err, &pe) && pe.state != "" {
				st = pe.state
			}
			if pe != nil && pe.diverged != "" {
				c.stats.Diverged(pe.diverged)
			}
			c.log.Error("workflow stopped", zap.String("state", string(st)), zap.Error(err))
			var serr error
			if lw := lostWrites(err); lw != nil {
				serr = store.StopLost(context.WithoutCancel(ctx), c.spec.GetName(), c.source.GetName(), lw.GetLost(), lw.GetRewindTo(), err.Error())
			} else if pe != nil && pe.ddl != "" {
				serr = store.StopAtDDL(context.WithoutCancel(ctx), c.spec.GetName(), c.source.GetName(), pe.ddl, err.Error())
			} else {
				serr = store.SetState(context.WithoutCancel(ctx), c.spec.GetName(), st, err.Error())
			}
			if serr != nil {
				c.log.Error("cannot record why the workflow stopped", zap.Error(serr))
			}
			return
		}
		var vr *verifyRecheck
		if errors.As(err, &vr) {
			// Not a retry: the stream opens again at once and sends the chunk's rows.
			c.log.Info("a verify chunk's digests differ; reopening the stream to compare its rows", zap.String("table", vr.table),
				zap.Stringer("source", vr.source), zap.Stringer("target", vr.target))
			attempt, backoff = 0, minBackoff
			continue
		}
		var vf *verifyFailure
		if errors.As(err, &vf) {
			// Not a retry: the stream opens again at once, without the table's verify.
			c.log.Warn("a table's verify failed; reopening the stream without it", zap.String("table", vf.table), zap.String("why", vf.message))
			if err = store.FailVerify(ctx, c.spec.GetName(), c.source.GetName(), vf.table, vf.message); err == nil {
				attempt, backoff = 0, minBackoff
				continue
			}
		}
		if progressed {
			attempt, backoff = 1, minBackoff
		}
		c.stats.Retry()
		msg := fmt.Sprintf("retrying (attempt %d, next in %s): %v", attempt, backoff, err)
		c.log.Warn("stream failed; retrying", zap.Int("attempt", attempt), zap.Duration("backoff", backoff), zap.Error(err))
		if serr := store.SetStreamMessage(ctx, c.spec.GetName(), c.source.GetName(), msg); serr != nil {
			c.log.Warn("cannot record the retry message", zap.Error(serr))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// lostWrites is the detail of a streamer's refusal of a source that lacks
// transactions the target applied (nil for any other error).
func lostWrites(err error) *rowliftv1.LostWrites {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		return nil
	}
	for _, d := range st.Details() {
		if lw, ok := d.(*rowliftv1.LostWrites); ok {
			return lw
		}
	}
	return nil
}

// errNotRunning ends a stream whose workflow left copying and running (a
// stop, a cutover's park) before the engine noticed.
var errNotRunning = errors.New("workflow is no longer copying or running")

// errReopen ends a stream past a schema change of its tables, which the
// streamer ends it after: the next stream opens at once, from the position
// after the change, with the tables' definitions as they are then.
var errReopen = errors.New("the stream reopens after a schema change")

// IsPermanent reports whether retrying err cannot help without an operator: the
// applier stops the workflow on such errors, the coordinator refuses a request.
func IsPermanent(err error) bool {
	var pe *permanentError
	if errors.As(err, &pe) {
		return true
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.Unimplemented:
		return true
	}
	return false
}

// stream runs the stream once; progressed says whether anything was committed,
// so the retry backoff starts over.
func (c *controller) stream(ctx context.Context) (progressed bool, err error) {
	e := c.engine
	store := e.store
	name := c.spec.GetName()
	// Before the stream writes anything, even its ownership.
	if err := checkGrants(ctx, e.db, c.spec); err != nil {
		return false, err
	}
	// Take the stream over first: after this no write of an earlier run of it
	// (a killed applier, a stream that broke mid-commit) can land, so the state
	// read below is what this run continues from.
	owner, err := store.TakeOver(ctx, name, c.source.GetName())
	if err != nil {
		return false, err
	}
	// After the takeover: a cutover that parks the workflow later fences this
	// run; one that parked it before is seen here, and the stream ends.
	if wf, err := store.Workflow(ctx, name); err != nil {
		return false, err
	} else if wf.State != state.Copying && wf.State != state.Running {
		return false, errNotRunning
	}
	copies, err := store.CopyState(ctx, name, c.source.GetName())
	if err != nil {
		return false, err
	}
	progress := map[string]state.TableCopy{}
	for _, tc := range copies {
		progress[tc.Table] = tc
	}
	// Verifies not done yet, which the stream sends verify chunks for.
	verifying := map[string]state.TableVerify{}
	verifies, err := store.Verify(ctx, name, c.source.GetName())
	if err != nil {
		return false, err
	}
	for _, tv := range verifies {
		if !tv.Done && progress[tv.Table].Done {
			verifying[tv.Table] = tv
		}
	}
	// The position the target has committed: the stream resumes right after it.
	// It is empty only before the first item of a new workflow.
	resume, err := store.ResumeAt(ctx, name, c.source.GetName())
	if err != nil {
		return false, err
	}
	position := resume.Position
	var maxPacket int
	if err := e.db.QueryRowContext(ctx, "SELECT @@max_allowed_packet").Scan(&maxPacket); err != nil {
		return false, fmt.Errorf("read target max_allowed_packet: %w", err)
	}

	if err := throttle.Check("target", c.spec.GetOptions().GetThrottle().GetTarget()); err != nil {
		return false, permanent("%v", err)
	}

	conn, err := grpc.NewClient(c.source.GetStreamerAddress(), append(grpcopt.DialOptions(nil), e.cfg.DialOptions...)...)
	if err != nil {
		return false, permanent("streamer address %q of source %s: %v", c.source.GetStreamerAddress(), c.source.GetName(), err)
	}
	defer conn.Close()
	// A verify's digest checks run beside the stream and end it, with their
	// error as the cause, when they fail or ask for a chunk's rows.
	ctx, cancelCause := context.WithCancelCause(ctx)
	cancel := func() { cancelCause(nil) }
	defer cancel()
	client := rowliftv1.NewStreamerClient(conn)
	req := StreamRequest(c.pair, position, progress, verifying)
	if err := withTargets(ctx, e.db, c.spec, req); err != nil {
		return false, err
	}
	stream, err := client.Stream(ctx, req)
	if err != nil {
		return false, c.streamError(err)
	}
	first, err := c.recv(stream)
	if err != nil {
		return false, err
	}
	var fields []*rowliftv1.TableFields
	for _, item := range first.GetItems() {
		if f := item.GetFields(); f != nil {
			fields = append(fields, f)
		}
	}
	if len(fields) != len(c.spec.GetTables()) {
		return false, fmt.Errorf("streamer sent %d table descriptions for %d tables", len(fields), len(c.spec.GetTables()))
	}
	tables, err := c.prepare(ctx, fields, maxPacket)
	if err != nil {
		return false, err
	}
	estimates := map[string]state.Estimate{}
	for _, f := range fields {
		if !progress[f.GetTable()].Done {
			estimates[f.GetTable()] = state.Estimate{Rows: f.GetRowsEstimate(), Bytes: f.GetBytesEstimate()}
		}
	}
	if err := store.RecordCopyStart(ctx, name, c.source.GetName(), estimates); err != nil {
		return false, err
	}
	play, err := newPlayer(e.db, name, c.source.GetName(), c.pair.Target.GetName(), owner, tables, resume, c.stats)
	if err != nil {
		return false, err
	}
	workers := int(c.spec.GetOptions().GetApplyWorkers())
	if workers <= 0 {
		workers = DefaultWorkers
	}
	replay, err := newReplayer(ctx, e.db, play, c.spec.GetOptions(), workers, maxPacket-1024, c.log)
	if err != nil {
		return false, err
	}
	defer func() {
		if rerr := replay.close(); err == nil && rerr != nil {
			err = rerr
		}
	}()
	verifiers := map[string]*verifier{}
	defer func() {
		cancel() // the digest checks still running stop; a failed one ended the stream with its cause
		for _, v := range verifiers {
			_ = v.wait()
		}
	}()
	for table, tv := range verifying {
		i := slices.IndexFunc(c.spec.GetTables(), func(t *rowliftv1.TableSpec) bool { return t.GetName() == table })
		if i < 0 {
			continue // a verify row of a table this stream does not carry
		}
		scope, err := scopeOf(c.pair, c.spec.GetTables()[i])
		if err != nil {
			return false, err
		}
		// Kept only once made: the deferred wait runs on every kept one.
		v, err := newVerifier(ctx, e.db, play, tables[table], tv, scope, mergeOf(c.pair), c.spec.GetOptions().GetJsonAsText(),
			maxPacket-1024, cancelCause, c.log)
		if err != nil {
			return false, err
		}
		verifiers[table] = v
	}
	if err := store.SetStreamMessage(ctx, name, c.source.GetName(), ""); err != nil {
		return false, err
	}
	// throttled is the throttle reason this run last stored; the streamer
	// reports it in heartbeats. A run starts and ends with none shown, since
	// only a running stream's copy can be waiting.
	throttled := ""
	if err := store.SetStreamThrottled(ctx, name, c.source.GetName(), owner, ""); err != nil {
		return false, err
	}
	defer c.stats.Throttled(false)
	// waiting is, the same way, why the source has not started the binlog
	// (locating the start position), as this run last stored it.
	waiting := ""
	if err := store.SetStreamWaiting(ctx, name, c.source.GetName(), owner, ""); err != nil {
		return false, err
	}
	defer func() {
		if throttled == "" && waiting == "" {
			return
		}
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer ccancel()
		if throttled != "" {
			if terr := store.SetStreamThrottled(cctx, name, c.source.GetName(), owner, ""); terr != nil {
				c.log.Warn("cannot clear the stream's throttle state", zap.Error(terr))
			}
		}
		if waiting != "" {
			if werr := store.SetStreamWaiting(cctx, name, c.source.GetName(), owner, ""); werr != nil {
				c.log.Warn("cannot clear the stream's waiting state", zap.Error(werr))
			}
		}
	}()
	c.log.Info("stream open", zap.String("streamer", c.source.GetStreamerAddress()), zap.Int("tables", len(tables)),
		zap.String("position", position))
	go c.logProgress(ctx, progressInterval)

	pending := 0
	for _, tc := range progress {
		if !tc.Done {
			pending++
		}
	}
	var copying atomic.Bool
	copying.Store(pending > 0)
	if pending > 0 && (throttle.Enabled(c.spec.GetOptions().GetThrottle().GetTarget()) || c.spec.GetOptions().GetMaxReplayLagMs() >= 0) {
		go c.throttleTarget(ctx, client, play, &copying)
	}
	// Deferred secondary keys are added beside the stream: once at its start
	// (a run may have ended before adding them), then whenever a table's
	// copy commits its last chunk. A failure ends the stream with its cause.
	addKeys := make(chan struct{}, 1)
	addKeys <- struct{}{}
	keysAdded := make(chan struct{})
	go func() {
		defer close(keysAdded)
		for {
			select {
			case <-ctx.Done():
				return
			case <-addKeys:
			}
			if err := c.addDeferredKeys(ctx); err != nil {
				cancelCause(err)
				return
			}
		}
	}()
	defer func() {
		cancel()
		<-keysAdded
	}()
	w := newCopyWriter(ctx, e.db, play, workers, func(table string, _ int, done bool) {
		if done {
			c.log.Info("table copied", zap.String("table", table))
			select {
			case addKeys <- struct{}{}:
			default: // a run is due already
			}
		}
	})
	defer func() {
		cancel()
		if werr := w.wait(); err == nil && werr != nil && !errors.Is(werr, context.Canceled) {
			err = werr
		}
	}()
	applied, verified := false, false
	committed := func() bool { return (applied && replay.idle()) || w.rows.Load() > 0 || verified }
	if pending == 0 {
		if err := c.markCopied(ctx); err != nil {
			return false, err
		}
	}
	handle := func(item *rowliftv1.StreamItem) error {
		switch {
		case item.GetChunk().GetVerify():
			chunk := item.GetChunk()
			v := verifiers[chunk.GetTable()]
			if v == nil {
				return fmt.Errorf("streamer sent verify rows of table %q, which this stream does not verify", chunk.GetTable())
			}
			// Exactly at the chunk's fence: every earlier item has committed and
			// no later one is applied until the chunk is checked.
			if err := w.drain(); err != nil {
				return err
			}
			if err := replay.drain(); err != nil {
				return err
			}
			testhook.Delay(ctx, testhook.VerifyCheck)
			if chunk.GetDigest() != nil {
				if err := v.startDigest(ctx, chunk); err != nil {
					return err
				}
			} else if err := v.check(ctx, chunk, &rowWriter{p: play, keys: replay.keys}); err != nil {
				return err
			}
			verified = true
			return nil
		case item.GetChunk() != nil:
			chunk := item.GetChunk()
			t := tables[chunk.GetTable()]
			if t == nil {
				return fmt.Errorf("streamer sent rows of table %q, which the workflow does not stream", chunk.GetTable())
			}
			// Stream order: every earlier transaction has committed first.
			if err := replay.drain(); err != nil {
				return err
			}
			if err := w.submit(t, chunk); err != nil {
				return err
			}
			if chunk.GetTableDone() {
				if pending--; pending == 0 {
					copying.Store(false)
					if err := w.drain(); err != nil {
						return err
					}
					return c.markCopied(ctx)
				}
			}
			return nil
		case item.GetTransaction() != nil:
			// Applied after every earlier chunk has committed: stream order.
			if err := w.drain(); err != nil {
				return err
			}
			applied = true
			return replay.submit(item.GetTransaction())
		case item.GetHeartbeat() != nil:
			hb := item.GetHeartbeat()
			if server := hb.GetSourceServer(); server != "" {
				// Status only, as the throttle state.
				if before, err := store.SetSourceServer(ctx, name, c.source.GetName(), owner, server); err != nil {
					c.log.Warn("cannot record the stream's source server", zap.Error(err))
				} else if before != "" && before != server {
					c.log.Warn("the stream's source is another server than before: a failover, or an address that now reaches another server",
						zap.String("source_server", server), zap.String("before", before))
				}
			}
			c.stats.Throttled(hb.GetThrottled() != "")
			if hb.GetThrottled() != throttled {
				// Status only: a failed write is tried again at the next heartbeat.
				if err := store.SetStreamThrottled(ctx, name, c.source.GetName(), owner, hb.GetThrottled()); err != nil {
					c.log.Warn("cannot record the stream's throttle state", zap.Error(err))
				} else {
					throttled = hb.GetThrottled()
				}
			}
			if hb.GetWaiting() != waiting {
				if hb.GetWaiting() != "" {
					c.log.Info("waiting on the source", zap.String("why", hb.GetWaiting()))
				}
				// Status only, as the throttle state.
				if err := store.SetStreamWaiting(ctx, name, c.source.GetName(), owner, hb.GetWaiting()); err != nil {
					c.log.Warn("cannot record the stream's waiting state", zap.Error(err))
				} else {
					waiting = hb.GetWaiting()
				}
			}
			// A heartbeat only moves the position; waiting for copy writes to
			// commit would stall the copy for nothing. Skipping one is safe: every
			// applied transaction commits its own position.
			if err := replay.failure(); err != nil {
				return err
			}
			// Without a position it only carries the throttle state: the streamer
			// had items in flight, which the target must not advance past.
			if hb.GetPosition() == nil || !w.idle() || !replay.idle() {
				return nil
			}
			// The target has everything the source had at the heartbeat's time, so
			// lag at idle reads about zero rather than the time since the last write.
			return play.advance(ctx, hb.GetPosition().GetGtidSet(), hb.GetSourceTimeUs())
		case item.GetDdl() != nil:
			if err := w.drain(); err != nil {
				return err
			}
			if err := replay.drain(); err != nil {
				return err
			}
			if err := c.ddl(ctx, play, item.GetDdl()); err != nil {
				return err
			}
			if !ddlscope.ReopensStream(item.GetDdl()) {
				return nil // the target's tables did not change
			}
			// The streamer ends the stream after a schema change: the next one
			// reads on with the tables as they are then.
			return errReopen
		}
		return nil
	}
	// A digest check that ended the stream did so with its error as the
	// cause: whatever failed from that on failed because of it.
	because := func(err error) error {
		if cause := context.Cause(ctx); ctx.Err() != nil && !errors.Is(cause, context.Canceled) {
			return cause
		}
		return err
	}
	for _, item := range first.GetItems() {
		if item.GetFields() == nil {
			if err := handle(item); err != nil {
				return committed(), because(err)
			}
		}
	}
	for {
		msg, err := c.recv(stream)
		if err != nil {
			return committed(), because(err)
		}
		for _, item := range msg.GetItems() {
			if err := handle(item); err != nil {
				return committed(), because(err)
			}
		}
	}
}

// progressInterval is how often a running stream logs its position and lag.
const progressInterval = 10 * time.Second

// logProgress logs the stream's committed position and lag until ctx ends, so
// an operator following the log sees how far behind each workflow is.
func (c *controller) logProgress(ctx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		streams, err := c.engine.store.Streams(ctx, c.spec.GetName())
		if err != nil {
			continue // the stream itself reports a target that is gone
		}
		for _, st := range streams {
			if st.Source == c.source.GetName() {
				c.log.Info("stream progress", zap.String("position", st.Position), zap.Duration("lag", st.Lag()))
			}
		}
	}
}

// ddl handles a schema change on streamed tables as decideDDL says.
func (c *controller) ddl(ctx context.Context, play *player, ddl *rowliftv1.DDL) error {
	stoppedAt, err := c.engine.store.StoppedAtDDL(ctx, c.spec.GetName(), c.source.GetName())
	if err != nil {
		return err
	}
	advance := func() error { return play.advance(ctx, ddl.GetPosition().GetGtidSet(), ddl.GetCommitTimeUs()) }
	switch decideDDL(ddl, c.spec.GetOptions().GetOnDdl(), stoppedAt) {
	case ddlFreeze:
		c.log.Info("tables frozen/unfrozen by a cutover", zap.Strings("tables", ddl.GetTables()),
			zap.String("statement", ddl.GetStatement()), zap.String("gtid", ddl.GetGtid()))
		return advance()
	case ddlKeepShadow:
		return c.keepShadow(ctx, play, ddl)
	case ddlIgnore:
		c.log.Warn("ignoring DDL", zap.String("statement", ddl.GetStatement()))
		return advance()
	case ddlResumed:
		c.log.Info("resumed past the DDL the workflow stopped at", zap.String("statement", ddl.GetStatement()), zap.String("gtid", ddl.GetGtid()))
		return advance()
	case ddlSwap:
		return c.swapShadow(ctx, play, ddl)
	case ddlExec:
		return c.execDDL(ctx, play, ddl)
	}
	return &permanentError{state: state.Stopped, ddl: ddl.GetGtid(), err: fmt.Errorf("stopped at DDL on %s (source transaction %s): %q; "+
		"make the same change on the target, then resume the workflow", strings.Join(ddl.GetTables(), ", "), ddl.GetGtid(), ddl.GetStatement())}
}

// ddlStep is what the applier does at a DDL item.
type ddlStep int

// The steps at a DDL item (decideDDL).
const (
	// ddlFreeze goes past a cutover's freeze or unfreeze rename: no schema
	// change, whatever on_ddl says, as the cutover waits for the position
	// after it.
	ddlFreeze ddlStep = iota + 1
	// ddlKeepShadow keeps a statement on an online schema change tool's
	// shadow table for its swap.
	ddlKeepShadow
	// ddlIgnore goes past it (on_ddl IGNORE).
	ddlIgnore
	// ddlResumed goes past the statement the workflow stopped at, now
	// resumed: the operator made the change, and the stream began by
	// checking the target against the source's columns as they are now.
	ddlResumed
	// ddlSwap follows a tool's cut-over (swapShadow: EXEC applies the
	// shadow's ALTERs, STOP stops naming them).
	ddlSwap
	// ddlExec applies it on the target (on_ddl EXEC).
	ddlExec
	// ddlStop stops the workflow at it (on_ddl STOP, or unset in a workflow
	// stored before EXEC was the default).
	ddlStop
)

// decideDDL is the step at a DDL item, under on_ddl onDDL, for a stream that
// last stopped the workflow at the schema change of source transaction
// stoppedAt.
func decideDDL(ddl *rowliftv1.DDL, onDDL rowliftv1.OnDDL, stoppedAt string) ddlStep {
	switch {
	case ddl.GetFreeze():
		return ddlFreeze
	case ddl.GetShadow() != "" && len(ddl.GetTables()) == 0:
		return ddlKeepShadow
	case onDDL == rowliftv1.OnDDL_ON_DDL_IGNORE:
		return ddlIgnore
	case stoppedAt == ddl.GetGtid():
		return ddlResumed
	case ddl.GetShadow() != "":
		return ddlSwap
	case onDDL == rowliftv1.OnDDL_ON_DDL_EXEC:
		return ddlExec
	}
	return ddlStop
}

// markCopied moves the workflow to running once every source's copy is done.
func (c *controller) markCopied(ctx context.Context) error {
	store := c.engine.store
	done, err := store.CopyDone(ctx, c.spec.GetName())
	if err != nil {
		return err
	}
	if !done {
		return nil
	}
	// Only from copying: a workflow stopped meanwhile stays stopped.
	msg := fmt.Sprintf("copy done at %s", time.Now().UTC().Format(time.RFC3339))
	moved, err := store.Transition(ctx, c.spec.GetName(), []state.State{state.Copying}, state.Running, msg)
	if moved {
		c.log.Info("copy done")
	}
	return err
}

// withTargets adds each target table as it is now to the request
// (TableRequest.target): a stream that starts before a schema change of the
// source's table still to come reads the rows before it with the target's
// fields. A table that does not exist, or lacks a streamed column, is left
// for CheckTargets to judge against the source's fields.
func withTargets(ctx context.Context, db *sql.DB, spec *rowliftv1.WorkflowSpec, req *rowliftv1.StreamRequest) error {
	targetDB := TargetDatabase(spec)
	req.TargetDatabase = targetDB
	for _, tr := range req.GetTables() {
		name, _ := TargetTable(spec, tr.GetName())
		tbl, err := schema.Shape(ctx, db, targetDB, name)
		switch {
		case errors.Is(err, schema.ErrNoTable), errors.Is(err, schema.ErrNoKey):
			continue
		case err != nil:
			return fmt.Errorf("read target table %s.%s: %w", targetDB, name, err)
		}
		cols, err := tbl.Streamed(tr.GetColumns())
		if err != nil {
			continue
		}
		tr.Target = tbl.Fields(cols)
	}
	return nil
}

// StreamRequest is the request a workflow's stream opens with, from its
// committed position, copy progress and the verifies it runs (all empty for
// a new workflow). The coordinator validates a new workflow with the same
// request.
func StreamRequest(st reshard.Stream, position string, progress map[string]state.TableCopy,
	verifying map[string]state.TableVerify) *rowliftv1.StreamRequest {
	spec := st.Spec
	opts := spec.GetOptions()
	req := &rowliftv1.StreamRequest{
		Protocol: rowcodec.StreamProtocol,
		Workflow: spec.GetName(),
		Position: &rowliftv1.Position{GtidSet: position},
		Database: spec.GetSourceDatabase(),
		Options: &rowliftv1.StreamOptions{ChunkRows: opts.GetChunkRows(), ChunkBytes: opts.GetChunkBytes(), PacketBytes: opts.GetPacketBytes(),
			ParallelTables: opts.GetParallelTables(), Throttle: opts.GetThrottle().GetSource(),
			ThrottleCheckMs: opts.GetThrottle().GetCheckIntervalMs(), JsonAsText: opts.GetJsonAsText(), MaxReplayLagMs: opts.GetMaxReplayLagMs()},
		Target: st.Target.GetName(),
	}
	if st.Filtered && !st.Range.Whole() {
		req.KeyRange = &rowliftv1.KeyRange{Start: st.Range.Start, End: st.Range.End}
	}
	for _, t := range spec.GetTables() {
		p := progress[t.GetName()]
		tr := &rowliftv1.TableRequest{Name: t.GetName(), Columns: t.GetColumns(), ShardingColumn: t.GetShardingColumn(),
			ShardingFunction: t.GetShardingFunction(), Reference: t.GetReference(),
			Copy: &rowliftv1.CopyProgress{Done: p.Done, LastPk: p.LastPK}}
		if v, ok := verifying[t.GetName()]; ok {
			tr.Verify = &rowliftv1.VerifyProgress{LastPk: v.LastPK, Done: v.Done, Repair: v.Repair}
			switch {
			case st.Merges():
				// A chunk's target rows are several sources': no digest of
				// one source's rows can match them.
				tr.Verify.RowsThrough = &rowliftv1.Row{}
			case v.Recheck:
				tr.Verify.RowsThrough = v.RowsThrough
				if tr.Verify.RowsThrough == nil {
					tr.Verify.RowsThrough = &rowliftv1.Row{} // to the table's end
				}
			}
		}
		req.Tables = append(req.Tables, tr)
	}
	return req
}

// prepare checks and creates the stream's target tables (prepareTargets),
// knowing which copies have started (see recheckStarted).
func (c *controller) prepare(ctx context.Context, fields []*rowliftv1.TableFields, maxPacket int) (map[string]*targetTable, error) {
	return recheckStarted(
		func() (map[string]state.TableCopy, error) {
			return startedCopies(ctx, c.engine.store, c.spec.GetName())
		},
		func(started map[string]state.TableCopy) (map[string]*targetTable, error) {
			// Leave headroom under max_allowed_packet for the statement's framing.
			return prepareTargets(ctx, c.engine.db, c.spec, fields, started, maxPacket-1024,
				func(table string, keys []schema.DeferredKey) error {
					return c.engine.store.DeferKeys(ctx, c.spec.GetName(), table, keys)
				})
		})
}

// recheckStarted runs check with the started copies that read returns. A
// table another stream of the workflow (from another source) has begun to
// copy into this target has rows by design, and that stream may commit its
// first rows after the started copies are read and before check finds them.
// They commit with their copy state, so while reading it again finds more
// started copies, check runs again; rows it still finds (errTargetHasRows)
// were written by something else.
func recheckStarted[T any](read func() (map[string]state.TableCopy, error), check func(map[string]state.TableCopy) (T, error)) (T, error) {
	var none T
	started, err := read()
	if err != nil {
		return none, err
	}
	for {
		out, err := check(started)
		if !errors.Is(err, errTargetHasRows) {
			return out, err
		}
		again, rerr := read()
		if rerr != nil {
			return none, rerr
		}
		if len(again) == len(started) {
			return none, err
		}
		started = again
	}
}

// startedCopies are the tables whose copy any stream of the workflow on this
// target has begun, by table.
func startedCopies(ctx context.Context, store *state.Store, workflow string) (map[string]state.TableCopy, error) {
	all, err := store.CopyState(ctx, workflow, "")
	if err != nil {
		return nil, err
	}
	out := map[string]state.TableCopy{}
	for _, tc := range all {
		if tc.LastPK != nil || tc.RowsCopied > 0 || tc.Done {
			out[tc.Table] = tc
		}
	}
	return out, nil
}

// recv receives the stream's next message, refusing one of another stream
// protocol (a streamer of another rowlift version) before anything in it is
// read: it is retried, so the stream resumes once both sides are upgraded.
func (c *controller) recv(stream grpc.ServerStreamingClient[rowliftv1.StreamResponse]) (*rowliftv1.StreamResponse, error) {
	msg, err := stream.Recv()
	if err != nil {
		return nil, c.streamError(err)
	}
	if msg.GetProtocol() != rowcodec.StreamProtocol {
		return nil, fmt.Errorf("streamer %s (source %s) speaks stream protocol %d and this applier %d: run the same rowlift version on both",
			c.source.GetStreamerAddress(), c.source.GetName(), msg.GetProtocol(), rowcodec.StreamProtocol)
	}
	return msg, nil
}

// streamError adds which streamer failed; the status code and details are
// kept for IsPermanent and lostWrites, and a VerifyFailure detail becomes a
// *verifyFailure.
func (c *controller) streamError(err error) error {
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("streamer %s ended the stream", c.source.GetStreamerAddress())
	}
	st, _ := status.FromError(err)
	p := st.Proto()
	p.Message = fmt.Sprintf("streamer %s (source %s): %s", c.source.GetStreamerAddress(), c.source.GetName(), grpctls.Explain(st.Message()))
	err = status.ErrorProto(p)
	for _, d := range st.Details() {
		if vf, ok := d.(*rowliftv1.VerifyFailure); ok {
			return &verifyFailure{table: vf.GetTable(), message: vf.GetMessage(), err: err}
		}
	}
	return err
}

// verifyFailure is a stream that ended because one table's verify chunks
// cannot be read any more (see rowliftv1.VerifyFailure): the controller ends
// that table's verify and opens the stream again without it.
type verifyFailure struct {
	table, message string
	err            error
}

func (e *verifyFailure) Error() string { return e.err.Error() }
func (e *verifyFailure) Unwrap() error { return e.err }

// targetDatabase is the target database of a workflow: the source's name unless
// the spec says otherwise.
func TargetDatabase(spec *rowliftv1.WorkflowSpec) string {
	if spec.GetTargetDatabase() != "" {
		return spec.GetTargetDatabase()
	}
	return spec.GetSourceDatabase()
}
