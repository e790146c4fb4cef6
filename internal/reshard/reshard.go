// Package reshard decides which streams a workflow runs and what each one
// carries: one per (source, target) pair whose key ranges overlap, filtered to
// their overlap, with the workflow's sharded tables and, from one source per
// target, its reference tables. It does no I/O: the coordinator checks and
// creates workflows with it, and each target's state and applier run the
// streams it gives that target.
package reshard

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/rowlift/rowlift/internal/keyrange"
	"github.com/rowlift/rowlift/internal/vindex"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// Resharding reports whether a workflow splits or merges by key range: some
// source or target has one. A workflow without is a move of whole tables.
func Resharding(spec *rowliftv1.WorkflowSpec) bool {
	for _, t := range spec.GetTargets() {
		if t.GetKeyRange() != "" {
			return true
		}
	}
	for _, s := range spec.GetSources() {
		if s.GetKeyRange() != "" {
			return true
		}
	}
	return false
}

// Check refuses a reshard whose ranges or tables cannot give every row exactly
// one home, naming the range, table or function at fault. A move passes.
func Check(spec *rowliftv1.WorkflowSpec) error {
	if !Resharding(spec) {
		for _, t := range spec.GetTables() {
			if t.GetReference() {
				return fmt.Errorf("table %s is a reference table, but no target has a key range: reference tables are for reshards", t.GetName())
			}
		}
		return nil
	}
	if _, err := ranges("target", spec.GetTargets(), (*rowliftv1.TargetShard).GetName, (*rowliftv1.TargetShard).GetKeyRange); err != nil {
		return err
	}
	if _, err := sourceRanges(spec); err != nil {
		return err
	}
	for _, t := range spec.GetTables() {
		switch {
		case t.GetReference() && t.GetShardingColumn() != "":
			return fmt.Errorf("table %s has sharding column %s and is a reference table: it is one or the other", t.GetName(), t.GetShardingColumn())
		case t.GetReference():
			continue
		case t.GetShardingColumn() == "":
			return fmt.Errorf("table %s has no sharding column: give --sharding-column %s=COLUMN[:FUNCTION] to split it by key range, "+
				"or --reference-tables %s to copy it whole to every target shard", t.GetName(), t.GetName(), t.GetName())
		}
		if _, err := vindex.Parse(t.GetShardingFunction()); err != nil {
			return fmt.Errorf("table %s: %w", t.GetName(), err)
		}
	}
	return nil
}

// ranges parses the shards' key ranges and checks that they tile the keyspace.
func ranges[S any](what string, shards []S, name, keyRange func(S) string) ([]keyrange.Range, error) {
	out := make([]keyrange.Range, len(shards))
	for i, s := range shards {
		if keyRange(s) == "" {
			return nil, fmt.Errorf("%s %s has no key range: in a reshard every %s needs one (\"-80\", \"80-\"; \"-\" for the whole keyspace)",
				what, name(s), what)
		}
		r, err := keyrange.Parse(keyRange(s))
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", what, name(s), err)
		}
		out[i] = r
	}
	if err := keyrange.Tile(out); err != nil {
		return nil, fmt.Errorf("%ss: %w", what, err)
	}
	return out, nil
}

// sourceRanges are the sources' key ranges: a lone source without one holds
// the whole keyspace; several must each say which part they hold.
func sourceRanges(spec *rowliftv1.WorkflowSpec) ([]keyrange.Range, error) {
	srcs := spec.GetSources()
	if len(srcs) == 1 && srcs[0].GetKeyRange() == "" {
		return []keyrange.Range{{}}, nil
	}
	return ranges("source", srcs, (*rowliftv1.SourceShard).GetName, (*rowliftv1.SourceShard).GetKeyRange)
}

// Stream is one (source, target) pair's share of a workflow.
type Stream struct {
	Source *rowliftv1.SourceShard
	Target *rowliftv1.TargetShard
	// Range is the keyspace IDs the stream carries, the overlap of the source's
	// and the target's ranges; Filtered is false when the workflow does not
	// reshard, and rows are not filtered at all.
	Range    keyrange.Range
	Filtered bool
	// TargetRange is the target's whole range; First marks the target's first
	// stream, which carries its reference tables and whose verify also checks
	// that no row outside TargetRange reached the target.
	TargetRange keyrange.Range
	First       bool
	// Spec is the workflow with only the stream's tables.
	Spec *rowliftv1.WorkflowSpec
}

// Name is "source→target", the stream's name in logs; a move recorded before
// targets were named has only its source.
func (s Stream) Name() string {
	if s.Target.GetName() == "" {
		return s.Source.GetName()
	}
	return s.Source.GetName() + "→" + s.Target.GetName()
}

// Merges reports whether the stream is one of several whose sources its
// target receives whole, without key ranges: its verify cannot tell a target
// row of another source from a row no source holds on its own.
func (s Stream) Merges() bool { return !s.Filtered && len(s.Spec.GetSources()) > 1 }

// KeyRange is the stream's range for status ("" when it is not filtered).
func (s Stream) KeyRange() string {
	if !s.Filtered {
		return ""
	}
	return s.Range.String()
}

// Streams lists the workflow's streams, by target then source, in spec order.
func Streams(spec *rowliftv1.WorkflowSpec) ([]Stream, error) {
	var out []Stream
	for _, t := range spec.GetTargets() {
		ss, err := ForTarget(spec, t.GetName())
		if err != nil {
			return nil, err
		}
		out = append(out, ss...)
	}
	return out, nil
}

// ForTarget lists the streams one target runs, in source order. A move runs
// one per source whatever the target's name (state written before targets
// were recorded has none).
func ForTarget(spec *rowliftv1.WorkflowSpec, target string) ([]Stream, error) {
	var tgt *rowliftv1.TargetShard
	for _, t := range spec.GetTargets() {
		if t.GetName() == target {
			tgt = t
		}
	}
	if !Resharding(spec) {
		out := make([]Stream, len(spec.GetSources()))
		for i, src := range spec.GetSources() {
			out[i] = Stream{Source: src, Target: tgt, Spec: spec, First: i == 0}
		}
		return out, nil
	}
	if err := Check(spec); err != nil {
		return nil, err
	}
	if tgt == nil {
		return nil, fmt.Errorf("workflow %s reshards, but has no target named %q", spec.GetName(), target)
	}
	tr, err := keyrange.Parse(tgt.GetKeyRange())
	if err != nil {
		return nil, fmt.Errorf("target %s: %w", target, err)
	}
	srcRanges, err := sourceRanges(spec)
	if err != nil {
		return nil, err
	}
	var out []Stream
	for i, src := range spec.GetSources() {
		overlap, ok := srcRanges[i].Intersect(tr)
		if !ok {
			continue
		}
		first := len(out) == 0
		s := proto.Clone(spec).(*rowliftv1.WorkflowSpec)
		s.Tables = nil
		for _, t := range spec.GetTables() {
			if !t.GetReference() || first {
				s.Tables = append(s.Tables, t)
			}
		}
		if len(s.Tables) == 0 {
			continue
		}
		out = append(out, Stream{Source: src, Target: tgt, Range: overlap, Filtered: true, TargetRange: tr, First: first, Spec: s})
	}
	return out, nil
}
