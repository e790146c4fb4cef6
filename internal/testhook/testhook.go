// Package testhook widens the race windows of the copy for the race test: random
// delays at named points of the streamer and the applier, and an unsafe fence
// that proves the race test can fail. Everything is off unless the environment
// variable ROWLIFT_TEST_HOOKS is set, which only tests do, for example
//
//	ROWLIFT_TEST_HOOKS="chunk_read=0-30ms,chunk_emit=0-20ms,chunk_apply=0-20ms,seed=7"
//	ROWLIFT_TEST_HOOKS="unsafe_fence=1,chunk_read=5-30ms"
package testhook

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Point names a place where a delay can be injected.
type Point string

// The delay points.
const (
	// ChunkRead is between a chunk's fence and its SELECT.
	ChunkRead Point = "chunk_read"
	// ChunkEmit is before a chunk part is handed to the merger.
	ChunkEmit Point = "chunk_emit"
	// ChunkApply is before the applier writes a chunk part.
	ChunkApply Point = "chunk_apply"
	// ReplayExec is before a replay worker runs a group's statements, before
	// it takes any lock: groups stay in flight longer, for a stop to end.
	ReplayExec Point = "replay_exec"
	// SlowTarget is after a replay worker has run a group's statements, while
	// the group holds its row locks: a target slowed on purpose, as a loaded
	// server is slow over every statement, for the tests and the benchmark that
	// show a slow target causes no rollback storm.
	SlowTarget Point = "slow_target"
	// VerifyCheck is before the applier checks a verify chunk: a slow verify
	// that a test can kill processes in the middle of.
	VerifyCheck Point = "verify_check"
	// VerifyDigest is before the applier reads the target's digest of a
	// verify chunk, beside the apply: later chunks' snapshots queue up
	// behind a slow check, as they do behind a large chunk.
	VerifyDigest Point = "verify_digest"
	// CutoverStep is after the coordinator records each step of a cutover: a
	// window in which a test kills processes at that step.
	CutoverStep Point = "cutover_step"
	// AddKeys is before the applier adds a copied table's deferred secondary
	// keys: a window in which a test kills processes before the ALTER.
	AddKeys Point = "add_keys"
	// DDLApplied is after on_ddl EXEC ran a schema change on the target and
	// before the position after it is saved: a window in which a test kills
	// the applier between the two.
	DDLApplied Point = "ddl_applied"
)

// EnvVar is the variable that turns hooks on.
const EnvVar = "ROWLIFT_TEST_HOOKS"

type config struct {
	delays map[Point][2]time.Duration
	unsafe bool
	mu     sync.Mutex
	rng    *rand.Rand
}

var active = mustParse(os.Getenv(EnvVar))

func mustParse(s string) *config {
	c, err := parse(s)
	if err != nil {
		// A test that sets a bad value must not run without the hooks it asked for.
		panic(fmt.Sprintf("%s: %v", EnvVar, err))
	}
	return c
}

func parse(s string) (*config, error) {
	c := &config{delays: map[Point][2]time.Duration{}, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))}
	if s == "" {
		return c, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return nil, fmt.Errorf("%q is not key=value", kv)
		}
		switch k {
		case "unsafe_fence":
			c.unsafe = v == "1"
		case "seed":
			seed, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("seed %q: %w", v, err)
			}
			c.rng = rand.New(rand.NewPCG(seed, 1))
		case string(ChunkRead), string(ChunkEmit), string(ChunkApply), string(ReplayExec), string(SlowTarget), string(CutoverStep), string(VerifyCheck),
			string(VerifyDigest), string(AddKeys), string(DDLApplied):
			lo, hi, ok := strings.Cut(v, "-")
			if !ok {
				return nil, fmt.Errorf("%s=%q: want a range like 0-30ms", k, v)
			}
			if strings.TrimLeft(lo, "0123456789.") == "" { // "0-30ms": the low end takes the high end's unit
				lo += strings.TrimLeft(hi, "0123456789.")
			}
			a, err1 := time.ParseDuration(lo)
			b, err2 := time.ParseDuration(hi)
			if err1 != nil || err2 != nil || b < a {
				return nil, fmt.Errorf("%s=%q: want a range like 0-30ms", k, v)
			}
			c.delays[Point(k)] = [2]time.Duration{a, b}
		default:
			return nil, fmt.Errorf("unknown hook %q", k)
		}
	}
	return c, nil
}

// Delay sleeps a random time in the range set for p, or returns at once.
func Delay(ctx context.Context, p Point) {
	r, ok := active.delays[p]
	if !ok {
		return
	}
	active.mu.Lock()
	d := r[0] + time.Duration(active.rng.Int64N(int64(r[1]-r[0])+1))
	active.mu.Unlock()
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

// UnsafeFence reports whether chunks should be fenced the broken way: the
// position read first, then a plain SELECT without a snapshot.
func UnsafeFence() bool { return active.unsafe }
