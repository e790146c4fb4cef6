package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/rowlift/rowlift/internal/statustext"
	"github.com/rowlift/rowlift/internal/vindex"
)

// demoShardingColumn is what `demo --reshard` splits every sample table by,
// under vindex.Hash: each has an integer primary key of that name.
const demoShardingColumn = "id"

// maxShardDiffs is how many differing keys a shard's line of compareShards lists.
const maxShardDiffs = 5

// shardCheck is what compareShards found on one target shard, over every table.
type shardCheck struct {
	rows  map[string]int64 // per table, the source rows of the shard's range
	diffs int64
	shown []string // the first maxShardDiffs differences, "events id=5 missing"
}

func (c *shardCheck) differ(table string, id int64, what string) {
	c.diffs++
	if len(c.shown) < maxShardDiffs {
		c.shown = append(c.shown, fmt.Sprintf("%s id=%d %s", table, id, what))
	}
}

// compareShards compares each target shard with exactly the source rows of its
// range, row by row, and returns one line per shard ending in "identical: yes"
// or, with the differences, "identical: no". internal/verify compares whole
// tables, so this reads each table once from the source in key order, sends
// every row by the keyspace ID of its id to the shard owning it, and merges it
// there with that shard's rows, also read once in key order.
func (d *demo) compareShards(ctx context.Context) (lines []string, identical bool, err error) {
	checks := make([]shardCheck, len(d.targets))
	for i := range checks {
		checks[i].rows = map[string]int64{}
	}
	for _, t := range demoTables {
		if err := d.compareTableShards(ctx, t.name, checks); err != nil {
			return nil, false, fmt.Errorf("compare demo.%s with the shards: %w", t.name, err)
		}
	}
	identical = true
	for i, t := range d.targets {
		c := checks[i]
		var counts []string
		for _, tbl := range demoTables {
			counts = append(counts, tbl.name+" "+statustext.Count(c.rows[tbl.name]))
		}
		line := fmt.Sprintf("%-8s %-7s %s rows", t.name, t.keyRange.String(), strings.Join(counts, ", "))
		if c.diffs == 0 {
			lines = append(lines, line+"   identical: yes")
			continue
		}
		identical = false
		lines = append(lines, fmt.Sprintf("%s; %d differences, first: %s   identical: no", line, c.diffs, strings.Join(c.shown, ", ")))
	}
	return lines, identical, nil
}

// compareTableShards merges demo.table on the source with the table on every
// shard, adding to each shard's check.
func (d *demo) compareTableShards(ctx context.Context, table string, checks []shardCheck) error {
	src, err := openKeyed(ctx, d.srcDB, table, "*")
	if err != nil {
		return fmt.Errorf("source: %w", err)
	}
	defer src.close()
	// Every side selects the source's columns in the source's order.
	cols := make([]string, len(src.cols))
	for i, c := range src.cols {
		cols[i] = "`" + strings.ReplaceAll(c, "`", "``") + "`"
	}
	shards := make([]*keyedRows, len(d.targets))
	for i, t := range d.targets {
		if shards[i], err = openKeyed(ctx, t.db, table, strings.Join(cols, ", ")); err != nil {
			return fmt.Errorf("target %s: %w", t.name, err)
		}
		defer shards[i].close()
	}
	for src.ok {
		ksid, err := vindex.Hash.ID(src.raw[src.key])
		if err != nil {
			return fmt.Errorf("source id %s: %w", src.raw[src.key], err)
		}
		i := 0
		for i < len(d.targets) && !d.targets[i].keyRange.Contains(ksid) {
			i++
		}
		if i == len(d.targets) {
			return fmt.Errorf("source id %d: keyspace ID %x is in no shard's range", src.id, ksid)
		}
		sh, c := shards[i], &checks[i]
		c.rows[table]++
		for sh.ok && sh.id < src.id {
			c.differ(table, sh.id, "extra")
			if err := sh.next(); err != nil {
				return err
			}
		}
		switch {
		case !sh.ok || sh.id > src.id:
			c.differ(table, src.id, "missing")
		default:
			if !sameRow(src.raw, sh.raw) {
				c.differ(table, src.id, "different")
			}
			if err := sh.next(); err != nil {
				return err
			}
		}
		if err := src.next(); err != nil {
			return err
		}
	}
	for i, sh := range shards {
		for sh.ok {
			checks[i].differ(table, sh.id, "extra")
			if err := sh.next(); err != nil {
				return err
			}
		}
	}
	return nil
}

// sameRow reports whether two rows hold the same values, NULL only equal to NULL.
func sameRow(a, b []sql.RawBytes) bool {
	for i := range a {
		if (a[i] == nil) != (b[i] == nil) || !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// keyedRows reads a demo table in the order of its integer key
// demoShardingColumn, one row at a time: raw is the current row and id its
// key while ok.
type keyedRows struct {
	rows *sql.Rows
	cols []string
	raw  []sql.RawBytes
	dest []any
	key  int // the key's index in cols
	id   int64
	ok   bool
}

// openKeyed selects list (a select list) from demo.table on db in key order
// and reads the first row.
func openKeyed(ctx context.Context, db *sql.DB, table, list string) (*keyedRows, error) {
	rows, err := db.QueryContext(ctx, "SELECT "+list+" FROM demo."+table+" ORDER BY "+demoShardingColumn)
	if err != nil {
		return nil, err
	}
	k := &keyedRows{rows: rows, key: -1}
	if k.cols, err = rows.Columns(); err != nil {
		rows.Close()
		return nil, err
	}
	for i, c := range k.cols {
		if strings.EqualFold(c, demoShardingColumn) {
			k.key = i
		}
	}
	if k.key < 0 {
		rows.Close()
		return nil, fmt.Errorf("demo.%s has no column %s", table, demoShardingColumn)
	}
	k.raw = make([]sql.RawBytes, len(k.cols))
	k.dest = make([]any, len(k.raw))
	for i := range k.raw {
		k.dest[i] = &k.raw[i]
	}
	if err := k.next(); err != nil {
		rows.Close()
		return nil, err
	}
	return k, nil
}

// next reads the next row; ok is false at the end or on an error.
func (k *keyedRows) next() error {
	if k.ok = k.rows.Next(); !k.ok {
		return k.rows.Err()
	}
	if err := k.rows.Scan(k.dest...); err != nil {
		k.ok = false
		return err
	}
	id, err := strconv.ParseInt(string(k.raw[k.key]), 10, 64)
	if err != nil {
		k.ok = false
		return fmt.Errorf("key %s %q is not an integer: %w", demoShardingColumn, k.raw[k.key], err)
	}
	k.id = id
	return nil
}

func (k *keyedRows) close() { k.rows.Close() }
