package streamer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/grants"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/testhook"
	"github.com/rowlift/rowlift/internal/verify"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// Verify chunks summed up on the source are sized by time, up to the
// stream's chunk_rows, not by bytes: the digest query reads its rows on the
// server and sends 24 bytes, so what a larger chunk costs is a longer
// snapshot on the source and a longer recheck of its rows if the digests
// differ, and what a smaller one costs is a fence, a state commit and a
// short hold of the target's apply per chunk.
const (
	digestChunkTime     = 300 * time.Millisecond
	digestFirstRows     = 20_000
	digestMinRows       = 1_000
	digestMaxGrowFactor = 4
)

// digestPlan is how a verify's rowStreamer sums its chunks up: the digest
// query's select list and the key as the copy selects it (last_pk).
type digestPlan struct {
	flavor  dbconn.Flavor
	width   int    // verify.DigestBytes
	columns string // verify.Plan.DigestColumns
	keys    string // the key columns as the copy selects them, for the chunk's bound
	from    string
	order   string
	rows    int64 // rows of the next chunk
	maxRows int64
}

// newDigestPlan plans the digest chunks of table plan p (the copy's) with
// the verify plan vp, on a server of flavor, of at most maxRows rows.
func newDigestPlan(p *tablePlan, vp *verify.Plan, flavor dbconn.Flavor, maxRows int64) *digestPlan {
	keys := make([]string, len(p.keyIdx))
	for i, idx := range p.keyIdx {
		keys[i] = p.exprs[idx]
	}
	width := verify.DigestBytes(flavor)
	return &digestPlan{flavor: flavor, width: width, columns: vp.DigestColumns(flavor, width), keys: strings.Join(keys, ", "),
		from: " FROM " + rowcodec.QualifiedIdent(p.table.Database, p.table.Name), order: p.orderBy,
		rows: max(1, min(digestFirstRows, maxRows)), maxRows: max(1, maxRows)}
}

// observe sizes the next chunk from how long this one's digest took: rows
// at the rate just seen for digestChunkTime, growing at most
// digestMaxGrowFactor times per chunk, within [digestMinRows, maxRows].
func (d *digestPlan) observe(rows int64, took time.Duration) {
	if rows < d.rows { // the table's last chunk: nothing learned about a full one
		return
	}
	next := d.rows * digestMaxGrowFactor
	if took > 0 {
		next = min(next, int64(float64(rows)*float64(digestChunkTime)/float64(took)))
	}
	d.rows = min(d.maxRows, max(digestMinRows, next))
}

// digestChunk sums up the next verify chunk in its snapshot and emits it as
// one part with its digest and bounds; done means it reached the table's end.
// Its upper key is chosen before the snapshot (any bound is as good: the
// digest is of every row in the range at the fence, on both sides).
func (r *rowStreamer) digestChunk(ctx context.Context) (done bool, err error) {
	upTo, err := r.chunkBound(ctx)
	if err != nil {
		return false, err
	}
	fence, fenceTime, err := r.begin(ctx)
	if err != nil {
		return false, err
	}
	defer r.endSnapshot(ctx, &err)
	testhook.Delay(ctx, testhook.ChunkRead)
	buf := []byte("SELECT " + r.digest.columns + r.digest.from)
	if buf, err = r.plan.appendRange(buf, r.lastPK, upTo); err != nil {
		return false, err
	}
	start := time.Now()
	d, err := verify.QueryDigest(ctx, r.conn, r.digest.flavor, r.digest.width, string(buf))
	if err != nil {
		return false, grants.Refused(ctx, r.conn, "source", err, selectGrant(r.plan.table.Database, r.plan.table.Name))
	}
	r.digest.observe(d.Rows, time.Since(start))
	part := r.newPart(fence, fenceTime)
	part.PackedRows = nil
	part.Digest = &rowliftv1.VerifyDigest{Rows: d.Rows, Sum: d.Sum[:d.Bytes]}
	if upTo != nil {
		part.LastPk = packKey(upTo)
		r.lastPK = upTo
	}
	part.TableDone = upTo == nil
	r.span.sent(d.Rows, 0) // the rows summed up; sendPart adds the part's none
	testhook.Delay(ctx, testhook.ChunkEmit)
	return upTo == nil, r.sendPart(ctx, part, true)
}

// chunkBound is the key of the last row of the next digest chunk: the
// digest plan's rows after r.lastPK, or nil when fewer are left (the chunk
// then runs to the table's end, so that it also covers rows inserted
// meanwhile, and extra rows on the target above the source's last key).
func (r *rowStreamer) chunkBound(ctx context.Context) ([][]byte, error) {
	buf := []byte("SELECT " + r.digest.keys + r.digest.from)
	buf, err := r.plan.appendRange(buf, r.lastPK, nil)
	if err != nil {
		return nil, err
	}
	buf = append(buf, r.digest.order...)
	buf = append(buf, " LIMIT 1 OFFSET "...)
	buf = strconv.AppendInt(buf, r.digest.rows-1, 10)
	rows, err := r.conn.QueryContext(ctx, string(buf))
	if err != nil {
		return nil, fmt.Errorf("find the chunk's last key: %w", grants.Refused(ctx, r.conn, "source", err, selectGrant(r.plan.table.Database, r.plan.table.Name)))
	}
	defer rows.Close()
	if !rows.Next() {
		return nil, rows.Err()
	}
	n := len(r.plan.keyIdx)
	raw := make([]sql.RawBytes, n)
	dest := make([]any, n)
	for i := range raw {
		dest[i] = &raw[i]
	}
	if err := rows.Scan(dest...); err != nil {
		return nil, fmt.Errorf("find the chunk's last key: %w", err)
	}
	key := make([][]byte, n)
	for i, v := range raw {
		if v == nil {
			return nil, errors.New("find the chunk's last key: a key column is NULL")
		}
		key[i] = append([]byte{}, v...)
	}
	return key, rows.Err()
}
