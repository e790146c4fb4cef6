package coordinator

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/applier"
	"github.com/rowlift/rowlift/internal/crossflavor"
	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/reshard"
	"github.com/rowlift/rowlift/internal/schema"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// checkFlavors checks, before anything is written, every table target t
// receives from a source of the other flavor (crossflavor.Check): a column
// that cannot move exactly refuses the workflow, naming every such column;
// warnings come back to be shown with the created workflow.
func checkFlavors(ctx context.Context, t *target, spec *rowliftv1.WorkflowSpec, fields sourceFields, flavors map[string]string) ([]string, error) {
	streams, err := reshard.ForTarget(spec, t.name)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	tf, version, err := dbconn.ServerFlavor(ctx, t.db)
	if err != nil {
		return nil, t.fail(err)
	}
	tgt := crossflavor.Target{JSONAsText: spec.GetOptions().GetJsonAsText()}
	var refusals, warnings []string
	if tgt.JSONAsText && tf == dbconn.MySQL {
		warnings = append(warnings, fmt.Sprintf("target %s is MySQL, which keeps JSON's types, and --json-as-text writes the documents' text: "+
			"MySQL parses it again, so a DECIMAL 0.10 becomes the DOUBLE 0.1 and a DATE a STRING, and verify reports those rows; "+
			"leave --json-as-text off for MySQL targets", t.name))
	}
	for _, st := range streams {
		src := st.Source.GetName()
		sf := flavors[src]
		if sf == "" || sf == string(tf) {
			continue
		}
		if tgt.Collations == nil {
			if tgt.Collations, err = collations(ctx, t); err != nil {
				return nil, err
			}
		}
		for _, tbl := range st.Spec.GetTables() {
			name, _ := applier.TargetTable(spec, tbl.GetName())
			if tgt.Columns, err = columnTypes(ctx, t, applier.TargetDatabase(spec), name); err != nil {
				return nil, err
			}
			r := crossflavor.Check(sf, string(tf), fields[src][tbl.GetName()], tgt)
			for _, msg := range r.Refusals {
				if !slices.Contains(refusals, msg) {
					refusals = append(refusals, msg)
				}
			}
			for _, msg := range r.Warnings {
				if !slices.Contains(warnings, msg) {
					warnings = append(warnings, msg)
				}
			}
		}
	}
	if len(refusals) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "target %s runs %s, another flavor than its sources', and %d column(s) cannot move exactly: %s",
			t.name, version, len(refusals), strings.Join(refusals, "; "))
	}
	return warnings, nil
}

// collations are every collation the target knows, in lower case.
func collations(ctx context.Context, t *target) (map[string]bool, error) {
	rows, err := t.db.QueryContext(ctx, "SELECT COLLATION_NAME FROM information_schema.COLLATIONS")
	if err != nil {
		return nil, t.fail(fmt.Errorf("read the target's collations: %w", err))
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, t.fail(fmt.Errorf("read the target's collations: %w", err))
		}
		out[strings.ToLower(name)] = true
	}
	if err := rows.Err(); err != nil {
		return nil, t.fail(fmt.Errorf("read the target's collations: %w", err))
	}
	return out, nil
}

// columnTypes are the data types of an existing target table's columns, or
// nil when the table does not exist (the workflow will create it).
func columnTypes(ctx context.Context, t *target, db, table string) (map[string]string, error) {
	cols, err := schema.ReadColumns(ctx, t.db, db, table)
	if err != nil {
		return nil, t.fail(fmt.Errorf("target table: %w", err))
	}
	var out map[string]string
	for _, c := range cols {
		if out == nil {
			out = map[string]string{}
		}
		out[c.Name] = c.DataType
	}
	return out, nil
}
