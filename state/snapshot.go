package state

import (
	"context"
	"fmt"
)

// Snapshot is every workflow on a target with all that its status is built
// from. Listing reads one per target in a fixed number of queries, whatever
// the number of workflows, instead of several queries per workflow.
type Snapshot struct {
	Workflows []*Workflow
	// Copies, Streams, Verifies and Journals are by workflow name; a workflow
	// has no entry where it has no rows.
	Copies   map[string][]TableCopy
	Streams  map[string][]Stream
	Verifies map[string][]TableVerify
	Journals map[string]*Journal
	// ApplierRunning is whether an applier holds the target's ApplierLock.
	ApplierRunning bool
}

// Snapshot reads every workflow on this target and its state in seven
// queries. The reads are not one transaction, as a workflow's own reads
// (Workflow, CopyState, ...) are not: a row written in between shows in one
// part and not another, as it would between two status calls.
func (s *Store) Snapshot(ctx context.Context) (*Snapshot, error) {
	snap := &Snapshot{}
	var err error
	if snap.Workflows, err = s.Workflows(ctx); err != nil {
		return nil, err
	}
	if snap.Copies, err = s.copyStates(ctx, ""); err != nil {
		return nil, fmt.Errorf("read copy state: %w", err)
	}
	if snap.Streams, err = s.streams(ctx, ""); err != nil {
		return nil, fmt.Errorf("read streams: %w", err)
	}
	if snap.Verifies, err = s.verifies(ctx, ""); err != nil {
		return nil, fmt.Errorf("read verify: %w", err)
	}
	if snap.Journals, err = s.journals(ctx, ""); err != nil {
		return nil, fmt.Errorf("read cutovers: %w", err)
	}
	if snap.ApplierRunning, err = s.ApplierRunning(ctx); err != nil {
		return nil, err
	}
	return snap, nil
}
