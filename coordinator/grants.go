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
	missing, err := grants.Check(ctx, t.db, probes)
	if err != nil {
		return t.fail(err)
	}
	if err := grants.Missing(ctx, t.db, "target", t.cfg.User, missing); err != nil {
		return status.Errorf(codes.FailedPrecondition, "target %s: %v", t.name, err)
	}
	return nil
}
