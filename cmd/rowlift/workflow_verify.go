package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/rowlift/rowlift/internal/statustext"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

func workflowVerifyCommand() *command {
	var targets stringList
	var repair, restart, wait, cancel bool
	var interval time.Duration
	return workflowLeaf("verify", "compare every table of a running workflow, source against target, chunk by chunk at exact points under live writes",
		"NAME [flags]\n\nEach chunk is compared with the target at exactly the source snapshot it was read in: no long snapshot on either\n"+
			"side, and writes go on. Results stay in the target's _rowlift schema (`workflow show`); a verify resumes after any\n"+
			"restart. With --wait it prints progress, then each table's result, and exits 1 if the target differs.\n\n"+
			"--cancel stops a running verify on every target and records it as cancelled. A switch or reverse cancels a running\n"+
			"verify of the workflow that stops taking the writes before it freezes, and says so.\n\n"+
			"Examples:\n  rowlift workflow verify orders --wait\n"+
			"  rowlift workflow verify orders --repair --wait   # after a change made to the target by hand\n"+
			"  rowlift workflow verify orders --cancel", 1,
		func(fs *flag.FlagSet) {
			targetsFlag(fs, &targets)
			fs.BoolVar(&repair, "repair", false, "rewrite the target's differing rows from the source at the same point and report every repaired key;\n"+
				"for cleaning up after a change made to the target by hand, e.g. --repair")
			fs.BoolVar(&restart, "restart", false, "start over even if a verify is running, e.g. --restart")
			fs.BoolVar(&wait, "wait", false, "wait until the verify is done, printing progress, then the results, e.g. --wait")
			fs.DurationVar(&interval, "interval", time.Second, "how often --wait prints progress, e.g. --interval 5s")
			fs.BoolVar(&cancel, "cancel", false, "stop the running verify on every target and record it as cancelled, e.g. --cancel")
		},
		func(ctx context.Context, s *session, args []string) error {
			ref := &rowliftv1.WorkflowRef{Name: args[0], Targets: targets}
			if cancel {
				if repair || restart || wait {
					return usagef("--cancel takes none of --repair, --restart and --wait")
				}
				return cancelVerify(ctx, s, ref)
			}
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
					statustext.Verify(w.GetStatus().GetVerify()), args[0])
				return err
			}
			for w.GetStatus().GetVerify().GetState() == rowliftv1.VerifyState_VERIFY_STATE_RUNNING {
				if s.flags.output != "json" {
					fmt.Fprintf(s.stdout, "%s%s\n", statustext.Verify(w.GetStatus().GetVerify()), verifyStalls(w.GetStatus()))
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
			switch {
			case err != nil:
			case v.GetState() == rowliftv1.VerifyState_VERIFY_STATE_CANCELLED:
				err = fmt.Errorf("the verify of %s was cancelled before its end: %s", args[0], v.GetMessage())
			case v.GetState() == rowliftv1.VerifyState_VERIFY_STATE_FAILED:
				err = fmt.Errorf("the verify of %s could not verify every table: %s", args[0], v.GetMessage())
			case v.GetMissing()+v.GetExtra()+v.GetDifferent() > v.GetRepaired():
				err = fmt.Errorf("the target differs from the source at the keys above: if a change made to the target by hand caused it, "+
					"`rowlift workflow verify %s --repair --wait` rewrites those rows from the source; if not, report it as a rowlift bug", args[0])
			}
			return err
		})
}

// cancelVerify runs `verify --cancel`: it says what it cancelled, or that no
// verify was running.
func cancelVerify(ctx context.Context, s *session, ref *rowliftv1.WorkflowRef) error {
	resp, err := call(ctx, s, "cancel the verify of workflow "+ref.GetName(), func(ctx context.Context) (*rowliftv1.CancelVerifyResponse, error) {
		return s.client.CancelVerify(ctx, ref)
	})
	if err != nil {
		return err
	}
	if s.flags.output == "json" {
		return printJSON(s.stdout, resp)
	}
	if c := resp.GetCancelled(); c != "" {
		_, err = fmt.Fprintf(s.stdout, "%s; the streams go on without it\n", c)
		return err
	}
	_, err = fmt.Fprintf(s.stdout, "no verify of %s is running, nothing to cancel (last: %s)\n", ref.GetName(),
		statustext.Verify(resp.GetWorkflow().GetStatus().GetVerify()))
	return err
}

// verifyStalls is what keeps a running verify from moving, for --wait's
// progress lines: each stream's retry message (the verify runs on the
// streams), or a workflow that is not running. Empty when nothing does.
func verifyStalls(st *rowliftv1.WorkflowStatus) string {
	var b strings.Builder
	for _, s := range st.GetStreams() {
		if r := s.GetRetrying(); r != "" {
			fmt.Fprintf(&b, "; stream %s -> %s %s", s.GetSource(), s.GetTarget(), r)
		}
		if w := s.GetWaiting(); w != "" {
			fmt.Fprintf(&b, "; stream %s -> %s waiting: %s", s.GetSource(), s.GetTarget(), w)
		}
	}
	switch st.GetState() {
	case rowliftv1.WorkflowState_WORKFLOW_STATE_STOPPED, rowliftv1.WorkflowState_WORKFLOW_STATE_ERROR:
		fmt.Fprintf(&b, "; the verify waits for the workflow, which is %s", statustext.StateLine(st))
	}
	return b.String()
}

// renderVerifyResult is a finished verify: the summary, then each table with
// its first differing keys.
func renderVerifyResult(v *rowliftv1.VerifyStatus) string {
	var b strings.Builder
	b.WriteString(statustext.Verify(v) + "\n")
	for _, t := range v.GetTables() {
		n := t.GetMissing() + t.GetExtra() + t.GetDifferent()
		if m := t.GetMessage(); m != "" && n == 0 {
			// Not identical as far as anyone knows: it was not compared to its end.
			if v.GetState() == rowliftv1.VerifyState_VERIFY_STATE_CANCELLED && m == v.GetMessage() {
				fmt.Fprintf(&b, "  %s: cancelled after %s rows, no difference so far\n", t.GetName(), statustext.Count(t.GetRowsCompared()))
			} else {
				fmt.Fprintf(&b, "  %s: stopped after %s rows, no difference so far: %s\n", t.GetName(), statustext.Count(t.GetRowsCompared()), m)
			}
			continue
		}
		if n == 0 {
			fmt.Fprintf(&b, "  %s: identical, %s rows\n", t.GetName(), statustext.Count(t.GetRowsCompared()))
			continue
		}
		fmt.Fprintf(&b, "  %s: %d missing on target, %d extra on target, %d different of %s rows", t.GetName(), t.GetMissing(),
			t.GetExtra(), t.GetDifferent(), statustext.Count(t.GetRowsCompared()))
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
