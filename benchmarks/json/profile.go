package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

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
	ctx, cancel := context.WithTimeout(ctx, time.Duration(b.cfg.ProfileSeconds*float64(time.Second))+30*time.Second)
	defer cancel()
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%g", addr, b.cfg.ProfileSeconds)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("profile %s: %w", role, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("profile %s: %s: %s", role, resp.Status, body)
	}
	path := filepath.Join(b.cfg.Profile, role+"-"+name+".pprof")
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("profile %s: %w", role, err)
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("profile %s: %w", role, err)
	}
	progress("  profile of the %s written to %s", role, path)
	return f.Close()
}
