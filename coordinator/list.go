package coordinator

import (
	"context"
	"maps"
	"slices"
	"strings"

	"google.golang.org/grpc/status"

	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// ListWorkflows returns every workflow on the requested targets, by name, and
// per target what could not be read: one target down hides only the
// workflows that run on it. Each target is read once, in a fixed number of
// queries (state.Snapshot), however many workflows it holds.
func (s *Server) ListWorkflows(ctx context.Context, req *rowliftv1.ListWorkflowsRequest) (*rowliftv1.ListWorkflowsResponse, error) {
	names := req.GetTargets()
	if len(names) == 0 {
		names = slices.Sorted(maps.Keys(s.targets))
	}
	l := &listing{s: s, snaps: map[string]*targetSnapshot{}, failed: map[string]string{}}
	specs := map[string]*rowliftv1.WorkflowSpec{}
	for _, n := range names {
		if snap := l.read(ctx, n); snap != nil {
			for _, w := range snap.Workflows {
				if specs[w.Spec.GetName()] == nil {
					specs[w.Spec.GetName()] = w.Spec
				}
			}
		}
	}
	resp := &rowliftv1.ListWorkflowsResponse{}
	hidden := map[string][]string{}
	for _, name := range slices.Sorted(maps.Keys(specs)) {
		spec := specs[name]
		var views []view
		for _, ts := range spec.GetTargets() {
			snap := l.read(ctx, ts.GetName())
			if snap == nil {
				hidden[ts.GetName()] = append(hidden[ts.GetName()], name)
				continue
			}
			views = append(views, snap.view(ts.GetName(), name))
		}
		if len(views) < len(spec.GetTargets()) {
			continue
		}
		w, err := s.build(spec, views, l.snaps[spec.GetTargets()[0].GetName()].Journals[name])
		if err != nil {
			continue // deleted from its every target while being listed
		}
		resp.Workflows = append(resp.Workflows, w)
	}
	resp.TargetsRead = slices.Sorted(maps.Keys(l.snaps))
	for _, n := range slices.Sorted(maps.Keys(l.failed)) {
		resp.TargetErrors = append(resp.TargetErrors, &rowliftv1.TargetError{Target: n, Message: l.failed[n], Workflows: hidden[n]})
	}
	return resp, nil
}

// listing is one ListWorkflows call's reads: each target's snapshot, or why
// it could not be read, each target read at most once.
type listing struct {
	s      *Server
	snaps  map[string]*targetSnapshot
	failed map[string]string
}

// read returns the named target's snapshot, or nil when it cannot be read
// (recorded in failed).
func (l *listing) read(ctx context.Context, name string) *targetSnapshot {
	if snap, ok := l.snaps[name]; ok {
		return snap
	}
	if _, ok := l.failed[name]; ok {
		return nil
	}
	t := l.s.targets[name]
	if t == nil {
		l.failed[name] = l.s.unconfigured(name)
		return nil
	}
	st, err := t.open(ctx)
	if err == nil {
		var snap *state.Snapshot
		if snap, err = st.Snapshot(ctx); err == nil {
			l.snaps[name] = newTargetSnapshot(snap)
			return l.snaps[name]
		}
		err = t.fail(err)
	}
	l.failed[name] = namingTarget(name, status.Convert(err).Message())
	return nil
}

// namingTarget is msg, why target name could not be read, as a message that
// names the target once: a client shows it as it is, so it must not prefix
// the name to the messages of t.fail, which start with it, nor miss it in the
// few that do not (a cancelled call).
func namingTarget(name, msg string) string {
	if strings.HasPrefix(msg, "target "+name+" ") || strings.HasPrefix(msg, "target "+name+":") {
		return msg
	}
	return "target " + name + ": " + msg
}

// targetSnapshot is a target's state.Snapshot with its workflows by name.
type targetSnapshot struct {
	*state.Snapshot
	byName map[string]*state.Workflow
}

func newTargetSnapshot(snap *state.Snapshot) *targetSnapshot {
	ts := &targetSnapshot{Snapshot: snap, byName: map[string]*state.Workflow{}}
	for _, w := range snap.Workflows {
		ts.byName[w.Spec.GetName()] = w
	}
	return ts
}

// view is the target's record of a workflow, as Server.read makes it from
// the workflow's own queries: wf nil and nothing else where it is missing.
func (ts *targetSnapshot) view(target, workflow string) view {
	v := view{target: target, wf: ts.byName[workflow]}
	if v.wf == nil {
		return v
	}
	v.copies, v.streams, v.verifies, v.applier = ts.Copies[workflow], ts.Streams[workflow], ts.Verifies[workflow], ts.ApplierRunning
	return v
}
