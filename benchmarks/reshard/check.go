package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/rowlift/rowlift/benchmarks/internal/benchkit"
	"github.com/rowlift/rowlift/internal/vindex"
)

// check fails unless the targets together hold the source's rows exactly
// once: their counts add up to rows and, in a split, every id a shard holds
// has its keyspace ID (hash of the id) in that shard's range. It returns each
// target's row count.
func check(ctx context.Context, targets []target, rows int64) ([]int64, error) {
	table := db + "." + benchkit.StressTable
	counts := make([]int64, len(targets))
	var total int64
	for i, t := range targets {
		n, err := shardRows(ctx, t)
		if err != nil {
			return nil, err
		}
		counts[i] = n
		total += n
	}
	if total != rows {
		return counts, fmt.Errorf("ROW COUNT MISMATCH: the targets hold %d rows of %s in all (%v), the source %d", total, table, counts, rows)
	}
	return counts, nil
}

// shardRows counts the target's rows, and in a split fails at the first id
// whose keyspace ID is outside the target's range.
func shardRows(ctx context.Context, t target) (int64, error) {
	table := db + "." + benchkit.StressTable
	rows, err := t.db.QueryContext(ctx, "SELECT id FROM "+table)
	if err != nil {
		return 0, fmt.Errorf("read ids of %s on %s: %w", table, t.name, err)
	}
	defer rows.Close()
	var n int64
	var id []byte
	for rows.Next() {
		if err := rows.Scan(&id); err != nil {
			return 0, fmt.Errorf("read ids of %s on %s: %w", table, t.name, err)
		}
		n++
		if !t.split {
			continue
		}
		ksid, err := vindex.Hash.ID(id)
		if err != nil {
			return 0, fmt.Errorf("%s on %s: id %s: %w", table, t.name, id, err)
		}
		if !t.keyRange.Contains(ksid) {
			return 0, fmt.Errorf("WRONG SHARD: %s on %s (%s) holds id %s, whose keyspace ID %s is outside its range",
				table, t.name, t.keyRange, id, strconv.FormatUint(ksid, 16))
		}
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("read ids of %s on %s: %w", table, t.name, err)
	}
	return n, nil
}
