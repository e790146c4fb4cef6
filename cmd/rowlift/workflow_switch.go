package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/rowlift/rowlift/internal/statustext"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// freezeModes are the values of --freeze.
var freezeModes = map[string]rowliftv1.FreezeMode{
	"rename": rowliftv1.FreezeMode_FREEZE_MODE_RENAME,
	"lock":   rowliftv1.FreezeMode_FREEZE_MODE_LOCK,
	"none":   rowliftv1.FreezeMode_FREEZE_MODE_NONE,
}

// workflowSwitchCommand is `switch` or `reverse`: a cutover of writes from one
// side of a workflow to the other.
func workflowSwitchCommand(name string) *command {
	var targets stringList
	var maxLag time.Duration
	var freeze, hook string
	summary := "move writes to the workflow's targets: check lag, freeze the source tables, wait until the targets applied everything, start the reverse workflow"
	if name == "reverse" {
		summary = "move writes of a switched workflow back to its sources, through the same steps with the roles swapped"
	}
	return workflowLeaf(name, summary,
		"NAME [flags]\n\nEvery step is recorded on the target; a crash at any step resumes (run the command again, or let the coordinator\n"+
			"finish it) or rolls back, and --timeout always unfreezes the frozen side. Prints the write pause (freeze to writable).\n\n"+
			"Example:\n  rowlift workflow "+name+" orders-move --max-lag 2s --timeout 30s --hook-cmd './route-writes.sh'", 1,
		func(fs *flag.FlagSet) {
			targetsFlag(fs, &targets)
			fs.DurationVar(&maxLag, "max-lag", 5*time.Second, "refuse unless every stream lags at most `DURATION`, e.g. --max-lag 2s")
			fs.StringVar(&freeze, "freeze", "rename", "how writes stop on the side losing them: rename (the tables, atomically; writers get \"doesn't exist\"),\n"+
				"lock (LOCK TABLES ... READ held for the pause; the hook must re-route writers) or none (the caller stopped writes), e.g. --freeze lock")
			fs.StringVar(&hook, "hook-cmd", "", "`COMMAND` the coordinator runs (sh -c) once writes may go to the other side, with $ROWLIFT_WORKFLOW,\n"+
				"$ROWLIFT_DIRECTION and $ROWLIFT_WRITE_PAUSE_MS set, e.g. --hook-cmd 'consul kv put db/orders/primary target'")
		},
		func(ctx context.Context, s *session, args []string) error {
			mode, ok := freezeModes[freeze]
			if !ok {
				return usagef("--freeze must be rename, lock or none, not %q", freeze)
			}
			req := &rowliftv1.SwitchRequest{Workflow: &rowliftv1.WorkflowRef{Name: args[0], Targets: targets}, MaxLagSeconds: maxLag.Seconds(),
				Freeze: mode, TimeoutMs: s.flags.timeout.Milliseconds(), HookCmd: hook}
			// --timeout bounds the wait for the streams; the answer comes after
			// the rollback or the hook.
			ctx, cancel := context.WithTimeout(ctx, s.flags.timeout+time.Minute)
			defer cancel()
			rpc := s.client.SwitchWorkflow
			if name == "reverse" {
				rpc = s.client.ReverseWorkflow
			}
			resp, err := rpc(ctx, req)
			if err != nil {
				return s.rpcError(name+" workflow "+args[0], err)
			}
			if s.flags.output == "json" {
				return printJSON(s.stdout, resp)
			}
			for _, line := range statustext.Switched(name, args[0], resp) {
				fmt.Fprintln(s.stdout, line)
			}
			return nil
		})
}

func workflowCompleteCommand() *command {
	var targets stringList
	var drop bool
	return workflowLeaf("complete", "end a switched workflow: stop and remove its reverse workflow and its state; keep the frozen source tables",
		"NAME [flags]\n\nExample:\n  rowlift workflow complete orders-move --drop-source-tables", 1,
		func(fs *flag.FlagSet) {
			targetsFlag(fs, &targets)
			fs.BoolVar(&drop, "drop-source-tables", false, "drop the frozen source tables instead of keeping them renamed, e.g. --drop-source-tables")
		},
		func(ctx context.Context, s *session, args []string) error {
			req := &rowliftv1.CompleteRequest{Workflow: &rowliftv1.WorkflowRef{Name: args[0], Targets: targets}, DropSourceTables: drop}
			resp, err := call(ctx, s, "complete workflow "+args[0], func(ctx context.Context) (*rowliftv1.CompleteResponse, error) {
				return s.client.CompleteWorkflow(ctx, req)
			})
			if err != nil {
				return err
			}
			if s.flags.output == "json" {
				return printJSON(s.stdout, resp)
			}
			fmt.Fprintf(s.stdout, "completed workflow %s: its reverse workflow and state are removed\n", args[0])
			printTables(s, "kept source tables (drop them by hand once unneeded)", resp.GetKeptTables())
			printTables(s, "dropped source tables", resp.GetDroppedTables())
			return nil
		})
}

func workflowCancelCommand() *command {
	var targets stringList
	var drop bool
	return workflowLeaf("cancel", "give up a move that was not switched: stop and remove the workflow (and a reverse workflow); keep the target tables",
		"NAME [flags]\n\nExample:\n  rowlift workflow cancel orders-move --drop-target-tables", 1,
		func(fs *flag.FlagSet) {
			targetsFlag(fs, &targets)
			fs.BoolVar(&drop, "drop-target-tables", false, "drop the target tables the workflow wrote, e.g. --drop-target-tables")
		},
		func(ctx context.Context, s *session, args []string) error {
			req := &rowliftv1.CancelRequest{Workflow: &rowliftv1.WorkflowRef{Name: args[0], Targets: targets}, DropTargetTables: drop}
			resp, err := call(ctx, s, "cancel workflow "+args[0], func(ctx context.Context) (*rowliftv1.CancelResponse, error) {
				return s.client.CancelWorkflow(ctx, req)
			})
			if err != nil {
				return err
			}
			if s.flags.output == "json" {
				return printJSON(s.stdout, resp)
			}
			fmt.Fprintf(s.stdout, "cancelled workflow %s\n", args[0])
			printTables(s, "kept target tables with their rows (drop them by hand if unwanted)", resp.GetKeptTables())
			printTables(s, "dropped target tables", resp.GetDroppedTables())
			return nil
		})
}

func printTables(s *session, what string, tables []string) {
	if len(tables) > 0 {
		fmt.Fprintf(s.stdout, "%s: %s\n", what, strings.Join(tables, ", "))
	}
}
