package coordinator

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/applier"
	"github.com/rowlift/rowlift/internal/grants"
	"github.com/rowlift/rowlift/internal/rowcodec"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// checkGrants tries, changing nothing, what the coordinator's own user does
// on target t for a workflow of spec: write the sidecar schema and read the
// target tables (whether they are empty and shaped like the source's). A
// missing privilege refuses the creation (FailedPrecondition) with the GRANT
// to run. The applier's user, which may be another, is checked by the
// applier when it picks the workflow up.
func checkGrants(ctx context.Context, t *target, spec *rowliftv1.WorkflowSpec) error {
	probes := state.Probes()
	db := applier.TargetDatabase(spec)
	for _, tbl := range spec.GetTables() {
		name, _ := applier.TargetTable(spec, tbl.GetName())
		table := rowcodec.QualifiedIdent(db, name)
		probes = append(probes, grants.Probe{Statement: "SELECT 1 FROM " + table + " LIMIT 0",
			Grant: grants.Grant{Privilege: "SELECT", On: table, Why: "to check it before creating the workflow"}})
	}
	return t.check(ctx, probes)
}

// check runs probes with the coordinator's user on t: FailedPrecondition
// naming the GRANT of each privilege missing.
func (t *target) check(ctx context.Context, probes []grants.Probe) error {
	missing, err := grants.Check(ctx, t.db, probes)
	if err != nil {
		return t.fail(err)
	}
	if err := grants.Missing(ctx, t.db, "target", t.cfg.User, missing); err != nil {
		return status.Errorf(codes.FailedPrecondition, "target %s: %v", t.name, err)
	}
	return nil
}

// checkFreeze asks the streamer of each of spec's sources whether its user
// may freeze spec's tables in mode (Streamer.CheckFreeze), so a switch is
// refused, with the GRANT to run, before it freezes anything.
func (s *Server) checkFreeze(ctx context.Context, spec *rowliftv1.WorkflowSpec, mode rowliftv1.FreezeMode) error {
	req := freezeRequest(spec, mode)
	for _, src := range spec.GetSources() {
		conn, client, err := s.dialStreamer(src)
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, s.validateTimeout)
		_, err = client.CheckFreeze(cctx, req)
		cancel()
		conn.Close()
		if err != nil {
			return s.streamerError(src, err)
		}
	}
	return nil
}

// freezeRequest asks a streamer to freeze spec's tables in mode, or to check
// that it may.
func freezeRequest(spec *rowliftv1.WorkflowSpec, mode rowliftv1.FreezeMode) *rowliftv1.FreezeRequest {
	req := &rowliftv1.FreezeRequest{Workflow: spec.GetName(), Database: spec.GetSourceDatabase(), Mode: mode}
	for _, t := range spec.GetTables() {
		req.Tables = append(req.Tables, t.GetName())
	}
	return req
}

// dropTable drops db.table, which a complete or cancel was asked to drop
// (why says which), naming the GRANT when the target user may not.
func (t *target) dropTable(ctx context.Context, db, table, why string) error {
	ident := rowcodec.QualifiedIdent(db, table)
	_, err := t.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+ident)
	return grants.Refused(ctx, t.db, "target", err, grants.Grant{Privilege: "DROP", On: ident, Why: why})
}
