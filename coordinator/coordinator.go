// Package coordinator is rowlift's control plane: it serves the Control API
// (create, start, stop, resume, delete, status and watch of workflows). It
// keeps no state of its own: every workflow lives in the _rowlift schema of
// its target servers, which it reaches over their DSNs, so it can restart at
// any time, and the appliers act on what it writes there.
package coordinator

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/applier"
	"github.com/rowlift/rowlift/coordinator/cutover"
	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/grants"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// Defaults for zero Config values and requests.
const (
	// DefaultValidateTimeout bounds a streamer's Validate call: it reads a few
	// rows of information_schema per table, so a streamer that takes longer is
	// as good as unreachable.
	DefaultValidateTimeout = 30 * time.Second
	// DefaultWatchInterval is WatchWorkflow's interval when the request has none.
	DefaultWatchInterval = time.Second
	// minWatchInterval keeps a watcher from turning status reads into load on
	// the targets.
	minWatchInterval = 100 * time.Millisecond
)

// Config configures a Server.
type Config struct {
	// Targets maps each target name (what a workflow's TargetShard.name says) to
	// the go-sql-driver DSN of that target server.
	Targets map[string]string
	Logger  *zap.Logger
	// DialOptions are added to the gRPC options used to reach streamers
	// (grpcopt's); a grpc.WithTransportCredentials among them replaces
	// grpcopt's plaintext, which is how the --tls-* flags apply.
	DialOptions []grpc.DialOption
	// ValidateTimeout bounds each streamer's Validate call (0: DefaultValidateTimeout).
	ValidateTimeout time.Duration
}

// Server serves the Control service.
type Server struct {
	rowliftv1.UnimplementedControlServer
	targets         map[string]*target
	log             *zap.Logger
	dial            []grpc.DialOption
	validateTimeout time.Duration
	hist            *history
}

// target is one configured target server and its state store.
type target struct {
	name string
	db   *sql.DB
	cfg  *mysql.Config

	mu    sync.Mutex
	store *state.Store
}

// New opens a pool per target. It does not connect yet, so a coordinator can
// start while a target is down; requests that need that target fail with
// Unavailable until it is back.
func New(cfg Config) (*Server, error) {
	if len(cfg.Targets) == 0 {
		return nil, errors.New("no targets: give each target server as NAME=DSN")
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	s := &Server{targets: map[string]*target{}, log: log, dial: cfg.DialOptions, validateTimeout: cfg.ValidateTimeout, hist: newHistory()}
	if s.validateTimeout <= 0 {
		s.validateTimeout = DefaultValidateTimeout
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Targets)) {
		if err := state.CheckTargetName(name); err != nil {
			s.Close()
			return nil, err
		}
		db, mcfg, err := dbconn.Open(cfg.Targets[name], dbconn.Target)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("target %s: %w", name, err)
		}
		s.targets[name] = &target{name: name, db: db, cfg: mcfg}
		log.Info("target configured", zap.String("target", name), zap.String("server", dbconn.Redacted(mcfg)))
	}
	return s, nil
}

// Close closes the target pools.
func (s *Server) Close() {
	for _, t := range s.targets {
		t.db.Close()
	}
}

// open returns the target's state store, creating the sidecar schema on first
// use; until that succeeds every call tries again.
func (t *target) open(ctx context.Context) (*state.Store, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.store != nil {
		return t.store, nil
	}
	if err := dbconn.Ping(ctx, t.db, t.cfg, "target"); err != nil {
		return nil, t.fail(err)
	}
	st, err := state.Open(ctx, t.db)
	if err != nil {
		return nil, t.fail(err)
	}
	t.store = st
	return st, nil
}

// fail turns an error from the target's state into a status that names the
// target and its address, never its password.
func (t *target) fail(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, state.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, state.ErrExists):
		return status.Errorf(codes.AlreadyExists, "target %s: %v", t.name, err)
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	if !errors.Is(err, dbconn.ErrUnreachable) && !errors.Is(err, dbconn.ErrAccessDenied) && !errors.Is(err, dbconn.ErrTLS) {
		err = dbconn.Explain(err, t.cfg, "target")
	}
	code := codes.Internal
	switch {
	case errors.Is(err, dbconn.ErrUnreachable), errors.Is(err, driver.ErrBadConn):
		code = codes.Unavailable
	case errors.Is(err, dbconn.ErrAccessDenied), errors.Is(err, dbconn.ErrTLS), errors.As(err, new(*grants.Error)):
		code = codes.FailedPrecondition
	}
	return status.Errorf(code, "target %s (%s): %v", t.name, t.cfg.Addr, err)
}

// pick returns the named targets, or every target when names is empty.
func (s *Server) pick(names []string) ([]*target, error) {
	if len(names) == 0 {
		names = slices.Sorted(maps.Keys(s.targets))
	}
	var out []*target
	for _, n := range names {
		t := s.targets[n]
		if t == nil {
			return nil, status.Error(codes.InvalidArgument, s.unconfigured(n))
		}
		out = append(out, t)
	}
	return out, nil
}

// unconfigured says that the named target is not one of the coordinator's,
// and how to add it.
func (s *Server) unconfigured(name string) string {
	return fmt.Sprintf("target %q is not configured on this coordinator (it has %s): add --target %s=DSN to the coordinator",
		name, strings.Join(slices.Sorted(maps.Keys(s.targets)), ", "), name)
}

// specTargets returns the configured targets of a workflow's spec, in spec order.
func (s *Server) specTargets(spec *rowliftv1.WorkflowSpec) ([]*target, error) {
	var out []*target
	for _, ts := range spec.GetTargets() {
		t := s.targets[ts.GetName()]
		if t == nil {
			return nil, status.Errorf(codes.FailedPrecondition, "workflow %q: %s", spec.GetName(), s.unconfigured(ts.GetName()))
		}
		out = append(out, t)
	}
	return out, nil
}

// locate finds a workflow on the targets ref names (every target when none)
// and returns its spec and the targets the spec names.
func (s *Server) locate(ctx context.Context, ref *rowliftv1.WorkflowRef) (*rowliftv1.WorkflowSpec, []*target, error) {
	name := ref.GetName()
	if err := state.CheckName(name); err != nil {
		return nil, nil, status.Error(codes.InvalidArgument, err.Error())
	}
	candidates, err := s.pick(ref.GetTargets())
	if err != nil {
		return nil, nil, err
	}
	var unreachable []string
	for _, t := range candidates {
		st, err := t.open(ctx)
		if err != nil {
			unreachable = append(unreachable, status.Convert(err).Message())
			continue
		}
		w, err := st.Workflow(ctx, name)
		if errors.Is(err, state.ErrNotFound) {
			continue
		}
		if err != nil {
			unreachable = append(unreachable, status.Convert(t.fail(err)).Message())
			continue
		}
		targets, err := s.specTargets(w.Spec)
		return w.Spec, targets, err
	}
	var names []string
	for _, t := range candidates {
		names = append(names, t.name)
	}
	if len(unreachable) > 0 {
		return nil, nil, status.Errorf(codes.Unavailable, "workflow %q: not found on the targets that answered, and %s",
			name, strings.Join(unreachable, "; "))
	}
	return nil, nil, status.Errorf(codes.NotFound, "workflow %q not found on target %s", name, strings.Join(names, ", "))
}

// read returns every target's record of a workflow (wf nil where it is missing).
func (s *Server) read(ctx context.Context, name string, targets []*target) ([]view, error) {
	var views []view
	for _, t := range targets {
		st, err := t.open(ctx)
		if err != nil {
			return nil, err
		}
		v := view{target: t.name}
		v.wf, err = st.Workflow(ctx, name)
		if errors.Is(err, state.ErrNotFound) {
			views = append(views, v)
			continue
		}
		if err != nil {
			return nil, t.fail(err)
		}
		if v.copies, err = st.CopyState(ctx, name, ""); err != nil {
			return nil, t.fail(err)
		}
		if v.streams, err = st.Streams(ctx, name); err != nil {
			return nil, t.fail(err)
		}
		if v.verifies, err = st.Verify(ctx, name, ""); err != nil {
			return nil, t.fail(err)
		}
		if v.applier, err = st.ApplierRunning(ctx); err != nil {
			return nil, t.fail(err)
		}
		views = append(views, v)
	}
	return views, nil
}

// workflow reads a workflow's definition and status from its targets.
func (s *Server) workflow(ctx context.Context, spec *rowliftv1.WorkflowSpec, targets []*target) (*rowliftv1.Workflow, error) {
	views, err := s.read(ctx, spec.GetName(), targets)
	if err != nil {
		return nil, err
	}
	var journal *state.Journal
	if st, err := targets[0].open(ctx); err == nil {
		if j, err := st.Journal(ctx, spec.GetName()); err == nil {
			journal = j
		}
	}
	return s.build(spec, views, journal)
}

// build makes a workflow's definition and status from its targets' records
// and the journal of its last cutover (nil when none); NotFound when no
// target has it any more.
func (s *Server) build(spec *rowliftv1.WorkflowSpec, views []view, journal *state.Journal) (*rowliftv1.Workflow, error) {
	found := false
	for _, v := range views {
		found = found || v.wf != nil
	}
	if !found {
		return nil, status.Errorf(codes.NotFound, "workflow %q not found: it was deleted", spec.GetName())
	}
	now := time.Now()
	samples := s.hist.record(spec.GetName(), views, now)
	w := &rowliftv1.Workflow{Spec: spec, Status: buildStatus(spec, views, samples, now)}
	if journal != nil {
		w.Status.Cutover = cutoverStatus(journal)
	}
	return w, nil
}

// StartWorkflow begins the copy of a new workflow: the appliers start its streams.
func (s *Server) StartWorkflow(ctx context.Context, ref *rowliftv1.WorkflowRef) (*rowliftv1.Workflow, error) {
	return s.move(ctx, ref, cutover.OpStart)
}

// StopWorkflow stops a workflow: its appliers end its streams and keep what
// they committed.
func (s *Server) StopWorkflow(ctx context.Context, ref *rowliftv1.WorkflowRef) (*rowliftv1.Workflow, error) {
	return s.move(ctx, ref, cutover.OpStop)
}

// ResumeWorkflow continues a stopped or failed workflow from its committed state.
func (s *Server) ResumeWorkflow(ctx context.Context, ref *rowliftv1.WorkflowRef) (*rowliftv1.Workflow, error) {
	return s.move(ctx, ref, cutover.OpResume)
}

// RewindWorkflow resumes a workflow whose source lost transactions the
// target applied (a failover that lost writes): every such stream goes back to
// the last position its source has, with a verify with repair of the
// workflow's tables, on each target in one transaction (state.Rewind), and the
// workflow resumes. A rewind that crashed before the resume leaves nothing to
// rewind; the refusal then says to resume.
func (s *Server) RewindWorkflow(ctx context.Context, ref *rowliftv1.WorkflowRef) (*rowliftv1.Workflow, error) {
	spec, targets, err := s.locate(ctx, ref)
	if err != nil {
		return nil, err
	}
	name := spec.GetName()
	rewound := false
	for _, t := range targets {
		st, err := t.open(ctx)
		if err != nil {
			return nil, err
		}
		sources, err := st.Rewind(ctx, name)
		if errors.Is(err, state.ErrNothingLost) {
			continue
		}
		if err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "%v", err)
		}
		s.log.Info("workflow rewound past transactions its sources lost; a verify with repair puts their rows right",
			zap.String("workflow", name), zap.String("target", t.name), zap.Strings("sources", sources))
		rewound = true
	}
	if !rewound {
		return nil, status.Errorf(codes.FailedPrecondition, "workflow %q has no stream whose source lacks transactions the target applied: "+
			"there is nothing to rewind (a rewind that was interrupted is done: resume it with `rowlift workflow resume %s`)", name, name)
	}
	return s.move(ctx, ref, cutover.OpResume)
}

// move applies a life-cycle operation on every target of the workflow. Every
// target is read and the operation decided for each before any is written, so
// a request that cannot apply somewhere changes nothing; each write only moves
// a target from the state it was read in.
func (s *Server) move(ctx context.Context, ref *rowliftv1.WorkflowRef, o cutover.Op) (*rowliftv1.Workflow, error) {
	spec, targets, err := s.locate(ctx, ref)
	if err != nil {
		return nil, err
	}
	name := spec.GetName()
	views, err := s.read(ctx, name, targets)
	if err != nil {
		return nil, err
	}
	type step struct {
		t        *target
		from, to state.State
	}
	var steps []step
	for i, v := range views {
		if v.wf == nil {
			return nil, status.Errorf(codes.FailedPrecondition, "workflow %q is missing on target %s, a delete that did not finish: delete it again",
				name, v.target)
		}
		copyDone := len(v.copies) > 0
		for _, c := range v.copies {
			copyDone = copyDone && c.Copied()
		}
		to, change, err := cutover.Move(o, name, v.wf.State, copyDone)
		if err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "cannot %s workflow %q on target %s: %v", o, name, v.target, err)
		}
		if change {
			steps = append(steps, step{t: targets[i], from: v.wf.State, to: to})
		}
	}
	message := ""
	if o == cutover.OpStop {
		message = "stopped by an operator at " + time.Now().UTC().Format(time.RFC3339)
	}
	for _, st := range steps {
		store, err := st.t.open(ctx)
		if err != nil {
			return nil, err
		}
		moved, err := store.Transition(ctx, name, []state.State{st.from}, st.to, message)
		if err != nil {
			return nil, st.t.fail(err)
		}
		if !moved {
			return nil, status.Errorf(codes.Aborted, "workflow %q on target %s left state %s while it was being moved to %s: read its status and retry",
				name, st.t.name, st.from, st.to)
		}
		s.log.Info("workflow moved", zap.String("workflow", name), zap.String("target", st.t.name), zap.String("op", string(o)),
			zap.String("from", string(st.from)), zap.String("to", string(st.to)))
	}
	return s.workflow(ctx, spec, targets)
}

// DeleteWorkflow removes a workflow's state from every target; its appliers
// end its streams. Target tables and their rows are kept.
func (s *Server) DeleteWorkflow(ctx context.Context, ref *rowliftv1.WorkflowRef) (*rowliftv1.DeleteWorkflowResponse, error) {
	spec, targets, err := s.locate(ctx, ref)
	if err != nil {
		return nil, err
	}
	// Reach every target before deleting anywhere, so an unreachable one does
	// not leave the workflow half deleted.
	stores := make([]*state.Store, len(targets))
	for i, t := range targets {
		if stores[i], err = t.open(ctx); err != nil {
			return nil, err
		}
	}
	resp := &rowliftv1.DeleteWorkflowResponse{}
	db := applier.TargetDatabase(spec)
	for i, t := range targets {
		// A table whose deferred keys were not added yet is kept without
		// them, and a workflow created later into it would not add them.
		copies, err := stores[i].CopyState(ctx, spec.GetName(), "")
		if err != nil {
			return nil, t.fail(err)
		}
		lacks := map[string][]string{}
		for _, c := range copies {
			if len(c.KeysPending) > 0 {
				lacks[c.Table] = c.KeysPending
			}
		}
		if err := stores[i].DeleteWorkflow(ctx, spec.GetName()); err != nil {
			return nil, t.fail(err)
		}
		for _, tbl := range spec.GetTables() {
			name, _ := applier.TargetTable(spec, tbl.GetName())
			kept := fmt.Sprintf("%s:%s.%s", t.name, db, name)
			if keys := lacks[tbl.GetName()]; len(keys) > 0 {
				kept += fmt.Sprintf(" (without its secondary keys %s, which the copy adds at its end: add them as the source has them, "+
					"or drop the table before a new workflow copies into it)", strings.Join(keys, ", "))
			}
			resp.KeptTables = append(resp.KeptTables, kept)
		}
	}
	s.log.Info("workflow deleted; target tables kept", zap.String("workflow", spec.GetName()), zap.Strings("tables", resp.KeptTables))
	return resp, nil
}

// GetWorkflow returns a workflow's definition and status.
func (s *Server) GetWorkflow(ctx context.Context, ref *rowliftv1.WorkflowRef) (*rowliftv1.Workflow, error) {
	spec, targets, err := s.locate(ctx, ref)
	if err != nil {
		return nil, err
	}
	return s.workflow(ctx, spec, targets)
}

// WatchWorkflow sends the workflow's status now and at every interval until
// the caller cancels or the workflow is deleted (then the call ends with OK).
func (s *Server) WatchWorkflow(req *rowliftv1.WatchWorkflowRequest, stream grpc.ServerStreamingServer[rowliftv1.Workflow]) error {
	ctx := stream.Context()
	interval := time.Duration(req.GetIntervalMs()) * time.Millisecond
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	interval = max(interval, minWatchInterval)
	spec, targets, err := s.locate(ctx, req.GetWorkflow())
	if err != nil {
		return err
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		w, err := s.workflow(ctx, spec, targets)
		if status.Code(err) == codes.NotFound {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(w); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-tick.C:
		}
	}
}
