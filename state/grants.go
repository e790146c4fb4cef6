package state

import (
	"context"

	"github.com/rowlift/rowlift/internal/grants"
)

// keyColumns are the sidecar tables, each with its first column, for
// probing the privileges to write them.
var keyColumns = []struct{ table, column string }{
	{"workflow", "name"}, {"stream", "workflow"}, {"copy_state", "workflow"},
	{"replay_slot", "workflow"}, {"verify", "workflow"}, {"cutover", "workflow"}, {"shadow_ddl", "workflow"},
}

// stateOn is what every privilege on the sidecar schema is granted on.
const stateOn = "`" + Schema + "`.*"

// Probes are the probes of what the applier and the coordinator do in the
// sidecar schema once it exists: read and write rows of every table. Each
// grant is on the whole schema, as the README asks.
func Probes() []grants.Probe {
	var out []grants.Probe
	for _, k := range keyColumns {
		out = append(out, grants.RowProbes("`"+Schema+"`.`"+k.table+"`", "`"+k.column+"`", stateOn, "to keep the workflows' state in it")...)
	}
	return out
}

// MissingGrants is the *grants.Error naming what the target user lacks in
// the sidecar schema (see Probes), or nil.
func MissingGrants(ctx context.Context, q grants.Queryer) error {
	missing, err := grants.Check(ctx, q, Probes())
	if err != nil {
		return err
	}
	return grants.Missing(ctx, q, "target", "", missing)
}

// schemaGrant is a privilege Open needs on the sidecar schema.
func schemaGrant(privilege, why string) grants.Grant {
	return grants.Grant{Privilege: privilege, On: stateOn, Why: why}
}
