package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/applier"
	"github.com/rowlift/rowlift/coordinator/cutover"
	"github.com/rowlift/rowlift/internal/frozen"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// journal reads the last cutover journal of the pair of forward workflow
// name from its home target (nil: none).
func (s *Server) journal(ctx context.Context, name string, home *target) (*state.Journal, error) {
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
	return j, nil
}

// settled locates a workflow, reads every target's record of it, and
// returns with them the name of its pair's forward workflow and the pair's
// last journal, for the admission of a command that must not run under a
// cutover. A reverse workflow's pair journal is on its forward workflow's
// first target.
func (s *Server) settled(ctx context.Context, ref *rowliftv1.WorkflowRef) (spec *rowliftv1.WorkflowSpec, targets []*target, views []view,
	pair string, last *state.Journal, err error) {
	if spec, targets, err = s.locate(ctx, ref); err != nil {
		return nil, nil, nil, "", nil, err
	}
	pair, home := spec.GetName(), targets[0]
	if forward, ok := strings.CutSuffix(pair, ReverseSuffix); ok {
		if _, at, err := s.locate(ctx, &rowliftv1.WorkflowRef{Name: forward}); err == nil {
			pair, home = forward, at[0]
		}
	}
	if last, err = s.journal(ctx, pair, home); err != nil {
		return nil, nil, nil, "", nil, err
	}
	if views, err = s.read(ctx, spec.GetName(), targets); err != nil {
		return nil, nil, nil, "", nil, err
	}
	return spec, targets, views, pair, last, nil
}

// CompleteWorkflow ends a switched workflow: its reverse workflow and state
// go, and the frozen source tables are kept or dropped.
func (s *Server) CompleteWorkflow(ctx context.Context, req *rowliftv1.CompleteRequest) (*rowliftv1.CompleteResponse, error) {
	p, err := s.loadPair(ctx, req.GetWorkflow())
	if err != nil {
		return nil, err
	}
	name := p.forward.GetName()
	j, err := s.journal(ctx, name, p.forwardAt[0])
	if err != nil {
		return nil, err
	}
	renamed, err := cutover.AdmitComplete(p.admission(j, 0, time.Now()))
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
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
	spec, targets, views, pair, last, err := s.settled(ctx, req.GetWorkflow())
	if err != nil {
		return nil, err
	}
	name := spec.GetName()
	if err := cutover.AdmitCancel(name, pair, admissionViews(views, 0, time.Now()), lastOf(last)); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
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
