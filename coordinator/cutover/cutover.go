// Package cutover decides the steps of a switch (writes move from one side of
// a workflow pair to the other) as a pure function of the recorded journal
// and what the coordinator observes, in the manner of a Kubernetes controller:
// read the journal, do one idempotent step, record it. Whoever resumes a
// journal after a crash (the same request retried, another coordinator, the
// coordinator's own resume loop) calls Next again and repeats at most the one
// step whose record was lost. It does no I/O.
//
// The invariants it keeps, which its tests check at every crash point:
//   - a cutover ends Done or RolledBack, never elsewhere, however often the
//     driver dies;
//   - it rolls back only before the stopping workflow is parked, and then the
//     losing side is unfrozen and nothing was started;
//   - once it decided to roll back after the freeze positions were recorded,
//     it records that before unfreezing, so a driver that died after the
//     unfreeze never parks a workflow whose source takes writes again;
//   - past the deadline it never waits: it rolls back, so a source is never
//     left frozen by a timeout;
//   - the following workflow is started only after the stopping one applied
//     every freeze position and was parked;
//   - a lock freeze ends renamed (like a rename freeze) when the cutover is
//     Done, and the lock is never released before that rename, nor the
//     tables renamed before the park or when rolling back.
package cutover

// Step is where a cutover is; the journal records it after the step's action.
type Step string

// The steps, in order; RolledBack ends a cutover that did not switch.
const (
	// Freezing: the journal exists; stop writes on the losing side.
	Freezing Step = "freezing"
	// Frozen: freeze positions recorded; wait until the stopping workflow has
	// applied them.
	Frozen Step = "frozen"
	// Applied: the stopping workflow applied everything and is parked.
	Applied Step = "applied"
	// Writable: the gaining side takes writes; its start positions are recorded.
	Writable Step = "writable"
	// Started: the routing hook ran (under a lock freeze, while the lock held,
	// and then the frozen side's tables were renamed as a rename freeze does
	// and unlocked), and the following workflow runs from the start positions.
	Started Step = "started"
	// Done: nothing is left to do.
	Done Step = "done"
	// RollingBack: the cutover gave up after the freeze (deadline, or the
	// stopping workflow failed); the losing side is to be unfrozen. Recorded
	// before the unfreeze: once the losing side takes writes again, its
	// stream may well reach the freeze positions, and a driver resuming at
	// Frozen would then park it and switch with both sides writable.
	RollingBack Step = "rolling_back"
	// RolledBack: the switch did not happen; the losing side was unfrozen.
	RolledBack Step = "rolled_back"
)

// Finished reports whether nothing is left to do for a cutover at step s.
func Finished(s Step) bool { return s == Done || s == RolledBack }

// Action is the one thing the driver does next.
type Action string

// The actions; each is idempotent.
const (
	// Freeze the losing side's tables and record their positions.
	Freeze Action = "freeze"
	// Wait: read the stopping workflow's positions again a little later.
	Wait Action = "wait"
	// Park the stopping workflow (state switched): it has nothing left to apply.
	Park Action = "park"
	// UnfreezeGaining lets the gaining side take writes, recording its positions.
	UnfreezeGaining Action = "unfreeze_gaining"
	// Follow runs the routing hook, so the writers move as soon as the gaining
	// side takes writes (under a lock freeze while the lock holds, then it
	// renames the frozen tables, still under the lock, and releases it), and
	// starts the following workflow at the gaining side's positions.
	Follow Action = "follow"
	// Finish records the end (and runs the routing hook of a journal whose
	// Follow, by an older coordinator, did not).
	Finish Action = "finish"
	// Abandon records that the cutover rolls back; it does nothing else.
	Abandon Action = "abandon"
	// Rollback unfreezes the losing side; the stopping workflow goes on.
	Rollback Action = "rollback"
	// None: the cutover has ended.
	None Action = "none"
)

// Facts are what the driver observed just before calling Next.
type Facts struct {
	// NowUS and DeadlineUS are microseconds since the epoch.
	NowUS, DeadlineUS int64
	// Applied: every stream of the stopping workflow covers its freeze position.
	Applied bool
	// Stuck is non-empty when the stopping workflow cannot apply anything more
	// (it is in state error or was stopped): why.
	Stuck string
}

// Next returns what to do at step s and the step to record once it is done
// (s itself when only time can move it on). A rollback's reason is in why.
func Next(s Step, f Facts) (a Action, next Step, why string) {
	late := f.NowUS > f.DeadlineUS
	switch s {
	case Freezing:
		if late {
			return Rollback, RolledBack, "the freeze did not complete before the deadline"
		}
		return Freeze, Frozen, ""
	case Frozen:
		switch {
		case f.Applied:
			return Park, Applied, ""
		case f.Stuck != "":
			return Abandon, RollingBack, f.Stuck
		case late:
			return Abandon, RollingBack, "the streams did not apply the freeze positions before the deadline"
		}
		return Wait, Frozen, ""
	case RollingBack:
		return Rollback, RolledBack, ""
	case Applied:
		return UnfreezeGaining, Writable, ""
	case Writable:
		return Follow, Started, ""
	case Started:
		return Finish, Done, ""
	}
	return None, s, ""
}
