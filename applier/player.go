package applier

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-sql-driver/mysql"

	"github.com/rowlift/rowlift/internal/rowcodec"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// player applies binlog transactions: each source transaction as one target
// transaction of statements keyed by PK, committed with the stream's position.
// The target is a consistent prefix of the source, so a statement that does not
// find the row its before image describes, or an insert that finds its key taken,
// is divergence: the workflow stops with the key rather than absorb it.
type player struct {
	db       *sql.DB
	workflow string
	source   string
	owner    int64
	targetDB string
	tables   map[string]*targetTable
	// applied is the GTID set committed on the target; transactions in it are
	// skipped (a streamer resumed from an older position sends them again). The
	// copy writer moves it too, under mu: a committed chunk covers its fence.
	mu      sync.Mutex
	applied *gomysql.MariadbGTIDSet
	buf     []byte
	values  [][]byte
}

func newPlayer(db *sql.DB, workflow, source string, owner int64, targetDB string, tables map[string]*targetTable, position string) (*player, error) {
	set, err := gomysql.ParseMariadbGTIDSet(position)
	if err != nil {
		return nil, fmt.Errorf("committed position %q: %w", position, err)
	}
	return &player{db: db, workflow: workflow, source: source, owner: owner, targetDB: targetDB, tables: tables,
		applied: set.(*gomysql.MariadbGTIDSet)}, nil
}

// divergence is a permanent error naming the transaction and the row.
func divergence(trx *rowliftv1.Transaction, table, what string) error {
	return permanent("divergence applying source transaction %s to %s: %s; the target changed outside rowlift "+
		"or missed a change: verify the table and restart its copy", trx.GetGtid(), table, what)
}

// apply applies one transaction and commits the position after it.
func (p *player) apply(ctx context.Context, trx *rowliftv1.Transaction) error {
	if p.contains(trx.GetGtid()) {
		return nil
	}
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("apply %s: begin: %w", trx.GetGtid(), err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	for _, ev := range trx.GetEvents() {
		t := p.tables[ev.GetTable()]
		if t == nil {
			return fmt.Errorf("apply %s: streamer sent rows of table %q, which the workflow does not stream", trx.GetGtid(), ev.GetTable())
		}
		for _, ch := range ev.GetChanges() {
			if err := p.change(ctx, tx, trx, t, ch); err != nil {
				return err
			}
		}
	}
	return p.commit(ctx, tx, trx.GetPosition().GetGtidSet(), trx.GetCommitTimeUs())
}

// advance commits a new position with no rows (a heartbeat, a skipped DDL).
func (p *player) advance(ctx context.Context, position string, sourceTimeUS int64) error {
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("advance position: begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	return p.commit(ctx, tx, position, sourceTimeUS)
}

func (p *player) commit(ctx context.Context, tx *sql.Tx, position string, sourceTimeUS int64) error {
	set, err := gomysql.ParseMariadbGTIDSet(position)
	if err != nil {
		return fmt.Errorf("position %q: %w", position, err)
	}
	if err := state.SavePosition(ctx, tx, p.workflow, p.source, p.owner, position, sourceTimeUS); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit position %s: %w", position, err)
	}
	p.committed(set.(*gomysql.MariadbGTIDSet))
	return nil
}

func (p *player) contains(gtid string) bool {
	g, err := gomysql.ParseMariadbGTIDSet(gtid)
	p.mu.Lock()
	defer p.mu.Unlock()
	return err == nil && p.applied.Contain(g)
}

// saveFence records, in a chunk's transaction, that the target now covers the
// chunk's fence: every transaction at or before it was placed before the chunk
// and is applied, or was dropped because the chunk holds its rows. Without it a
// restarted stream would read those dropped transactions again and judge them
// against a copy that has moved past their rows, applying them twice. It
// returns the position to record with after commit.
func (p *player) saveFence(ctx context.Context, tx *sql.Tx, fence string) (*gomysql.MariadbGTIDSet, error) {
	f, err := gomysql.ParseMariadbGTIDSet(fence)
	if err != nil {
		return nil, fmt.Errorf("fence %q: %w", fence, err)
	}
	p.mu.Lock()
	merged := p.applied.Clone().(*gomysql.MariadbGTIDSet)
	p.mu.Unlock()
	for domain, g := range f.(*gomysql.MariadbGTIDSet).Sets {
		if cur, ok := merged.Sets[domain]; !ok || cur.SequenceNumber < g.SequenceNumber {
			merged.Sets[domain] = g.Clone()
		}
	}
	if err := state.SavePosition(ctx, tx, p.workflow, p.source, p.owner, merged.String(), 0); err != nil {
		return nil, err
	}
	return merged, nil
}

// committed records a position a transaction has committed.
func (p *player) committed(set *gomysql.MariadbGTIDSet) {
	p.mu.Lock()
	p.applied = set
	p.mu.Unlock()
}

func (p *player) change(ctx context.Context, tx *sql.Tx, trx *rowliftv1.Transaction, t *targetTable, ch *rowliftv1.RowChange) error {
	before, after := ch.GetBefore(), ch.GetAfter()
	var err error
	switch {
	case before == nil:
		p.buf, err = p.insert(t, after)
	case after == nil:
		p.buf, err = p.delete(t, before)
	default:
		p.buf, err = p.update(t, before, after)
	}
	if err != nil {
		return fmt.Errorf("apply %s to %s: %w", trx.GetGtid(), t.name, err)
	}
	res, err := tx.ExecContext(ctx, string(p.buf))
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1062 {
		return divergence(trx, t.name, fmt.Sprintf("the key of %s is already taken (%s)", p.describe(t, after), me.Message))
	}
	if err != nil {
		return writeError(t.name, err)
	}
	if n, _ := res.RowsAffected(); n != 1 && before != nil {
		return divergence(trx, t.name, fmt.Sprintf("no row %s to %s", p.describe(t, before), map[bool]string{true: "delete", false: "update"}[after == nil]))
	}
	return nil
}

func (p *player) insert(t *targetTable, after *rowliftv1.Row) ([]byte, error) {
	buf := append(p.buf[:0], "INSERT INTO "...)
	buf = append(buf, rowcodec.QualifiedIdent(p.targetDB, t.name)...)
	buf = append(buf, " ("...)
	for i, f := range t.fields.GetFields() {
		if i > 0 {
			buf = append(buf, ", "...)
		}
		buf = rowcodec.AppendIdent(buf, f.GetName())
	}
	buf = append(buf, ") VALUES ("...)
	vals, err := p.row(t, after)
	if err != nil {
		return nil, err
	}
	for i, f := range t.fields.GetFields() {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = rowcodec.AppendLiteral(buf, rowcodec.KindOf(f.GetDataType()), vals[i])
	}
	return append(buf, ')'), nil
}

func (p *player) update(t *targetTable, before, after *rowliftv1.Row) ([]byte, error) {
	buf := append(p.buf[:0], "UPDATE "...)
	buf = append(buf, rowcodec.QualifiedIdent(p.targetDB, t.name)...)
	buf = append(buf, " SET "...)
	vals, err := p.row(t, after)
	if err != nil {
		return nil, err
	}
	for i, f := range t.fields.GetFields() {
		if i > 0 {
			buf = append(buf, ", "...)
		}
		buf = rowcodec.AppendIdent(buf, f.GetName())
		buf = append(buf, " = "...)
		buf = rowcodec.AppendLiteral(buf, rowcodec.KindOf(f.GetDataType()), vals[i])
	}
	return p.where(buf, t, before)
}

func (p *player) delete(t *targetTable, before *rowliftv1.Row) ([]byte, error) {
	buf := append(p.buf[:0], "DELETE FROM "...)
	buf = append(buf, rowcodec.QualifiedIdent(p.targetDB, t.name)...)
	return p.where(buf, t, before)
}

// where appends the key condition of before. Key values compare under their
// column's collation, as the source ordered and identified them.
func (p *player) where(buf []byte, t *targetTable, before *rowliftv1.Row) ([]byte, error) {
	vals, err := p.row(t, before)
	if err != nil {
		return nil, err
	}
	buf = append(buf, " WHERE "...)
	for i, idx := range t.fields.GetPkColumns() {
		if i > 0 {
			buf = append(buf, " AND "...)
		}
		f := t.fields.GetFields()[idx]
		buf = rowcodec.AppendIdent(buf, f.GetName())
		buf = append(buf, " = "...)
		buf = rowcodec.AppendComparable(buf, rowcodec.KindOf(f.GetDataType()), f.GetCharset(), vals[idx])
	}
	return buf, nil
}

func (p *player) row(t *targetTable, r *rowliftv1.Row) ([][]byte, error) {
	var err error
	p.values, err = unpackRow(p.values, r, len(t.fields.GetFields()))
	return p.values, err
}

// describe renders a row's key for messages: (id=5, region='eu').
func (p *player) describe(t *targetTable, r *rowliftv1.Row) string {
	vals, err := rowcodec.Values(nil, r)
	if err != nil {
		return "(undecodable row)"
	}
	var parts []string
	for _, idx := range t.fields.GetPkColumns() {
		parts = append(parts, fmt.Sprintf("%s=%q", t.fields.GetFields()[idx].GetName(), vals[idx]))
	}
	return "(" + strings.Join(parts, ", ") + ")"
}
