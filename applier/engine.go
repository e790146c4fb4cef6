// Package applier is the target side of rowlift. Its Engine runs every workflow
// recorded in its target's sidecar schema: for each (workflow, source) it opens the
// stream to that source's streamer and writes what arrives, committing progress in
// the same transaction as the rows.
package applier

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/metrics"
	"github.com/rowlift/rowlift/internal/reshard"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// Defaults for zero Config and WorkflowOptions values. Three workers let one item
// write while the previous one commits and the next one is prepared; more do not
// help a single table, whose writes go in key order.
const (
	DefaultPollInterval = time.Second
	DefaultWorkers      = 3
)

// Config configures an Engine.
type Config struct {
	// TargetDSN is the go-sql-driver DSN of the target server.
	TargetDSN string
	Logger    *zap.Logger
	// PollInterval is how often the engine looks for new, started or stopped
	// workflows in the sidecar schema.
	PollInterval time.Duration
	// DialOptions are added to the gRPC options used to reach streamers
	// (grpcopt's); a grpc.WithTransportCredentials among them replaces
	// grpcopt's plaintext, which is how the --tls-* flags apply.
	DialOptions []grpc.DialOption
	// Ready, when set, is told after every pass over the sidecar schema whether
	// the engine does its job (see readyAfter), for the readiness probe.
	Ready func(ready bool)
}

// Engine runs the workflows of one target server.
type Engine struct {
	cfg   Config
	db    *sql.DB
	mcfg  *mysql.Config
	log   *zap.Logger
	store *state.Store
	// lock holds the target's applier lock while this engine runs workflows.
	lock *sql.Conn

	mu      sync.Mutex
	running map[streamKey]*runningStream
	// workflows reports the workflows the last reconcile read, by state.
	workflows *metrics.Workflows
}

type streamKey struct{ workflow, source string }

type runningStream struct {
	cancel context.CancelFunc
	done   chan struct{}
	// spec is the definition the stream runs with: a cutover that rewrites it
	// (the target tables it writes into) restarts the stream.
	spec *rowliftv1.WorkflowSpec
	// verify is when the verify the stream was started with began (0: none):
	// a verify started later restarts the stream, which then sends its chunks.
	verify int64
}

// New opens the target pool. It does not connect yet: Run waits for the target.
func New(cfg Config) (*Engine, error) {
	db, mcfg, err := dbconn.Open(cfg.TargetDSN, dbconn.Target)
	if err != nil {
		return nil, fmt.Errorf("target: %w", err)
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	return &Engine{cfg: cfg, db: db, mcfg: mcfg, log: log.With(zap.String("target", dbconn.Redacted(mcfg))),
		running: map[streamKey]*runningStream{}, workflows: metrics.NewWorkflows()}, nil
}

// Run reconciles running streams with the sidecar schema every poll interval
// until ctx ends, then stops every stream.
func (e *Engine) Run(ctx context.Context) error {
	defer e.db.Close()
	defer func() {
		e.stopAll()
		if e.lock != nil {
			e.lock.Close()
		}
	}()
	tick := time.NewTicker(e.cfg.PollInterval)
	defer tick.Stop()
	var lastErr string
	for {
		err := e.reconcile(ctx)
		if e.cfg.Ready != nil && ctx.Err() == nil {
			e.cfg.Ready(readyAfter(err))
		}
		if err != nil && ctx.Err() == nil {
			if err.Error() != lastErr {
				if errors.Is(err, errAnotherApplier) {
					e.log.Info("standing by", zap.Error(err))
				} else {
					e.log.Error("cannot read workflows from the target; retrying", zap.Error(err))
				}
			}
			lastErr = err.Error()
		} else {
			lastErr = ""
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// holdLock takes the engine lock, or checks that it still holds it. When the lock
// connection is lost (a target restart) every stream stops until it is back.
func (e *Engine) holdLock(ctx context.Context) error {
	if e.lock != nil {
		var mine sql.NullBool
		err := e.lock.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?) = CONNECTION_ID()", state.ApplierLock).Scan(&mine)
		if err == nil && mine.Bool {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err() // shutting down: the lock goes with the connection
		}
		e.log.Warn("lost the applier lock on the target; stopping streams", zap.Error(err))
		e.stopAll()
		e.lock.Close()
		e.lock = nil
	}
	conn, err := e.db.Conn(ctx)
	if err != nil {
		return dbconn.Explain(err, e.mcfg, "target")
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", state.ApplierLock).Scan(&got); err != nil {
		conn.Close()
		return dbconn.Explain(err, e.mcfg, "target")
	}
	if got.Int64 != 1 {
		conn.Close()
		return errAnotherApplier
	}
	e.lock = conn
	e.log.Info("holding the applier lock on the target")
	return nil
}

// readyAfter says whether an engine whose last pass ended with err does its
// job: it holds the target's applier lock and read its workflows, or it stands
// by behind another applier's lock, ready to take over (a second applier is
// meant to wait there). It is not ready while it cannot reach or read the target.
func readyAfter(err error) bool {
	return err == nil || errors.Is(err, errAnotherApplier)
}

var errAnotherApplier = fmt.Errorf("another applier holds the lock %q on this target; standing by until it is released", state.ApplierLock)

func (e *Engine) reconcile(ctx context.Context) error {
	if err := e.holdLock(ctx); err != nil {
		return err
	}
	if e.store == nil {
		if err := dbconn.Ping(ctx, e.db, e.mcfg, "target"); err != nil {
			return err
		}
		store, err := state.Open(ctx, e.db)
		if err != nil {
			return err
		}
		e.store = store
	}
	workflows, err := e.store.Workflows(ctx)
	if err != nil {
		return err
	}
	states := make([][2]string, len(workflows))
	for i, w := range workflows {
		states[i] = [2]string{w.Target, string(w.State)}
	}
	e.workflows.Set(states)
	verifies, err := e.store.VerifyGenerations(ctx)
	if err != nil {
		return err
	}
	want := map[streamKey]*state.Workflow{}
	streams := map[streamKey]reshard.Stream{}
	for _, w := range workflows {
		if w.State != state.Copying && w.State != state.Running {
			continue
		}
		ss, err := reshard.ForTarget(w.Spec, w.Target)
		if err != nil {
			// Creation checks the spec; only a hand-edited one gets here.
			e.log.Error("cannot run workflow", zap.String("workflow", w.Spec.GetName()), zap.Error(err))
			if serr := e.store.SetState(ctx, w.Spec.GetName(), state.Error, err.Error()); serr != nil {
				return serr
			}
			continue
		}
		for _, st := range ss {
			key := streamKey{w.Spec.GetName(), st.Source.GetName()}
			want[key], streams[key] = w, st
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for key, rs := range e.running {
		select {
		case <-rs.done:
			// It ended by itself, after recording why. The workflows read above may
			// predate that, so leave restarting it to the next pass.
			delete(e.running, key)
			delete(want, key)
			continue
		default:
		}
		w := want[key]
		verify := verifies[[2]string{key.workflow, key.source}]
		started := verify.Running != 0 && verify.Running != rs.verify
		cancelled := rs.verify != 0 && verify.Cancelled == rs.verify
		if w == nil || !proto.Equal(w.Spec, rs.spec) || started || cancelled {
			rs.cancel()
			<-rs.done
			delete(e.running, key)
			why := "stream stopped"
			switch {
			case w != nil && !proto.Equal(w.Spec, rs.spec):
				why = "workflow definition changed; restarting its stream"
			case started:
				why = "verify started; restarting the stream to send its chunks"
			case cancelled:
				why = "verify cancelled; restarting the stream without it"
			}
			e.log.Info(why, zap.String("workflow", key.workflow), zap.String("source", key.source))
		}
	}
	for key, w := range want {
		if _, ok := e.running[key]; ok {
			continue
		}
		st := streams[key]
		c := &controller{engine: e, pair: st, spec: st.Spec, source: st.Source,
			log: e.log.With(zap.String("workflow", key.workflow), zap.String("stream", st.Name()))}
		sctx, cancel := context.WithCancel(ctx)
		rs := &runningStream{cancel: cancel, done: make(chan struct{}), spec: w.Spec, verify: verifies[[2]string{key.workflow, key.source}].Running}
		e.running[key] = rs
		go func() {
			defer close(rs.done)
			c.run(sctx)
		}()
	}
	return nil
}

func (e *Engine) stopAll() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for key, rs := range e.running {
		rs.cancel()
		<-rs.done
		delete(e.running, key)
	}
}
