package applier

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/rowlift/rowlift/internal/rowcodec"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// A replay group is one target transaction, so only its end state is ever
// seen: its row changes may be written in any order that ends there. Written
// one statement per change, a group of sbtest-like transactions costs the
// target a parse, a plan and a table open per row; coalesced, each table of
// the group takes one DELETE of every key the group found on the target and
// one multi-row INSERT of every row the group leaves, whatever the group's
// order of changes. Deleting first makes the order irrelevant for every
// unique key: the rows the INSERT writes are the source's rows at the group's
// end, beside target rows the group did not touch, as on the source, so no
// key can collide unless the target diverged. The DELETE's row count checks
// that the target held every row the group changed, as the plain UPDATE and
// DELETE statements' counts do. A table is coalesced only when nothing else
// sees the order or the intermediate rows (no foreign key, no trigger: the
// writeset calls such tables barriers) and its rows can be rewritten whole
// (every stored target column is streamed: writeset.Table.Whole).

// netRow is what a group leaves of one key of a table: the row the group
// found there (pre, its first before image; nil when the key was free) and
// the row it leaves (final; nil when none).
type netRow struct {
	pre, final *rowliftv1.Row
}

// errIncoherent says a group's changes of a key do not follow from each
// other (an insert of a key held, a change of a key free): only the plain
// statements can say what diverged.
var errIncoherent = errors.New("the group's changes of a key do not follow from each other")

// netRows folds a table's changes, in group order, into one netRow per key,
// in the order the keys first appear. keyOf gives an image's key as bytes
// that are equal exactly for equal key values.
func netRows(changes []*rowliftv1.RowChange, keyOf func(*rowliftv1.Row) (string, error)) ([]netRow, error) {
	type state struct {
		i       int
		present bool
	}
	var rows []netRow
	byKey := map[string]*state{}
	// step applies one image of a change: a before image finds its key held
	// (or first seen) and frees it, an after image finds it free and holds it.
	step := func(img *rowliftv1.Row, after bool) error {
		k, err := keyOf(img)
		if err != nil {
			return err
		}
		s := byKey[k]
		switch {
		case s == nil:
			r := netRow{}
			if !after {
				r.pre = img
			}
			rows = append(rows, r)
			s = &state{i: len(rows) - 1}
			byKey[k] = s
		case s.present == after:
			return errIncoherent
		}
		s.present = after
		rows[s.i].final = nil
		if after {
			rows[s.i].final = img
		}
		return nil
	}
	for _, ch := range changes {
		if before := ch.GetBefore(); before != nil {
			if err := step(before, false); err != nil {
				return nil, err
			}
		}
		if after := ch.GetAfter(); after != nil {
			if err := step(after, true); err != nil {
				return nil, err
			}
		}
	}
	return rows, nil
}

// keyBytes is an image's key as netRows compares it: the key columns' exact
// bytes, each with its length, NULL apart from every value.
func (w *rowWriter) keyBytes(t *targetTable, buf []byte, r *rowliftv1.Row) ([]byte, error) {
	vals, err := rowcodec.Values(w.keyVals[:0], r)
	if err != nil {
		return nil, err
	}
	w.keyVals = vals
	buf = buf[:0]
	for _, idx := range t.fields.GetPkColumns() {
		if int(idx) >= len(vals) {
			return nil, fmt.Errorf("row image of %s has %d values, no key column %d", t.name, len(vals), idx)
		}
		v := vals[idx]
		if v == nil {
			buf = binary.AppendUvarint(buf, 0)
			continue
		}
		buf = binary.AppendUvarint(buf, uint64(len(v))+1)
		buf = append(buf, v...)
	}
	return buf, nil
}

// errNotAsCoalesced says a coalesced DELETE did not find every row the group
// changed: the target diverged somewhere, and the plain statements say where.
var errNotAsCoalesced = errors.New("a coalesced DELETE found fewer rows than the group changed")

// tableChanges are a group's changes of one table, in group order.
type tableChanges struct {
	t       *targetTable
	trx     *rowliftv1.Transaction // the first transaction that changed it, for messages
	changes []*rowliftv1.RowChange
}

// addCoalesced appends a group's statements coalesced per table (see the top
// of this file), each statement at most maxStmt bytes unless one row is
// larger. It appends nothing and returns false when some table may not be
// coalesced, or its changes are incoherent: the plain statements then apply
// the group, and report what diverged.
func (w *rowWriter) addCoalesced(txs []*rowliftv1.Transaction, maxStmt int) (bool, error) {
	var tables []*tableChanges
	byName := map[string]*tableChanges{}
	for _, trx := range txs {
		for _, ev := range trx.GetEvents() {
			tc := byName[ev.GetTable()]
			if tc == nil {
				t := w.p.tables[ev.GetTable()]
				k := w.keys[ev.GetTable()]
				if t == nil || k == nil || !k.Whole() {
					return false, nil
				}
				if barrier, _ := k.Barrier(); barrier {
					return false, nil
				}
				tc = &tableChanges{t: t, trx: trx}
				byName[ev.GetTable()] = tc
				tables = append(tables, tc)
			}
			tc.changes = append(tc.changes, ev.GetChanges()...)
		}
	}
	plans := make([][]netRow, len(tables))
	var key []byte
	for i, tc := range tables {
		rows, err := netRows(tc.changes, func(r *rowliftv1.Row) (string, error) {
			var err error
			key, err = w.keyBytes(tc.t, key, r)
			return string(key), err
		})
		if errors.Is(err, errIncoherent) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("apply %s to %s: %w", tc.trx.GetGtid(), tc.t.name, err)
		}
		plans[i] = rows
	}
	for i, tc := range tables {
		if err := w.addNet(tc, plans[i], maxStmt); err != nil {
			return false, fmt.Errorf("apply %s to %s: %w", tc.trx.GetGtid(), tc.t.name, err)
		}
	}
	return true, nil
}

// addNet appends one table's DELETEs of the rows the group found, then its
// INSERTs of the rows it leaves. A statement takes items while it stays
// within maxStmt bytes, and at least one, so that no statement is longer than
// the plain one of its largest row would be plus its prefix. A key of one
// column is deleted by an IN list, which the server parses and plans in
// linear time; an OR of conditions, which a key of several columns needs,
// costs it more per key the longer the list (see deleteList).
func (w *rowWriter) addNet(tc *tableChanges, rows []netRow, maxStmt int) error {
	t := tc.t
	stmtBuf, item := w.buf[:0], w.item[:0]
	defer func() { w.item = item[:0] }()
	n := int64(0)
	// push ends the statement being built, of n items, with suffix; check
	// says it is a DELETE whose row count must match.
	push := func(suffix string, check bool) {
		s := stmt{trx: tc.trx, t: t}
		if check {
			s.rows = n
		}
		w.push(append(stmtBuf, suffix...), s)
		stmtBuf, n = w.buf, 0
	}
	// add appends item to the statement being built, which starts with
	// prefix, separates items with sep and ends with suffix.
	add := func(prefix, sep, suffix string, check bool) {
		if n > 0 && len(stmtBuf)+len(sep)+len(item)+len(suffix) > maxStmt {
			push(suffix, check)
		}
		if n == 0 {
			stmtBuf = append(append(stmtBuf[:0], prefix...), item...)
		} else {
			stmtBuf = append(append(stmtBuf, sep...), item...)
		}
		n++
	}
	del := deleteListOf(t)
	for _, r := range rows {
		if r.pre == nil {
			continue
		}
		vals, err := w.row(t, r.pre)
		if err != nil {
			return err
		}
		item = del.appendKey(w, item[:0], t, vals)
		add(del.prefix, del.sep, del.suffix, true)
	}
	if n > 0 {
		push(del.suffix, true)
	}
	for _, r := range rows {
		if r.final == nil {
			continue
		}
		var err error
		if item, err = w.appendValues(item[:0], t, r.final); err != nil {
			return err
		}
		add(t.insertHead, ",", "", false)
	}
	if n > 0 {
		push("", false)
	}
	return nil
}

// deleteList is how a coalesced DELETE of a table names its keys:
// `k IN (v1,v2)` for a key of one column (col, its position), `(a = 1 AND
// b = 2) OR (...)` for a key of several (col -1). Both find exactly the rows
// the plain DELETEs' `k = v` conditions do, with the same comparisons;
// measured on MariaDB 10.11 (an ad hoc loop of a 1,024-key DELETE and INSERT
// of sbtest rows), the OR list cost the server 28 µs a row against 20 for IN,
// and 40 against 21 at 3,072 keys.
type deleteList struct {
	prefix, sep, suffix string
	col                 int
}

func deleteListOf(t *targetTable) deleteList {
	head := "DELETE FROM " + t.ident + " WHERE "
	if pk := t.fields.GetPkColumns(); len(pk) == 1 {
		col := int(pk[0])
		return deleteList{prefix: head + rowcodec.Ident(t.fields.GetFields()[col].GetName()) + " IN (", sep: ",", suffix: ")", col: col}
	}
	return deleteList{prefix: head, sep: " OR ", col: -1}
}

// appendKey appends one key of the list, from a row's values.
func (d deleteList) appendKey(w *rowWriter, buf []byte, t *targetTable, vals [][]byte) []byte {
	if d.col < 0 {
		return append(w.keyCondition(append(buf, '('), t, vals), ')')
	}
	return rowcodec.AppendComparable(buf, t.kinds[d.col], t.fields.GetFields()[d.col].GetCharset(), vals[d.col])
}
