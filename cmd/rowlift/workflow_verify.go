package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

func workflowVerifyCommand() *command {
	var targets stringList
	var repair, restart, wait bool
	var interval time.Duration
	return workflowLeaf("verify", "compare every table of a running workflow, source against target, chunk by chunk at exact points under live writes",
		"NAME [flags]\n\nEach chunk is compared with the target at exactly the source snapshot it was read in: no long snapshot on either\n"+
			"side, and writes go on. Results stay in the target's _rowlift schema (`workflow show`); a verify resumes after any\n"+
			"restart. With --wait it prints progress, then each table's result, and exits 1 if the target differs.\n\n"+
			"Examples:\n  rowlift workflow verify orders --wait\n"+
			"  rowlift workflow verify orders --repair --wait   # after a change made to the target by hand", 1,
		func(fs *flag.FlagSet) {
			targetsFlag(fs, &targets)
			fs.BoolVar(&repair, "repair", false, "rewrite the target's differing rows from the source at the same point and report every repaired key;\n"+
				"for cleaning up after a change made to the target by hand, e.g. --repair")
			fs.BoolVar(&restart, "restart", false, "start over even if a verify is running, e.g. --restart")
			fs.BoolVar(&wait, "wait", false, "wait until the verify is done, printing progress, then the results, e.g. --wait")
			fs.DurationVar(&interval, "interval", time.Second, "how often --wait prints progress, e.g. --interval 5s")
		},
		func(ctx context.Context, s *session, args []string) error {
			ref := &rowliftv1.WorkflowRef{Name: args[0], Targets: targets}
			w, err := call(ctx, s, "verify workflow "+args[0], func(ctx context.Context) (*rowliftv1.Workflow, error) {
				return s.client.VerifyWorkflow(ctx, &rowliftv1.VerifyRequest{Workflow: ref, Repair: repair, Restart: restart})
			})
			if err != nil {
				return err
			}
			if !wait {
				if s.flags.output == "json" {
					return printJSON(s.stdout, w)
				}
				_, err := fmt.Fprintf(s.stdout, "verifying workflow %s: %s\n(see `rowlift workflow show %s`)\n", args[0],
					renderVerify(w.GetStatus().GetVerify()), args[0])
				return err
			}
			for w.GetStatus().GetVerify().GetState() != rowliftv1.VerifyState_VERIFY_STATE_DONE {
				if s.flags.output != "json" {
					fmt.Fprintf(s.stdout, "%s\n", renderVerify(w.GetStatus().GetVerify()))
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(interval):
				}
				if w, err = call(ctx, s, "show workflow "+args[0], func(ctx context.Context) (*rowliftv1.Workflow, error) {
					return s.client.GetWorkflow(ctx, ref)
				}); err != nil {
					return err
				}
			}
			v := w.GetStatus().GetVerify()
			if s.flags.output == "json" {
				err = printJSON(s.stdout, w)
			} else {
				_, err = io.WriteString(s.stdout, renderVerifyResult(v))
			}
			if err == nil && v.GetMissing()+v.GetExtra()+v.GetDifferent() > v.GetRepaired() {
				err = fmt.Errorf("the target differs from the source at the keys above: if a change made to the target by hand caused it, "+
					"`rowlift workflow verify %s --repair --wait` rewrites those rows from the source; if not, report it as a rowlift bug", args[0])
			}
			return err
		})
}

// renderVerify is a verify's progress on one line.
func renderVerify(v *rowliftv1.VerifyStatus) string {
	if v == nil {
		return "never verified"
	}
	what := "verify"
	if v.GetRepair() {
		what = "verify with repair"
	}
	state := "running, " + formatPercent(v.GetPercent())
	if v.GetState() == rowliftv1.VerifyState_VERIFY_STATE_DONE {
		state = "done"
	}
	p := fmt.Sprintf("%s %s: %s rows compared", what, state, formatCount(v.GetRowsCompared()))
	if n := v.GetMissing() + v.GetExtra() + v.GetDifferent(); n == 0 {
		p += ", no difference"
	} else {
		p += fmt.Sprintf(", %d missing on target, %d extra on target, %d different", v.GetMissing(), v.GetExtra(), v.GetDifferent())
	}
	if v.GetRepair() {
		p += fmt.Sprintf(", %d repaired", v.GetRepaired())
	}
	return p
}

// renderVerifyResult is a finished verify: the summary, then each table with
// its first differing keys.
func renderVerifyResult(v *rowliftv1.VerifyStatus) string {
	var b strings.Builder
	b.WriteString(renderVerify(v) + "\n")
	for _, t := range v.GetTables() {
		n := t.GetMissing() + t.GetExtra() + t.GetDifferent()
		if n == 0 {
			fmt.Fprintf(&b, "  %s: identical, %s rows\n", t.GetName(), formatCount(t.GetRowsCompared()))
			continue
		}
		fmt.Fprintf(&b, "  %s: %d missing on target, %d extra on target, %d different of %s rows", t.GetName(), t.GetMissing(),
			t.GetExtra(), t.GetDifferent(), formatCount(t.GetRowsCompared()))
		if t.GetRepaired() > 0 {
			fmt.Fprintf(&b, ", %d repaired", t.GetRepaired())
		}
		b.WriteString("\n")
		for _, e := range t.GetExamples() {
			b.WriteString("    " + e + "\n")
		}
		if int64(len(t.GetExamples())) < n {
			note := ""
			if t.GetRepaired() > 0 {
				note = "; every repaired key is in the applier's log"
			}
			fmt.Fprintf(&b, "    (first %d of %d%s)\n", len(t.GetExamples()), n, note)
		}
	}
	return b.String()
}
