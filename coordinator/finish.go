package coordinator

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/applier"
	"github.com/rowlift/rowlift/coordinator/cutover"
	"github.com/rowlift/rowlift/internal/frozen"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// idle refuses while a cutover of the workflow has not ended: finishing a
// workflow under a running switch would leave its sources frozen.
func (s *Server) idle(ctx context.Context, name string, home *target) (*state.Journal, error) {
	st, err := home.open(ctx)
	if err != nil {
		return nil, err
	}
	j, err := st.Journal(ctx, name)
	if errors.Is(err, state.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, home.fail(err)
	}
	if !cutover.Finished(cutover.Step(j.Step)) {
		return nil, status.Errorf(codes.FailedPrecondition, "workflow %q: a %s is in progress at step %s; let it finish (`rowlift workflow %s %s` resumes it)",
			name, j.Direction, j.Step, j.Direction, name)
	}
	return j, nil
}

// settled locates a workflow, refuses while a cutover of it runs, and reads
// every target's record of it.
func (s *Server) settled(ctx context.Context, ref *rowliftv1.WorkflowRef) (*rowliftv1.WorkflowSpec, []*target, []view, error) {
	spec, targets, err := s.locate(ctx, ref)
	if err != nil {
		return nil, nil, nil, err
	}
	if _, err := s.idle(ctx, spec.GetName(), targets[0]); err != nil {
		return nil, nil, nil, err
	}
	views, err := s.read(ctx, spec.GetName(), targets)
	if err != nil {
		return nil, nil, nil, err
	}
	return spec, targets, views, nil
}

// CompleteWorkflow ends a switched workflow: its reverse workflow and state
// go, and the frozen source tables are kept or dropped.
func (s *Server) CompleteWorkflow(ctx context.Context, req *rowliftv1.CompleteRequest) (*rowliftv1.CompleteResponse, error) {
	p, err := s.loadPair(ctx, req.GetWorkflow())
	if err != nil {
		return nil, err
	}
	name := p.forward.GetName()
	j, err := s.idle(ctx, name, p.forwardAt[0])
	if err != nil {
		return nil, err
	}
	for _, v := range p.forwardViews {
		if v.wf == nil || v.wf.State != state.Switched {
			st := state.State("missing")
			if v.wf != nil {
				st = v.wf.State
			}
			return nil, status.Errorf(codes.FailedPrecondition, "cannot complete workflow %q: it is in state %s on target %s; complete ends a "+
				"workflow whose writes were switched to its targets: switch it first, or cancel it to give the move up", name, st, v.target)
		}
	}
	// The sources' tables are as a reverse would find them on the side it
	// gives the writes back to.
	renamed, err := cutover.GainingRenamed(lastOf(j), dirReverse)
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "cannot complete workflow %q: %v", name, err)
	}
	for _, t := range p.reverseAt {
		if err := s.deleteOn(ctx, t, p.reverse.GetName()); err != nil {
			return nil, err
		}
	}
	resp := &rowliftv1.CompleteResponse{}
	db := p.forward.GetSourceDatabase()
	for i, t := range p.reverseAt {
		for _, tbl := range p.forward.GetTables() {
			table := tbl.GetName()
			if renamed {
				table, _ = frozen.Name(table) // checked by loadPair
			}
			where := fmt.Sprintf("%s:%s.%s", p.forward.GetSources()[i].GetName(), db, table)
			if !req.GetDropSourceTables() {
				resp.KeptTables = append(resp.KeptTables, where)
				continue
			}
			if err := t.dropTable(ctx, db, table, "for complete --drop-source-tables"); err != nil {
				return nil, t.fail(fmt.Errorf("drop source table %s: %w", where, err))
			}
			resp.DroppedTables = append(resp.DroppedTables, where)
		}
	}
	for _, t := range p.forwardAt {
		if err := s.deleteOn(ctx, t, name); err != nil {
			return nil, err
		}
	}
	s.log.Info("workflow completed", zap.String("workflow", name), zap.Strings("kept", resp.KeptTables), zap.Strings("dropped", resp.DroppedTables))
	return resp, nil
}

// CancelWorkflow gives up a move that was never switched (or was switched
// back): the workflow, its reverse workflow and their state go; the target
// tables are kept or dropped.
func (s *Server) CancelWorkflow(ctx context.Context, req *rowliftv1.CancelRequest) (*rowliftv1.CancelResponse, error) {
	spec, targets, views, err := s.settled(ctx, req.GetWorkflow())
	if err != nil {
		return nil, err
	}
	name := spec.GetName()
	for _, v := range views {
		if v.wf != nil && v.wf.State == state.Switched {
			return nil, status.Errorf(codes.FailedPrecondition, "cannot cancel workflow %q: its writes go to target %s since its switch; "+
				"reverse it first (rowlift workflow reverse %s) and then cancel, or complete it to keep the move", name, v.target, name)
		}
	}
	rev := reverseSpec(spec)
	if revAt, err := s.specTargets(rev); err == nil && len(rev.GetTargets()) > 0 && rev.GetTargets()[0].GetName() != "" {
		for _, t := range revAt {
			if err := s.deleteOn(ctx, t, rev.GetName()); err != nil {
				return nil, err
			}
		}
	}
	resp := &rowliftv1.CancelResponse{}
	db := applier.TargetDatabase(spec)
	for _, t := range targets {
		for _, tbl := range spec.GetTables() {
			table := tbl.GetName()
			if tbl.GetTargetTable() != "" {
				table = tbl.GetTargetTable()
			}
			where := fmt.Sprintf("%s:%s.%s", t.name, db, table)
			if !req.GetDropTargetTables() {
				resp.KeptTables = append(resp.KeptTables, where)
				continue
			}
			if err := t.dropTable(ctx, db, table, "for cancel --drop-target-tables"); err != nil {
				return nil, t.fail(fmt.Errorf("drop target table %s: %w", where, err))
			}
			resp.DroppedTables = append(resp.DroppedTables, where)
		}
	}
	for _, t := range targets {
		if err := s.deleteOn(ctx, t, name); err != nil {
			return nil, err
		}
	}
	s.log.Info("workflow cancelled", zap.String("workflow", name), zap.Strings("kept", resp.KeptTables), zap.Strings("dropped", resp.DroppedTables))
	return resp, nil
}

// deleteOn removes a workflow's state from one target; a workflow that is not
// there is already removed.
func (s *Server) deleteOn(ctx context.Context, t *target, name string) error {
	st, err := t.open(ctx)
	if err != nil {
		return err
	}
	if err := st.DeleteWorkflow(ctx, name); err != nil {
		return t.fail(err)
	}
	return nil
}
