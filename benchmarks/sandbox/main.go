// Command sandbox measures how fast a throwaway test server starts and how much
// memory it holds, beside the baseline of initializing a fresh datadir with
// mariadb-install-db and starting the server on it, in the same run.
//
//	go run ./benchmarks/sandbox -n 5
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rowlift/rowlift/internal/sandbox"
)

func main() {
	n := flag.Int("n", 5, "servers to start per method")
	flag.Parse()
	if err := run(*n); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox benchmark:", err)
		os.Exit(1)
	}
}

type sample struct {
	wall time.Duration
	rss  int64 // bytes
}

func run(n int) error {
	ctx := context.Background()
	var fresh, sandboxed []sample
	for i := 0; i < n; i++ {
		s, err := startFresh(ctx)
		if err != nil {
			return fmt.Errorf("baseline: %w", err)
		}
		fresh = append(fresh, s)

		start := time.Now()
		srv, err := sandbox.Start(ctx, sandbox.Options{})
		if err != nil {
			return err
		}
		wall := time.Since(start)
		rss, err := rssOf(srv.Pid())
		if err != nil {
			return err
		}
		sandboxed = append(sandboxed, sample{wall, rss})
		if err := srv.Remove(); err != nil {
			return err
		}
	}
	fmt.Printf("%-44s %10s %10s %10s\n", "method (n="+strconv.Itoa(n)+")", "p50 start", "max start", "RSS MB")
	base := report("install-db + start (baseline)", fresh)
	ours := report("sandbox.Start (template copy)", sandboxed)
	fmt.Printf("\nstart time ratio sandbox/baseline (p50): %.2f\n", ours.Seconds()/base.Seconds())
	return nil
}

func report(name string, samples []sample) time.Duration {
	walls := make([]time.Duration, len(samples))
	var rss int64
	for i, s := range samples {
		walls[i] = s.wall
		rss = max(rss, s.rss)
	}
	slices.Sort(walls)
	p50 := walls[len(walls)/2]
	fmt.Printf("%-44s %9.3fs %9.3fs %10.1f\n", name, p50.Seconds(), walls[len(walls)-1].Seconds(), float64(rss)/(1<<20))
	return p50
}

// startFresh is the baseline: what a harness without a cached template does
// (initialize a datadir, then start). It runs the sandbox with a new root each time,
// so the template is built from scratch for every server.
func startFresh(ctx context.Context) (sample, error) {
	root, err := os.MkdirTemp("", "rl-fresh-")
	if err != nil {
		return sample{}, err
	}
	defer os.RemoveAll(root)
	start := time.Now()
	srv, err := sandbox.Start(ctx, sandbox.Options{Root: filepath.Clean(root)})
	if err != nil {
		return sample{}, err
	}
	wall := time.Since(start)
	rss, err := rssOf(srv.Pid())
	if err != nil {
		return sample{}, err
	}
	return sample{wall, rss}, srv.Remove()
}

// rssOf reads the resident set size of a process from /proc.
func rssOf(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}
