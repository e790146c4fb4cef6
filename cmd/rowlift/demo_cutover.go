package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/controlclient"
	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/statustext"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// demoStepGap is how long the writer writes between two cutover steps, so that
// each step moves writes the other way before the next one.
const demoStepGap = time.Second

// runCutover is the end of the move under the writer, as an operator runs it
// through the Control API: verify, switch (the writer follows to the target,
// as an application re-routed by the switch would), reverse (and back), switch
// again, complete; then every table is compared again.
func (d *demo) runCutover(ctx context.Context, control rowliftv1.ControlClient, name string) error {
	d.say("\ncutover: verify, switch, reverse, switch again and complete, while the writer keeps writing")
	var writes atomic.Int64
	d.startWriter(ctx, &writes)
	v, err := controlclient.Verify(ctx, control, name, 200*time.Millisecond)
	if err != nil {
		return err
	}
	d.say("verify: %s rows compared, %s differences found", statustext.Count(v.GetRowsCompared()),
		statustext.Count(v.GetMissing()+v.GetExtra()+v.GetDifferent()))
	var reverseName string
	for _, direction := range []string{"switch", "reverse", "switch"} {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(demoStepGap):
		}
		req := &rowliftv1.SwitchRequest{Workflow: &rowliftv1.WorkflowRef{Name: name}}
		rpc, to, side := control.SwitchWorkflow, d.targets[0].db, "target"
		if direction == "reverse" {
			rpc, to, side = control.ReverseWorkflow, d.srcDB, "source"
		}
		resp, err := rpc(ctx, req)
		if err != nil {
			return fmt.Errorf("%s workflow %s: %s", direction, name, status.Convert(err).Message())
		}
		d.route.Store(to)
		reverseName = resp.GetReverseWorkflow()
		d.say("%s: writes go to the %s, and so does the writer (freeze position %s)", direction, side, strings.Join(resp.GetFreezePositions(), ", "))
		d.say("write pause: %d ms", resp.GetWritePauseMs())
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(demoStepGap):
	}
	d.stopWriter()
	pos, err := dbconn.Position(ctx, d.targets[0].db)
	if err != nil {
		return fmt.Errorf("target position: %w", err)
	}
	d.say("writer stopped after %s transactions; waiting for %s to apply the target's writes up to %s", statustext.Count(writes.Load()), reverseName, pos)
	if _, err := d.waitApplied(ctx, control, reverseName, pos); err != nil {
		return err
	}
	done, err := control.CompleteWorkflow(ctx, &rowliftv1.CompleteRequest{Workflow: &rowliftv1.WorkflowRef{Name: name}})
	if err != nil {
		return fmt.Errorf("complete workflow %s: %s", name, status.Convert(err).Message())
	}
	d.say("complete: %s and the workflow's state are removed; kept source tables (renamed): %s", reverseName, strings.Join(done.GetKeptTables(), ", "))
	d.say("\nfinal comparison: the target's tables against the source's frozen ones")
	identical, err := d.compare(ctx, d.targets[0].db, d.srcDB, true)
	if err != nil {
		return err
	}
	d.say("identical: %s", map[bool]string{true: "yes", false: "NO"}[identical])
	if !identical {
		return errors.New("the source's frozen tables differ from the target's")
	}
	return nil
}
