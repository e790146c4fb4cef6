package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
	"github.com/rowlift/rowlift/internal/sandbox"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

const workflowName = "bench"

// copyRowlift is (d): rowlift's streamer next to the source and applier next to
// the target, as separate processes over gRPC, copy the table into an empty
// database. Only the copy is timed: from the workflow entering copying to every
// table's copy being done.
func (b *bench) copyRowlift(ctx context.Context, m *meter) error {
	const db = "bench_rowlift"
	if err := b.resetTarget(ctx, db); err != nil {
		return err
	}
	store, err := state.Open(ctx, b.TgtDB)
	if err != nil {
		return err
	}
	if err := store.DeleteWorkflow(ctx, workflowName); err != nil {
		return err
	}
	port, err := sandbox.FreePort()
	if err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	prof, err := b.newProfiler()
	if err != nil {
		return err
	}
	streamer, applier, err := benchkit.StartRoles(ctx, b.rowlift, b.tmp, addr, b.Source.DSN(""), b.Target.DSN(""), prof.args())
	if err != nil {
		return err
	}
	err = b.timeRowlift(ctx, m, store, addr, streamer, applier, prof)
	err = errors.Join(err, streamer.Stop(), applier.Stop())
	if err != nil {
		return fmt.Errorf("%w\n%s\n%s", err, streamer.LogTail(), applier.LogTail())
	}
	return b.checkCount(ctx, db, b.cfg.Rows)
}

func (b *bench) timeRowlift(ctx context.Context, m *meter, store *state.Store, addr string, streamer, applier *benchkit.Proc, prof *profiler) error {
	if err := store.CreateWorkflow(ctx, b.workflowSpec(addr), "main"); err != nil {
		return err
	}
	if err := m.start(); err != nil {
		return err
	}
	s0, a0, err := rolesCPU(b.clkTck, streamer, applier)
	if err != nil {
		return err
	}
	if err := store.SetState(ctx, workflowName, state.Copying, ""); err != nil {
		return err
	}
	profiled := prof.start(ctx)
	if err := benchkit.WaitCopied(ctx, store, workflowName, streamer, applier); err != nil {
		return err
	}
	s1, a1, err := rolesCPU(b.clkTck, streamer, applier)
	if err != nil {
		return err
	}
	if err := m.stop(); err != nil {
		return err
	}
	m.s.StreamerCPUS, m.s.ApplierCPUS = s1-s0, a1-a0
	m.s.ClientCPUS = m.s.StreamerCPUS + m.s.ApplierCPUS
	return profiled()
}

func (b *bench) workflowSpec(streamerAddr string) *rowliftv1.WorkflowSpec {
	return &rowliftv1.WorkflowSpec{
		Name:           workflowName,
		SourceDatabase: sourceDB,
		TargetDatabase: "bench_rowlift",
		Sources:        []*rowliftv1.SourceShard{{Name: "main", StreamerAddress: streamerAddr}},
		Targets:        []*rowliftv1.TargetShard{{Name: "main"}},
		Tables:         []*rowliftv1.TableSpec{{Name: b.shape.Name}},
		Options: &rowliftv1.WorkflowOptions{
			ChunkRows:    b.cfg.ChunkRows,
			PacketBytes:  b.cfg.PacketBytes,
			ApplyWorkers: int32(b.cfg.Workers),
		},
	}
}

func rolesCPU(clkTck float64, streamer, applier *benchkit.Proc) (s, a float64, err error) {
	if s, err = streamer.CPU(clkTck); err != nil {
		return 0, 0, err
	}
	a, err = applier.CPU(clkTck)
	return s, a, err
}
