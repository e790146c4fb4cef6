package applier

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/tracing"
	"github.com/rowlift/rowlift/internal/verify"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// startDigest checks a verify chunk that sums its range up, exactly at its
// fence: all the apply waits for is a snapshot of the target opened there.
// The target's digest of the range is then read in that snapshot beside the
// stream, and recorded (or, when it differs from the source's, turned into a
// recheck of the range's rows, which ends the stream) before the table's
// next chunk is checked, so chunks are recorded in key order.
func (v *verifier) startDigest(ctx context.Context, c *rowliftv1.Chunk) error {
	if err := v.wait(); err != nil {
		return err
	}
	// The source chose the width; the target sums up as many bytes.
	sum := c.GetDigest().GetSum()
	source := verify.Digest{Rows: c.GetDigest().GetRows(), Bytes: len(sum)}
	if source.Bytes != 8 && source.Bytes != 16 {
		return permanent("verify %s: the source's digest has %d bytes, want 8 or 16", v.t.name, source.Bytes)
	}
	copy(source.Sum[:], sum)
	buf := []byte("SELECT " + v.plan.DigestColumns(v.flavor, source.Bytes))
	buf, err := v.appendRange(buf, c)
	if err != nil {
		return err
	}
	// The span is the target's hold: the apply waits for the snapshot only.
	span := v.play.startSpan(ctx, "rowlift.applier.verify_chunk", c.GetTraceContext(), v.t.name)
	conn, err := v.snapshot(ctx)
	tracing.End(span, err, source.Rows, 0)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	v.pending = done
	go func() {
		err := v.finishDigest(ctx, conn, string(buf), c, source)
		if err != nil {
			v.fail(err)
		}
		done <- err
	}()
	return nil
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
			conn.Close()
			return nil, fmt.Errorf("verify %s: target snapshot: %w", v.t.name, err)
		}
	}
	return conn, nil
}

// finishDigest reads the target's digest of the chunk's range in the
// snapshot conn holds, compares it with the source's, and records the
// chunk as compared or its range as to recheck (*verifyRecheck).
func (v *verifier) finishDigest(ctx context.Context, conn *sql.Conn, query string, c *rowliftv1.Chunk, source verify.Digest) (err error) {
	span := v.play.startSpan(ctx, "rowlift.applier.verify_digest", c.GetTraceContext(), v.t.name)
	defer func() { tracing.End(span, err, source.Rows, 0) }()
	target, err := verify.QueryDigest(ctx, conn, v.flavor, source.Bytes, query)
	if _, cerr := conn.ExecContext(context.WithoutCancel(ctx), "COMMIT"); err == nil && cerr != nil {
		err = cerr
	}
	conn.Close()
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
	if found.LastPK != nil {
		v.lower, _ = rowcodec.Values(nil, found.LastPK)
	}
	if found.Done {
		v.log.Info("table verified")
	}
	return nil
}

// wait waits for the digest check running beside the stream, if any, and
// returns its error.
func (v *verifier) wait() error {
	if v.pending == nil {
		return nil
	}
	err := <-v.pending
	v.pending = nil
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
