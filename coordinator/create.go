package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/rowlift/rowlift/applier"
	"github.com/rowlift/rowlift/internal/grpcopt"
	"github.com/rowlift/rowlift/internal/grpctls"
	"github.com/rowlift/rowlift/internal/reshard"
	"github.com/rowlift/rowlift/internal/throttle"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// CreateWorkflow validates the whole request before it writes anything (the
// spec, the sources through their streamers, the target tables, the name on
// every target), then creates the workflow on every target or on none.
func (s *Server) CreateWorkflow(ctx context.Context, req *rowliftv1.CreateWorkflowRequest) (*rowliftv1.Workflow, error) {
	spec := withDefaults(req.GetSpec())
	if err := checkSpec(spec); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	targets, err := s.specTargets(spec)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, status.Convert(err).Message())
	}
	log := s.log.With(zap.String("workflow", spec.GetName()))
	for _, t := range targets {
		st, err := t.open(ctx)
		if err != nil {
			return nil, err
		}
		w, err := st.Workflow(ctx, spec.GetName())
		if err == nil {
			return nil, status.Errorf(codes.AlreadyExists, "workflow %q already exists on target %s (state %s): delete it first or pick another name",
				spec.GetName(), t.name, w.State)
		}
		if !errors.Is(err, state.ErrNotFound) {
			return nil, t.fail(err)
		}
		if err := checkGrants(ctx, t, spec); err != nil {
			log.Info("workflow refused", zap.Error(err))
			return nil, err
		}
	}
	fields, warnings, flavors, err := s.validateSources(ctx, spec, nil)
	if err != nil {
		log.Info("workflow refused", zap.Error(err))
		return nil, err
	}
	for _, t := range targets {
		more, err := checkFlavors(ctx, t, spec, fields, flavors)
		if err != nil {
			log.Info("workflow refused", zap.Error(err))
			return nil, err
		}
		warnings = append(warnings, more...)
	}
	for _, t := range targets {
		if _, _, err := applier.CheckTargets(ctx, t.db, spec, fields.forTarget(spec, t.name), nil); err != nil {
			if applier.IsPermanent(err) {
				return nil, status.Errorf(codes.FailedPrecondition, "target %s: %v", t.name, err)
			}
			return nil, t.fail(err)
		}
	}
	if err := s.createOnAll(ctx, spec, targets, fields); err != nil {
		log.Warn("workflow not created", zap.Error(err))
		return nil, err
	}
	for _, w := range warnings {
		log.Warn("workflow created with a warning", zap.String("warning", w))
	}
	log.Info("workflow created", zap.Int("sources", len(spec.GetSources())), zap.Int("targets", len(targets)),
		zap.Int("tables", len(spec.GetTables())))
	w, err := s.workflow(ctx, spec, targets)
	if err != nil {
		return nil, err
	}
	w.Warnings = warnings
	return w, nil
}

// withDefaults is spec as it is stored: an unset on_ddl becomes EXEC, what a
// move that runs for weeks needs to outlive its tables' schema changes. It is
// written in, not left unset, because a stored unset on_ddl means STOP: the
// default of the workflows created before.
func withDefaults(spec *rowliftv1.WorkflowSpec) *rowliftv1.WorkflowSpec {
	if spec.GetOptions().GetOnDdl() != rowliftv1.OnDDL_ON_DDL_UNSPECIFIED {
		return spec
	}
	spec = proto.Clone(spec).(*rowliftv1.WorkflowSpec)
	if spec.Options == nil {
		spec.Options = &rowliftv1.WorkflowOptions{}
	}
	spec.Options.OnDdl = rowliftv1.OnDDL_ON_DDL_EXEC
	return spec
}

// createOnAll writes the workflow to each target in turn; when one fails, it
// deletes it again from those already written, so the result is all or nothing.
func (s *Server) createOnAll(ctx context.Context, spec *rowliftv1.WorkflowSpec, targets []*target, fields sourceFields) error {
	var written []*target
	create := func(t *target) error {
		st, err := t.open(ctx)
		if err != nil {
			return err
		}
		if err := st.CreateWorkflow(ctx, spec, t.name); err != nil {
			return t.fail(err)
		}
		written = append(written, t)
		streams, err := reshard.ForTarget(spec, t.name)
		if err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
		for _, stream := range streams {
			estimates := map[string]state.Estimate{}
			for _, tbl := range stream.Spec.GetTables() {
				f := fields[stream.Source.GetName()][tbl.GetName()]
				estimates[tbl.GetName()] = state.Estimate{Rows: f.GetRowsEstimate(), Bytes: f.GetBytesEstimate()}
			}
			if err := st.RecordCopyStart(ctx, spec.GetName(), stream.Source.GetName(), estimates); err != nil {
				return t.fail(err)
			}
		}
		return nil
	}
	for _, t := range targets {
		err := create(t)
		if err == nil {
			continue
		}
		// The request may be cancelled: undo regardless.
		undo := context.WithoutCancel(ctx)
		for _, w := range written {
			st, uerr := w.open(undo)
			if uerr == nil {
				uerr = st.DeleteWorkflow(undo, spec.GetName())
			}
			if uerr != nil {
				s.log.Error("cannot undo a partly created workflow", zap.String("workflow", spec.GetName()), zap.String("target", w.name), zap.Error(uerr))
				return status.Errorf(status.Code(err), "%s; and undoing it on target %s failed (%v): delete workflow %q",
					status.Convert(err).Message(), w.name, uerr, spec.GetName())
			}
		}
		return err
	}
	return nil
}

// sourceFields are the table descriptions the sources' streamers gave, by
// source and table.
type sourceFields map[string]map[string]*rowliftv1.TableFields

// forTarget is the descriptions of the tables a target receives, in spec
// order, each from the first source that streams it there.
func (f sourceFields) forTarget(spec *rowliftv1.WorkflowSpec, target string) []*rowliftv1.TableFields {
	streams, _ := reshard.ForTarget(spec, target)
	var out []*rowliftv1.TableFields
	for _, tbl := range spec.GetTables() {
		for _, st := range streams {
			if d := f[st.Source.GetName()][tbl.GetName()]; d != nil && slices.ContainsFunc(st.Spec.GetTables(), func(t *rowliftv1.TableSpec) bool {
				return t.GetName() == tbl.GetName()
			}) {
				out = append(out, d)
				break
			}
		}
	}
	return out
}

// validateSources asks the streamer of each stream's source to validate the
// stream as it would open with the given copy progress (nil: a new workflow),
// and returns the table descriptions by source, the streamers' warnings and
// the sources' flavors.
// Every source must describe each table the same way: one target table takes
// the rows of all of them.
func (s *Server) validateSources(ctx context.Context, spec *rowliftv1.WorkflowSpec, progress map[string]state.TableCopy) (sourceFields, []string, map[string]string, error) {
	streams, err := reshard.Streams(spec)
	if err != nil {
		return nil, nil, nil, status.Error(codes.InvalidArgument, err.Error())
	}
	// Streams that differ only in their target ask the same question.
	var asks []reshard.Stream
	seen := map[string]bool{}
	for _, st := range streams {
		var names []string
		for _, t := range st.Spec.GetTables() {
			names = append(names, t.GetName())
		}
		key := st.Source.GetName() + "|" + st.KeyRange() + "|" + strings.Join(names, ",")
		if !seen[key] {
			seen[key] = true
			asks = append(asks, st)
		}
	}
	results := make([]*rowliftv1.ValidateResponse, len(asks))
	g, gctx := errgroup.WithContext(ctx)
	for i, st := range asks {
		g.Go(func() error {
			resp, err := s.validate(gctx, st.Source, applier.StreamRequest(st, "", progress, nil))
			results[i] = resp
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, nil, err
	}
	out := sourceFields{}
	first := map[string]string{} // the source that first described each table
	var warnings []string
	flavors := map[string]string{}
	for i, st := range asks {
		src := st.Source.GetName()
		flavors[src] = results[i].GetFlavor()
		tables := results[i].GetTables()
		if len(tables) != len(st.Spec.GetTables()) {
			return nil, nil, nil, status.Errorf(codes.Internal, "source %s (streamer %s) described %d tables for %d",
				src, st.Source.GetStreamerAddress(), len(tables), len(st.Spec.GetTables()))
		}
		if out[src] == nil {
			out[src] = map[string]*rowliftv1.TableFields{}
		}
		for _, f := range tables {
			if by, ok := first[f.GetTable()]; ok {
				if diff := fieldsDiff(out[by][f.GetTable()], f); diff != "" {
					return nil, nil, nil, status.Errorf(codes.FailedPrecondition, "table %s differs between source %s and source %s: %s; "+
						"every source must have the same definition", f.GetTable(), by, src, diff)
				}
			} else {
				first[f.GetTable()] = src
			}
			out[src][f.GetTable()] = f
		}
		for _, w := range results[i].GetWarnings() {
			if !slices.Contains(warnings, w) {
				warnings = append(warnings, w)
			}
		}
	}
	return out, warnings, flavors, nil
}

// validate calls one streamer's Validate and explains its failure.
func (s *Server) validate(ctx context.Context, src *rowliftv1.SourceShard, req *rowliftv1.StreamRequest) (*rowliftv1.ValidateResponse, error) {
	conn, client, err := s.dialStreamer(src)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, s.validateTimeout)
	defer cancel()
	resp, err := client.Validate(ctx, req)
	if err != nil {
		return nil, s.streamerError(src, err)
	}
	return resp, nil
}

// dialStreamer connects to the streamer of src with the coordinator's dial
// options (TLS when its flags ask for it); the caller closes conn.
func (s *Server) dialStreamer(src *rowliftv1.SourceShard) (*grpc.ClientConn, rowliftv1.StreamerClient, error) {
	conn, err := grpc.NewClient(src.GetStreamerAddress(), append(grpcopt.DialOptions(nil), s.dial...)...)
	if err != nil {
		return nil, nil, status.Errorf(codes.InvalidArgument, "source %s: streamer address %q: %v", src.GetName(), src.GetStreamerAddress(), err)
	}
	return conn, rowliftv1.NewStreamerClient(conn), nil
}

// streamerError explains a streamer's refusal of a check (Validate,
// CheckFreeze) to the Control API's caller.
func (s *Server) streamerError(src *rowliftv1.SourceShard, err error) error {
	st := status.Convert(err)
	code, msg := st.Code(), st.Message()
	switch code {
	case codes.NotFound:
		// A table the source does not have: the request names it.
		code = codes.InvalidArgument
	case codes.PermissionDenied:
		// The source refused the streamer's own user: fixed on the streamer.
		code = codes.FailedPrecondition
	case codes.Unimplemented:
		code, msg = codes.FailedPrecondition, msg+": the streamer is older than this coordinator; upgrade it"
	case codes.DeadlineExceeded:
		code, msg = codes.Unavailable, fmt.Sprintf("no answer within %s: %s", s.validateTimeout, msg)
	case codes.Unavailable:
		if grpctls.IsTLS(msg) {
			msg = grpctls.Explain(msg)
		} else {
			msg += " (is the streamer running at that address?)"
		}
	}
	return status.Errorf(code, "source %s (streamer %s): %s", src.GetName(), src.GetStreamerAddress(), msg)
}

// fieldsDiff says how two descriptions of a table differ, or "" when they do not.
func fieldsDiff(a, b *rowliftv1.TableFields) string {
	if len(a.GetFields()) != len(b.GetFields()) {
		return fmt.Sprintf("%d columns against %d", len(a.GetFields()), len(b.GetFields()))
	}
	for i, fa := range a.GetFields() {
		fb := b.GetFields()[i]
		if !strings.EqualFold(fa.GetName(), fb.GetName()) || !strings.EqualFold(fa.GetColumnType(), fb.GetColumnType()) ||
			fa.GetCollation() != fb.GetCollation() || fa.GetNullable() != fb.GetNullable() {
			return fmt.Sprintf("column %d is %s %s against %s %s", i+1, fa.GetName(), fa.GetColumnType(), fb.GetName(), fb.GetColumnType())
		}
	}
	if !slices.Equal(a.GetPkColumns(), b.GetPkColumns()) {
		return "they are keyed by different columns"
	}
	return ""
}

// checkSpec refuses a spec that is wrong whatever the servers say.
func checkSpec(spec *rowliftv1.WorkflowSpec) error {
	if spec == nil {
		return errors.New("the request has no workflow spec")
	}
	if err := state.CheckName(spec.GetName()); err != nil {
		return err
	}
	if spec.GetSourceDatabase() == "" {
		return fmt.Errorf("workflow %q names no source database", spec.GetName())
	}
	if len(spec.GetSources()) == 0 {
		return fmt.Errorf("workflow %q has no source: give each source's name and streamer address", spec.GetName())
	}
	if err := unique("source", spec.GetSources(), func(s *rowliftv1.SourceShard) string { return s.GetName() }); err != nil {
		return err
	}
	for _, src := range spec.GetSources() {
		if src.GetStreamerAddress() == "" {
			return fmt.Errorf("source %s has no streamer address (host:port)", src.GetName())
		}
	}
	if len(spec.GetTargets()) == 0 {
		return fmt.Errorf("workflow %q has no target", spec.GetName())
	}
	if err := unique("target", spec.GetTargets(), func(t *rowliftv1.TargetShard) string { return t.GetName() }); err != nil {
		return err
	}
	for _, t := range spec.GetTargets() {
		if err := state.CheckTargetName(t.GetName()); err != nil {
			return err
		}
	}
	for _, src := range spec.GetSources() {
		if r := src.GetReverseTarget(); r != "" {
			if err := state.CheckTargetName(r); err != nil {
				return fmt.Errorf("source %s's reverse target: %w", src.GetName(), err)
			}
		}
	}
	if len(spec.GetTables()) == 0 {
		return fmt.Errorf("workflow %q has no table", spec.GetName())
	}
	if err := unique("table", spec.GetTables(), func(t *rowliftv1.TableSpec) string { return strings.ToLower(t.GetName()) }); err != nil {
		return err
	}
	if err := unique("target table", spec.GetTables(), func(t *rowliftv1.TableSpec) string {
		name, _ := applier.TargetTable(spec, t.GetName())
		return strings.ToLower(name)
	}); err != nil {
		return err
	}
	for _, t := range spec.GetTables() {
		if err := unique("column of table "+t.GetName(), t.GetColumns(), strings.ToLower); err != nil {
			return err
		}
	}
	if err := reshard.Check(spec); err != nil {
		return err
	}
	o := spec.GetOptions()
	for _, n := range []struct {
		name  string
		value int64
	}{{"chunk_rows", o.GetChunkRows()}, {"chunk_bytes", o.GetChunkBytes()}, {"packet_bytes", o.GetPacketBytes()}, {"parallel_tables", int64(o.GetParallelTables())},
		{"apply_workers", int64(o.GetApplyWorkers())}, {"commit_batch_items", int64(o.GetCommitBatchItems())},
		{"commit_batch_bytes", o.GetCommitBatchBytes()}, {"commit_batch_ms", int64(o.GetCommitBatchMs())}} {
		if n.value < 0 {
			return fmt.Errorf("option %s is %d: use a positive number, or 0 for the default", n.name, n.value)
		}
	}
	if err := throttle.Check("source", o.GetThrottle().GetSource()); err != nil {
		return err
	}
	return throttle.Check("target", o.GetThrottle().GetTarget())
}

// unique checks that every item has a non-empty name and no two share one.
func unique[T any](what string, items []T, name func(T) string) error {
	seen := map[string]bool{}
	for _, it := range items {
		n := name(it)
		switch {
		case n == "":
			return fmt.Errorf("a %s has no name", what)
		case seen[n]:
			return fmt.Errorf("%s %q is named twice", what, n)
		}
		seen[n] = true
	}
	return nil
}
