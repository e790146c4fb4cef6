package streamer

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/rowlift/rowlift/internal/gtid"
)

func mustSet(t *testing.T, text string) *gtid.Set {
	t.Helper()
	s, err := gtid.Parse(text)
	require.NoError(t, err)
	return s
}

// TestReplayLagIsTheOldestUnappliedRead: the lag is the time since the oldest
// transaction read and not covered by the target's position was read, zero
// with none; transactions read within one bucket span share a bucket, which
// is applied once its last transaction is.
func TestReplayLagIsTheOldestUnappliedRead(t *testing.T) {
	for _, f := range []struct{ name, uuid string }{{"mysql", "3e11fa47-71ca-11e1-9e33-c80aa9429562:"}, {"mariadb", "0-1-"}} {
		t.Run(f.name, func(t *testing.T) {
			gt := func(n int) *gtid.Set { return mustSet(t, fmt.Sprint(f.uuid, n)) }
			upTo := func(n int) *gtid.Set {
				if f.name == "mysql" {
					return mustSet(t, fmt.Sprint(f.uuid, "1-", n))
				}
				return gt(n)
			}
			t0 := time.Unix(1000, 0)
			var l replayLag
			require.Zero(t, l.lag(upTo(1), t0), "nothing read: no lag, whatever the target applied")

			l.read(gt(2), t0)
			l.read(gt(3), t0.Add(lagBucketSpan/2)) // the same bucket
			l.read(gt(4), t0.Add(2*lagBucketSpan))
			require.Len(t, l.buckets, 2)
			require.Equal(t, 3*time.Second, l.lag(upTo(1), t0.Add(3*time.Second)))
			require.Equal(t, 3*time.Second, l.lag(upTo(2), t0.Add(3*time.Second)), "a bucket is applied once its last transaction is")
			require.Equal(t, 3*time.Second-2*lagBucketSpan, l.lag(upTo(3), t0.Add(3*time.Second)))
			require.Zero(t, l.lag(upTo(4), t0.Add(3*time.Second)), "all applied")
			require.Empty(t, l.buckets)
			require.Zero(t, l.lag(upTo(4), t0.Add(time.Hour)), "a quiet source has no lag")
		})
	}
}

// TestReplayLagIsBounded: past maxLagBuckets the oldest buckets merge, which
// keeps the oldest read time: the lag never reads low.
func TestReplayLagIsBounded(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var l replayLag
	for i := range 3 * maxLagBuckets {
		l.read(mustSet(t, fmt.Sprint("0-1-", i+1)), t0.Add(time.Duration(i)*lagBucketSpan))
	}
	require.Len(t, l.buckets, maxLagBuckets)
	now := t0.Add(time.Hour)
	require.Equal(t, time.Hour, l.lag(mustSet(t, "0-1-0"), now))
	require.Equal(t, time.Hour, l.lag(mustSet(t, "0-1-5"), now), "the merged head holds the oldest read time")
	require.Zero(t, l.lag(mustSet(t, fmt.Sprint("0-1-", 3*maxLagBuckets)), now))
}

// TestTargetThrottlesArePerTarget: two targets of one workflow (a reshard)
// keep their own reasons and positions; one clearing its reason leaves the
// other's.
func TestTargetThrottlesArePerTarget(t *testing.T) {
	b := newTargetThrottles()
	b.set("wf", "a", "target a lag 30s > 10s", nil, time.Minute)
	b.set("wf", "b", "target b lag 20s > 10s", mustSet(t, "0-1-7"), time.Minute)
	require.Equal(t, "target a lag 30s > 10s; target b lag 20s > 10s", mustGet(b, "wf"))
	b.set("wf", "a", "", mustSet(t, "0-1-9"), time.Minute)
	require.Equal(t, "target b lag 20s > 10s", mustGet(b, "wf"), "a's clear leaves b's reason")
	require.Equal(t, "0-1-9", b.applied("wf", "a").String())
	require.Equal(t, "0-1-7", b.applied("wf", "b").String())
	require.Nil(t, b.applied("wf", "c"))
	b.set("wf", "a", "", nil, time.Minute)
	b.set("wf", "b", "", nil, time.Minute)
	require.Empty(t, b.byWorkflow)
}

// TestCopyGateWaitsForReplay: with max_replay_lag set, the gate pauses the
// copy while the stream's oldest unapplied transaction waits longer than it,
// says so, and lets the copy go once the target reports it applied; without a
// report, or with the bound off, it never pauses for lag.
func TestCopyGateWaitsForReplay(t *testing.T) {
	now := time.Unix(1000, 0)
	targets := newTargetThrottles()
	targets.now = func() time.Time { return now }
	lag := &replayLag{}
	g := &copyGate{targets: targets, workflow: "wf", target: "t", lag: lag, maxLag: time.Second, interval: time.Hour,
		log: zap.NewNop(), now: func() time.Time { return now }}
	ctx := context.Background()

	lag.read(mustSet(t, "0-1-5"), now)
	now = now.Add(2 * time.Second)
	require.Equal(t, "", g.check(ctx), "no report from the target: nothing known")
	targets.set("wf", "t", "", mustSet(t, "0-1-4"), time.Minute)
	require.Equal(t, "replay lag 2.0s > 1s (max_replay_lag_ms): the copy waits for replay to catch up", g.check(ctx))
	require.False(t, g.lagging.IsZero())

	done := make(chan error, 1)
	go func() { done <- g.wait(ctx) }()
	require.Eventually(t, func() bool { return g.throttled() != "" }, 10*time.Second, time.Millisecond)
	targets.set("wf", "t", "", mustSet(t, "0-1-5"), time.Minute)
	require.NoError(t, receive(t, done, "the copy did not resume once replay caught up (the gate polls replayPoll, not its hour-long interval)"))
	require.True(t, g.lagging.IsZero())

	lag.read(mustSet(t, "0-1-6"), now)
	now = now.Add(time.Hour)
	g.maxLag = 0
	require.Equal(t, "", g.check(ctx), "max_replay_lag off")
}

// TestCopyGateDrainsBetweenChunks: a paced copy marks the newest unapplied
// transaction when a chunk has gone out, and before the next chunk waits
// until the target reports it applied, saying whether it waited (the chunk
// held transactions back). Nothing read, no report, or the bound off: no wait.
func TestCopyGateDrainsBetweenChunks(t *testing.T) {
	targets := newTargetThrottles()
	lag := &replayLag{}
	g := &copyGate{targets: targets, workflow: "wf", target: "t", lag: lag, maxLag: time.Second, log: zap.NewNop(), now: time.Now}
	ctx := context.Background()
	require.Equal(t, livePace, g.paceTarget(), "a second's bound paces to livePace")
	tight := &copyGate{maxLag: 200 * time.Millisecond}
	require.Equal(t, 100*time.Millisecond, tight.paceTarget(), "a bound under twice livePace paces to half of it")

	require.Nil(t, g.mark(), "nothing read")
	held, err := g.drain(ctx, g.mark())
	require.NoError(t, err)
	require.False(t, held)

	lag.read(mustSet(t, "0-1-5"), time.Now())
	lag.read(mustSet(t, "0-1-9"), time.Now().Add(time.Second))
	mark := g.mark()
	require.Equal(t, "0-1-9", mark.String(), "the newest read")
	held, err = g.drain(ctx, mark)
	require.NoError(t, err)
	require.False(t, held, "no report from the target: nothing known, no wait")

	targets.set("wf", "t", "", mustSet(t, "0-1-8"), time.Minute)
	done := make(chan bool, 1)
	go func() {
		held, err := g.drain(ctx, mark)
		assert.NoError(t, err)
		done <- held
	}()
	select {
	case <-done:
		t.Fatal("drained before the target applied the mark")
	case <-time.After(5 * drainPoll):
	}
	targets.set("wf", "t", "", mustSet(t, "0-1-9"), time.Minute)
	require.True(t, receive(t, done, "the copy did not go on once the mark was applied"), "it waited: the chunk held transactions back")
	held, err = g.drain(ctx, mark)
	require.NoError(t, err)
	require.False(t, held, "already applied")

	// Replay lags past the bound while the copy drains: the wait shows in
	// status as the gate's does.
	lag.read(mustSet(t, "0-1-10"), time.Now().Add(-time.Hour))
	g.interval = time.Hour
	go func() {
		held, err := g.drain(ctx, mustSet(t, "0-1-10"))
		assert.NoError(t, err)
		done <- held
	}()
	require.Eventually(t, func() bool { return strings.HasPrefix(g.throttled(), "replay lag ") }, 10*time.Second, time.Millisecond)
	targets.set("wf", "t", "", mustSet(t, "0-1-10"), time.Minute)
	require.True(t, receive(t, done, "the copy did not go on once replay caught up"))
	require.Empty(t, g.throttled())

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = g.drain(cancelled, mustSet(t, "0-1-11"))
	require.ErrorIs(t, err, context.Canceled)

	g.maxLag = -1
	require.Nil(t, g.mark(), "max_replay_lag off: no pacing")
	require.Zero(t, g.paceTarget())
	held, err = g.drain(ctx, mustSet(t, "0-1-10"))
	require.NoError(t, err)
	require.False(t, held)
	var none *copyGate
	require.Nil(t, none.mark())
	require.Zero(t, none.paceTarget())
}

// receive returns what ch delivers, failing the test with why after 10 s.
func receive[T any](t *testing.T, ch <-chan T, why string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal(why)
		var zero T
		return zero
	}
}
