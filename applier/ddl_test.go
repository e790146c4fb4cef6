package applier

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// Every DDL item the streamer sends (a freeze, a statement on a shadow
// table, a tool's swap, a schema change), under every on_ddl, the workflow
// stopped at it before or not: exactly one step, and the right one.
func TestDecideDDL(t *testing.T) {
	kinds := map[string]*rowliftv1.DDL{
		"freeze":      {Gtid: "g", Tables: []string{"t"}, Freeze: true},
		"shadow":      {Gtid: "g", Shadow: "_t_gho"},
		"swap":        {Gtid: "g", Tables: []string{"t"}, Shadow: "_t_gho"},
		"alter":       {Gtid: "g", Tables: []string{"t"}},
		"alter, many": {Gtid: "g", Tables: []string{"t", "u"}},
	}
	policies := []rowliftv1.OnDDL{rowliftv1.OnDDL_ON_DDL_UNSPECIFIED, rowliftv1.OnDDL_ON_DDL_STOP, rowliftv1.OnDDL_ON_DDL_IGNORE, rowliftv1.OnDDL_ON_DDL_EXEC}
	for kind, ddl := range kinds {
		for _, onDDL := range policies {
			for _, stoppedAt := range []string{"", "other", "g"} {
				name := fmt.Sprintf("%s/%s/stopped at %q", kind, onDDL, stoppedAt)
				got := decideDDL(ddl, onDDL, stoppedAt)
				var want ddlStep
				switch {
				case kind == "freeze":
					want = ddlFreeze // whatever on_ddl says: a cutover waits for it
				case kind == "shadow":
					want = ddlKeepShadow // the tool's swap needs it, whatever on_ddl says
				case onDDL == rowliftv1.OnDDL_ON_DDL_IGNORE:
					want = ddlIgnore
				case stoppedAt == "g":
					want = ddlResumed // the operator made the change and resumed
				case kind == "swap":
					want = ddlSwap
				case onDDL == rowliftv1.OnDDL_ON_DDL_EXEC:
					want = ddlExec
				default:
					want = ddlStop // STOP, or unset: a workflow from before EXEC was the default
				}
				require.Equal(t, want, got, name)
			}
		}
	}
}
