package streamer

import (
	"sync"
	"time"

	"github.com/rowlift/rowlift/internal/gtid"
)

const (
	// DefaultMaxReplayLag is how far replay may fall behind before the copy
	// waits for it (WorkflowOptions.max_replay_lag_ms zero): above the
	// heartbeat interval's noise, and well under the lag an operator waits
	// out before a cutover.
	DefaultMaxReplayLag = time.Second
	// lagBucketSpan is the resolution of the replay lag: transactions read
	// within one span share a bucket, so the tracker holds at most one entry
	// per span however fast the source writes.
	lagBucketSpan = 10 * time.Millisecond
	// maxLagBuckets bounds the tracker (about 40 s of unapplied transactions
	// at full resolution, a few hundred KiB); past it the two oldest buckets
	// merge, which keeps the oldest read time and so never reads the lag low.
	maxLagBuckets = 4096
)

// replayLag measures how long the transactions a stream has read wait for
// the target: the time since the oldest transaction the binlog reader read
// that the target has not reported applied was read. Unlike the source
// commit time of what the target applied, it is zero on a quiet source,
// whatever the copy does, and it counts the transactions queued behind
// chunks in the merger and the stream, which the target cannot see yet. It
// does no I/O; the reader adds to it and the copy gate asks it.
type replayLag struct {
	mu sync.Mutex
	// buckets are the unapplied transactions, oldest first: the GTID of each
	// bucket's last transaction and when its first was read.
	buckets []lagBucket
}

type lagBucket struct {
	last   *gtid.Set
	readAt time.Time
}

// read records a transaction (its own GTID) the reader read at.
func (l *replayLag) read(trx *gtid.Set, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.buckets); n > 0 && at.Sub(l.buckets[n-1].readAt) < lagBucketSpan {
		l.buckets[n-1].last = trx
		return
	}
	if len(l.buckets) >= maxLagBuckets {
		l.buckets[1].readAt = l.buckets[0].readAt
		l.buckets = l.buckets[1:]
	}
	l.buckets = append(l.buckets, lagBucket{last: trx, readAt: at})
}

// newest returns the newest transaction read that was not applied at the last
// look (nil: none): a copy marks with it what its chunk may hold back.
func (l *replayLag) newest() *gtid.Set {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.buckets); n > 0 {
		return l.buckets[n-1].last
	}
	return nil
}

// lag drops what applied covers (a position of the target: positions only
// grow, so a bucket whose last transaction it holds is applied whole) and
// returns how long the oldest unapplied transaction has waited at now; zero
// when none waits.
func (l *replayLag) lag(applied *gtid.Set, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := 0
	for i < len(l.buckets) && applied.Contains(l.buckets[i].last) {
		i++
	}
	l.buckets = l.buckets[i:]
	if len(l.buckets) == 0 {
		return 0
	}
	return max(now.Sub(l.buckets[0].readAt), 0)
}
