package schedule

import (
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestScripts runs testdata/*.txt: each line a call to the Scheduler and,
// after "=>", what it must return or the panic it must raise. A new case is a
// few lines of text.
func TestScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			var s *Scheduler
			for i, line := range strings.Split(string(data), "\n") {
				line = strings.TrimSpace(line)
				if line == "" || strings.HasPrefix(line, "#") {
					continue
				}
				call, want, hasWant := strings.Cut(line, "=>")
				call, want = strings.TrimSpace(call), strings.TrimSpace(want)
				where := fmt.Sprintf("%s:%d: %s", f, i+1, line)
				if strings.HasPrefix(call, "new ") {
					s = New(call == "new out-of-order")
					continue
				}
				require.NotNil(t, s, "%s: no scheduler yet (start with new in-order or new out-of-order)", where)
				got := runScriptCall(t, s, call, where)
				if !hasWant {
					require.Empty(t, got, "%s: the call returns %q, which the script does not state", where, got)
					continue
				}
				require.Equal(t, want, got, where)
			}
		})
	}
}

// runScriptCall runs one call and returns its result as text, or the panic.
func runScriptCall(t *testing.T, s *Scheduler, call, where string) (out string) {
	defer func() {
		if r := recover(); r != nil {
			out = fmt.Sprint("panic: ", r)
		}
	}()
	f := strings.Fields(call)
	seq := func() Seq {
		require.Len(t, f, 2, "%s: want one item number", where)
		n, err := strconv.ParseUint(f[1], 10, 64)
		require.NoError(t, err, where)
		return Seq(n)
	}
	switch f[0] {
	case "add":
		var keys []uint64
		barrier := false
		for _, k := range f[1:] {
			if k == "barrier" {
				barrier = true
				continue
			}
			keys = append(keys, keyHash(k))
		}
		return fmt.Sprint(s.Add(keys, barrier))
	case "next":
		if q, ok := s.Next(); ok {
			return fmt.Sprint(q)
		}
		return "none"
	case "within":
		if q, ok := s.NextWithin(int(seq())); ok {
			return fmt.Sprint(q)
		}
		return "none"
	case "exec":
		s.Executed(seq())
	case "may":
		return fmt.Sprint(s.MayCommit(seq()))
	case "commit":
		s.Committed(seq())
	case "requeue":
		s.Requeue(seq())
	case "after":
		return fmt.Sprint(s.ExecutedAfter(seq()))
	case "low":
		return fmt.Sprint(s.LowWatermark())
	case "pending":
		return fmt.Sprint(s.Pending())
	default:
		t.Fatalf("%s: unknown call %q", where, f[0])
	}
	return ""
}

// keyHash stands for the applier's hash of a (table, key).
func keyHash(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64()
}

// A long run with a wide window: the ring grows past its initial size, and once
// everything has committed nothing stays in the owner map, the barrier or the
// ready heap.
func TestWideWindowReleasesEverything(t *testing.T) {
	for _, outOfOrder := range []bool{false, true} {
		s := New(outOfOrder)
		const n = 2000
		for i := range n {
			s.Add([]uint64{uint64(i % 97), uint64(i)}, i%500 == 499)
		}
		require.Equal(t, n, s.Pending())
		require.GreaterOrEqual(t, len(s.items), n)
		var executedItems []Seq
		for s.Pending() > 0 {
			for q, ok := s.Next(); ok; q, ok = s.Next() {
				s.Executed(q)
				executedItems = append(executedItems, q)
			}
			// Newest first: out-of-order mode commits each at once, in-order
			// mode only the oldest uncommitted one.
			for i := len(executedItems) - 1; i >= 0; i-- {
				q := executedItems[i]
				require.Equal(t, outOfOrder || q == s.LowWatermark()+1, s.MayCommit(q), "item %d", q)
				if s.MayCommit(q) {
					s.Committed(q)
					executedItems = append(executedItems[:i], executedItems[i+1:]...)
				}
			}
		}
		require.Equal(t, Seq(n), s.LowWatermark())
		require.Empty(t, s.owner)
		require.Zero(t, s.barrier)
		require.Empty(t, s.readyHeap)
	}
}

// A barrier gathers every later item as a dependent; once it commits, its ring
// slot does not keep that list's memory for the items that reuse the slot.
// Small lists are kept for reuse.
func TestLargeListsAreNotRetained(t *testing.T) {
	s := New(false)
	b := s.Add([]uint64{1, 2, 3}, true)
	k := s.Add([]uint64{1, 2, 3}, false)
	for range 2 * maxRetained {
		s.Add(nil, false)
	}
	require.Len(t, s.at(b).dependents, 2*maxRetained+1)
	for _, q := range []Seq{b, k} {
		got, ok := s.Next()
		require.True(t, ok)
		require.Equal(t, q, got)
		s.Executed(q)
		s.Committed(q)
	}
	require.Nil(t, s.at(b).dependents)
	require.Empty(t, s.at(k).keys)
	require.NotZero(t, cap(s.at(k).keys))
}

// benchKeys returns count keysets of 4 keys each over universe keys.
func benchKeys(count, universe int) [][]uint64 {
	sets := make([][]uint64, count)
	x := uint64(88172645463325252)
	for i := range sets {
		for range 4 {
			// xorshift: deterministic and cheap.
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			sets[i] = append(sets[i], x%uint64(universe)*0x9e3779b97f4a7c15)
		}
	}
	return sets
}

// BenchmarkScheduler measures the scheduler's cost per item: Add, Next,
// Executed, MayCommit and Committed, with up to window items uncommitted at
// once (1: one worker; 64: many, so dependencies and the ready heap are busy)
// over a large key universe (few conflicts) and a small one (many).
func BenchmarkScheduler(b *testing.B) {
	for _, window := range []int{1, 64} {
		for _, universe := range []int{1 << 20, 64} {
			for _, outOfOrder := range []bool{false, true} {
				name := fmt.Sprintf("window=%d/universe=%d/outOfOrder=%v", window, universe, outOfOrder)
				b.Run(name, func(b *testing.B) {
					sets := benchKeys(4096, universe)
					s := New(outOfOrder)
					drain := func() {
						for q, ok := s.Next(); ok; q, ok = s.Next() {
							s.Executed(q)
						}
					}
					b.ReportAllocs()
					i := 0
					for b.Loop() {
						s.Add(sets[i&4095], false)
						i++
						drain()
						// The oldest uncommitted item has every earlier one
						// committed, so it started and executed: commit it.
						for s.Pending() >= window {
							q := s.LowWatermark() + 1
							if !s.MayCommit(q) {
								b.Fatalf("item %d may not commit", q)
							}
							s.Committed(q)
							drain()
						}
					}
				})
			}
		}
	}
}

// The caller may reuse its keys slice once Add returns.
func TestAddCopiesKeys(t *testing.T) {
	s := New(false)
	keys := []uint64{1, 2}
	s.Add(keys, false)
	keys[0], keys[1] = 3, 4
	s.Add([]uint64{1}, false)
	require.Equal(t, map[uint64]Seq{1: 2, 2: 1}, s.owner)
	q, _ := s.Next()
	require.Equal(t, Seq(1), q)
	_, ok := s.Next()
	require.False(t, ok, "item 2 shares key 1 with item 1")
	s.Executed(1)
	s.Committed(1)
	q, _ = s.Next()
	require.Equal(t, Seq(2), q)
}
