package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
	"github.com/rowlift/rowlift/internal/sandbox"
)

// bench is one benchmark run: the two servers, client pools on them, and what the
// methods share.
type bench struct {
	cfg config
	benchkit.Servers
	tmp      string // rowlift binary and process logs
	rowlift  string // path of the built rowlift binary; empty unless (d) runs
	clkTck   float64
	shape    benchkit.Shape // the table -table names
	rowBytes int64          // sum of the value bytes of every row, as text
	// profileRuns counts the runs of (d) profiled so far.
	profileRuns int
}

// method is one way of moving the table. run does its untimed preparation, calls
// m.start and m.stop around the part that is measured, then checks the result.
type method struct {
	key, name string
	run       func(ctx context.Context, m *meter) error
}

func (b *bench) methods() []method {
	return []method{
		{"a", "(a) source scan", b.scan},
		{"b", "(b) LOAD DATA target", b.loadTarget},
		{"c", "(c) " + dumpTools[b.cfg.Flavor].pipe(), b.dumpPipe},
		{"d", "(d) rowlift", b.copyRowlift},
		{"e", "(e) mydumper | myloader", b.mydumper},
	}
}

// setup builds rowlift (when (d) runs), starts both servers and loads the source.
func setup(ctx context.Context, cfg config, selected map[string]bool) (b *bench, err error) {
	shape := shapes[cfg.Table](cfg.Rows)
	b = &bench{cfg: cfg, clkTck: benchkit.ClockTicks(), shape: shape, rowBytes: shape.RowBytes(cfg.Rows)}
	if b.tmp, err = os.MkdirTemp("", "rowlift-bench-copy-"); err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	if selected["d"] {
		if b.rowlift, err = benchkit.Build(ctx, b.tmp); err != nil {
			return b, err
		}
		progress("built %s", b.rowlift)
	}
	if err := b.Start(ctx, cfg.Options(), "", progress); err != nil {
		return b, err
	}
	return b, b.seedSource(ctx)
}

// close stops the servers and removes the temp dir, or with -keep leaves both and
// says where they are.
func (b *bench) close() {
	b.ClosePools()
	if b.cfg.Keep {
		b.printKept()
		return
	}
	b.Remove(progress)
	os.RemoveAll(b.tmp)
}

func (b *bench) printKept() {
	for _, s := range []struct {
		role string
		srv  *sandbox.Server
	}{{"source", b.Source}, {"target", b.Target}} {
		if s.srv != nil {
			fmt.Printf("kept %s: dsn %s  socket %s  pid %d  dir %s\n", s.role, s.srv.DSN(""), s.srv.Socket, s.srv.Pid(), s.srv.Dir)
		}
	}
	fmt.Printf("kept rowlift binary and logs in %s\n", b.tmp)
	fmt.Println("stop with `kill <pid>` and remove the dirs; the next run of this benchmark also reaps them")
}

// runAll runs the selected methods in rounds (a, b, c, d, e, then again) and returns
// each method's samples.
func (b *bench) runAll(ctx context.Context, selected map[string]bool) (map[string][]sample, error) {
	// The first load into a fresh target server costs more target CPU than
	// the next ones (MySQL 9.7, 1 M rows: each method's first run took 1.2 to
	// 1.3 x its later ones), which would make the spread of the first round
	// the server's warm-up. One untimed LOAD DATA warms it for every method.
	progress("warm-up: (b) LOAD DATA target, untimed")
	if err := benchkit.Quiesce(ctx, 0, b.SrcDB, b.TgtDB); err != nil {
		return nil, err
	}
	if err := b.loadTarget(ctx, &meter{b: b}); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	results := map[string][]sample{}
	for round := 1; round <= b.cfg.Runs; round++ {
		for _, mt := range b.methods() {
			if !selected[mt.key] {
				continue
			}
			progress("run %d/%d: %s", round, b.cfg.Runs, mt.name)
			if err := benchkit.Quiesce(ctx, 0, b.SrcDB, b.TgtDB); err != nil {
				return nil, err
			}
			m := &meter{b: b}
			if err := mt.run(ctx, m); err != nil {
				return nil, fmt.Errorf("%s: %w", mt.name, err)
			}
			if !m.stopped {
				return nil, fmt.Errorf("%s: measurement was never stopped", mt.name)
			}
			progress("  %.2f s", m.s.WallS)
			results[mt.key] = append(results[mt.key], m.s)
		}
	}
	return results, nil
}

// sample is one run of one method.
type sample struct {
	WallS    float64 `json:"wall_s"`
	RowsPerS float64 `json:"rows_per_s"`
	MBPerS   float64 `json:"mb_per_s"`
	// ClientCPUS is the CPU of the client side: this process for (a) and (b), the
	// dump and client processes for (c), the streamer and applier for (d),
	// mydumper and myloader for (e).
	ClientCPUS   float64 `json:"client_cpu_s"`
	StreamerCPUS float64 `json:"streamer_cpu_s,omitempty"`
	ApplierCPUS  float64 `json:"applier_cpu_s,omitempty"`
	SourceCPUS   float64 `json:"source_server_cpu_s"`
	TargetCPUS   float64 `json:"target_server_cpu_s"`
}

// meter measures the timed part of one method: wall time and the CPU of both
// servers and of this process. A method overrides the client CPU when its client
// is another process.
type meter struct {
	b                 *bench
	t0                time.Time
	src0, tgt0, self0 float64
	stopped           bool
	s                 sample
}

func (m *meter) start() error {
	var err error
	if m.src0, err = benchkit.ServerCPU(m.b.Source, m.b.clkTck); err != nil {
		return err
	}
	if m.tgt0, err = benchkit.ServerCPU(m.b.Target, m.b.clkTck); err != nil {
		return err
	}
	m.self0 = benchkit.SelfCPU()
	m.t0 = time.Now()
	return nil
}

func (m *meter) stop() error {
	wall := time.Since(m.t0).Seconds()
	self := benchkit.SelfCPU()
	src, err := benchkit.ServerCPU(m.b.Source, m.b.clkTck)
	if err != nil {
		return err
	}
	tgt, err := benchkit.ServerCPU(m.b.Target, m.b.clkTck)
	if err != nil {
		return err
	}
	m.s = sample{
		WallS:      wall,
		RowsPerS:   float64(m.b.cfg.Rows) / wall,
		MBPerS:     float64(m.b.rowBytes) / 1e6 / wall,
		ClientCPUS: self - m.self0,
		SourceCPUS: src - m.src0,
		TargetCPUS: tgt - m.tgt0,
	}
	m.stopped = true
	return nil
}
