package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
)

// debugArgs are the roles' --debug-listen flags with -profile (else none),
// by their name in benchkit.Procs, and the addresses by role.
func (b *bench) debugArgs() (map[string][]string, error) {
	if b.cfg.Profile == "" {
		return nil, nil
	}
	if err := os.MkdirAll(b.cfg.Profile, 0o755); err != nil {
		return nil, fmt.Errorf("profile dir: %w", err)
	}
	addrs, err := benchkit.FreeAddrs(2)
	if err != nil {
		return nil, err
	}
	b.debugAddrs = map[string]string{"streamer": addrs[0], "applier": addrs[1]}
	return map[string][]string{
		"streamer":                             {"--debug-listen", addrs[0]},
		"applier of " + benchkit.TargetName(0): {"--debug-listen", addrs[1]},
	}, nil
}

// profile starts a Go CPU profile of the streamer and the applier of
// -profile-seconds, written to <dir>/<role>-<name>.pprof, and returns what
// waits for them; without -profile it does nothing.
func (b *bench) profile(ctx context.Context, name string) func() error {
	if b.debugAddrs == nil {
		return func() error { return nil }
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	i := 0
	for role, addr := range b.debugAddrs {
		slot := &errs[i]
		wg.Go(func() { *slot = b.fetchProfile(ctx, role, addr, name) })
		i++
	}
	return func() error {
		wg.Wait()
		return errors.Join(errs...)
	}
}

func (b *bench) fetchProfile(ctx context.Context, role, addr, name string) error {
	path := filepath.Join(b.cfg.Profile, role+"-"+name+".pprof")
	if err := benchkit.FetchProfile(ctx, role, addr, b.cfg.ProfileSeconds, path); err != nil {
		return err
	}
	progress("  profile of the %s written to %s", role, path)
	return nil
}
