package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
	"github.com/rowlift/rowlift/internal/sandbox"
)

// profiler takes Go CPU profiles of (d)'s roles through their --debug-listen
// (net/http/pprof), so where a copy's client CPU goes is measured on the
// benchmark's own run. A nil profiler does nothing.
type profiler struct {
	dir     string
	target  *sql.DB
	seconds float64
	run     int
	// addrs is each role's debug address.
	addrs map[string]string
}

// newProfiler returns the profiler of the next run of (d), or nil without -profile.
func (b *bench) newProfiler() (*profiler, error) {
	if b.cfg.Profile == "" {
		return nil, nil
	}
	if err := os.MkdirAll(b.cfg.Profile, 0o755); err != nil {
		return nil, fmt.Errorf("profile dir: %w", err)
	}
	b.profileRuns++
	p := &profiler{dir: b.cfg.Profile, target: b.TgtDB, seconds: b.cfg.ProfileSeconds, run: b.profileRuns, addrs: map[string]string{}}
	for _, role := range []string{"streamer", "applier"} {
		port, err := sandbox.FreePort()
		if err != nil {
			return nil, err
		}
		p.addrs[role] = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	return p, nil
}

// args are the roles' extra flags.
func (p *profiler) args() map[string][]string {
	if p == nil {
		return nil
	}
	args := map[string][]string{}
	for role, addr := range p.addrs {
		args[role] = []string{"--debug-listen", addr}
	}
	return args
}

// start begins a CPU profile of each role and returns what waits for them
// and writes them to <dir>/<role>-<run>.pprof.
func (p *profiler) start(ctx context.Context) func() error {
	if p == nil {
		return func() error { return nil }
	}
	var wg sync.WaitGroup
	errs := make([]error, 0, len(p.addrs)+1)
	var mu sync.Mutex
	wg.Go(func() {
		err := p.sampleTarget(ctx)
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	})
	for role, addr := range p.addrs {
		wg.Go(func() {
			err := p.fetch(ctx, role, addr)
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		})
	}
	return func() error {
		wg.Wait()
		return errors.Join(errs...)
	}
}

func (p *profiler) fetch(ctx context.Context, role, addr string) error {
	path := filepath.Join(p.dir, fmt.Sprintf("%s-%d.pprof", role, p.run))
	if err := benchkit.FetchProfile(ctx, role, addr, p.seconds, path); err != nil {
		return err
	}
	progress("profile of the %s written to %s", role, path)
	return nil
}

// sampleTarget polls the target's process list every few milliseconds for
// the profile's length and prints what share of the samples found each kind
// of statement running: whether the target was busy loading rows, committing,
// or waiting for the applier.
func (p *profiler) sampleTarget(ctx context.Context) error {
	counts := map[string]int{}
	samples := 0
	end := time.Now().Add(time.Duration(p.seconds * float64(time.Second)))
	for time.Now().Before(end) {
		rows, err := p.target.QueryContext(ctx, "SELECT COALESCE(LEFT(INFO, 24), '') FROM information_schema.PROCESSLIST "+
			"WHERE COMMAND = 'Query' AND ID <> CONNECTION_ID()")
		if err != nil {
			return fmt.Errorf("sample target: %w", err)
		}
		seen := map[string]bool{}
		for rows.Next() {
			var info string
			if err := rows.Scan(&info); err != nil {
				rows.Close()
				return fmt.Errorf("sample target: %w", err)
			}
			if strings.TrimSpace(info) == "" {
				continue
			}
			seen[strings.Fields(info)[0]] = true
		}
		if err := rows.Close(); err != nil {
			return fmt.Errorf("sample target: %w", err)
		}
		samples++
		if len(seen) == 0 {
			counts["(none)"]++
		}
		for k := range seen {
			counts[k]++
		}
		time.Sleep(2 * time.Millisecond)
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return counts[keys[i]] > counts[keys[j]] })
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s %.0f%%", k, 100*float64(counts[k])/float64(samples))
	}
	progress("target statements running, share of %d samples over %gs:%s", samples, p.seconds, b.String())
	return nil
}
