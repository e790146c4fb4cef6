package applier

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/testhook"
	"github.com/rowlift/rowlift/internal/tracing"
	"github.com/rowlift/rowlift/internal/verify"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// digestQueue is how many chunks' target snapshots may wait for the check
// of the chunk before them: each holds a read view open on the target, so
// the queue is short; once it is full the apply waits, and that wait counts
// in the chunk's hold.
const digestQueue = 2

// digestJob is a digest chunk whose target snapshot is open, waiting for
// its check.
type digestJob struct {
	conn   *sql.Conn
	query  string
	chunk  *rowliftv1.Chunk
	source verify.Digest
}

// startDigest checks a verify chunk that sums its range up, exactly at its
// fence: all the apply waits for is a snapshot of the target opened there
// (and, when the checks fall behind, room in their queue). The target's
// digest of the range is read in that snapshot beside the stream by the
// table's check worker, which records the chunks in key order, or turns a
// chunk whose digests differ into a recheck of its rows and ends the
// stream.
func (v *verifier) startDigest(ctx context.Context, c *rowliftv1.Chunk) (err error) {
	// The source chose the width; the target sums up as many bytes.
	sum := c.GetDigest().GetSum()
	job := digestJob{chunk: c, source: verify.Digest{Rows: c.GetDigest().GetRows(), Bytes: len(sum)}}
	if job.source.Bytes != 8 && job.source.Bytes != 16 {
		return permanent("verify %s: the source's digest has %d bytes, want 8 or 16", v.t.name, job.source.Bytes)
	}
	copy(job.source.Sum[:], sum)
	buf := []byte("SELECT " + v.plan.DigestColumns(v.flavor, job.source.Bytes))
	if buf, err = v.appendRange(buf, c); err != nil {
		return err
	}
	job.query = string(buf)
	// The next chunk's range starts after this one's, whether or not its
	// check has ended: a chunk whose digests differ ends the stream.
	if c.GetLastPk() != nil {
		if v.lower, err = rowcodec.Values(nil, c.GetLastPk()); err != nil {
			return permanent("verify %s: chunk's last key: %v", v.t.name, err)
		}
	}
	span := v.play.startSpan(ctx, "rowlift.applier.verify_chunk", c.GetTraceContext(), v.t.name)
	defer func() { tracing.End(span, err, job.source.Rows, 0) }()
	if job.conn, err = v.snapshot(ctx); err != nil {
		return err
	}
	if v.jobs == nil {
		v.jobs, v.checked = make(chan digestJob, digestQueue), make(chan error, 1)
		go v.checkDigests(ctx, v.jobs, v.checked)
	}
	select {
	case v.jobs <- job:
		return nil
	case err := <-v.checked: // the worker failed: it releases what is queued and ends
		release(ctx, job.conn)
		close(v.jobs)
		v.jobs, v.checked = nil, nil
		return err
	}
}

// checkDigests checks the queued chunks in order until jobs is closed or a
// check fails (or asks for a recheck), then sends its error to checked and
// ends the stream with it.
func (v *verifier) checkDigests(ctx context.Context, jobs <-chan digestJob, checked chan<- error) {
	var err error
	for job := range jobs {
		if err != nil {
			release(ctx, job.conn)
			continue
		}
		if err = v.finishDigest(ctx, job); err != nil {
			v.fail(err)
			checked <- err
		}
	}
	if err == nil {
		checked <- nil
	}
}

// snapshot opens a connection with a consistent snapshot of the target as
// the apply has left it. The snapshot is taken under REPEATABLE READ
// whatever the server's default: under READ COMMITTED, WITH CONSISTENT
// SNAPSHOT is ignored and every statement would see the latest commits.
// SET TRANSACTION (not SESSION) leaves the pooled connection as it was.
func (v *verifier) snapshot(ctx context.Context) (*sql.Conn, error) {
	conn, err := v.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("verify %s: %w", v.t.name, err)
	}
	for _, q := range []string{"SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			release(ctx, conn)
			return nil, fmt.Errorf("verify %s: target snapshot: %w", v.t.name, err)
		}
	}
	return conn, nil
}

// finishDigest reads the target's digest of a chunk's range in the
// snapshot the job holds, compares it with the source's, and records the
// chunk as compared or its range as to recheck (*verifyRecheck).
func (v *verifier) finishDigest(ctx context.Context, job digestJob) (err error) {
	c, source := job.chunk, job.source
	span := v.play.startSpan(ctx, "rowlift.applier.verify_digest", c.GetTraceContext(), v.t.name)
	defer func() { tracing.End(span, err, source.Rows, 0) }()
	testhook.Delay(ctx, testhook.VerifyDigest)
	target, err := verify.QueryDigest(ctx, job.conn, v.flavor, source.Bytes, job.query)
	// Released, never closed in its transaction: back in the pool, a READ
	// ONLY transaction would refuse the next user's writes.
	release(ctx, job.conn)
	if err != nil {
		return fmt.Errorf("verify %s: target: %w", v.t.name, err)
	}
	tx, err := v.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("verify %s: %w", v.t.name, err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
	if target != source {
		var through *rowliftv1.Row // the table's end
		if !c.GetTableDone() {
			through = c.GetLastPk()
		}
		if err := state.SaveVerifyRecheck(ctx, tx, v.play.workflow, v.play.source, v.play.owner, v.t.name, v.state.StartedAtUS, through); err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("verify %s: commit: %w", v.t.name, err)
		}
		return &verifyRecheck{table: v.t.name, source: source, target: target}
	}
	found := state.VerifyChunk{LastPK: c.GetLastPk(), Done: c.GetTableDone()}
	found.RowsCompared = source.Rows
	if err := state.SaveVerifyChunk(ctx, tx, v.play.workflow, v.play.source, v.play.owner, v.t.name, v.state.StartedAtUS, found); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("verify %s: commit: %w", v.t.name, err)
	}
	if found.Done {
		v.log.Info("table verified")
		return v.play.tableVerified(ctx)
	}
	return nil
}

// wait ends the table's check worker, if it runs, once it has checked what
// is queued, and returns its error.
func (v *verifier) wait() error {
	if v.jobs == nil {
		return nil
	}
	close(v.jobs)
	err := <-v.checked
	v.jobs, v.checked = nil, nil
	return err
}

// verifyRecheck ends a stream whose verify chunk's digests differed: the
// table's verify state now asks for the chunk's rows, which the stream,
// opened again at once, compares key by key.
type verifyRecheck struct {
	table          string
	source, target verify.Digest
}

func (e *verifyRecheck) Error() string {
	return fmt.Sprintf("verify %s: a chunk's digests differ (source %s, target %s); its rows are compared next", e.table, e.source, e.target)
}
