package cutover

import "fmt"

// Last is what a pair's last cutover journal says about the tables of the two
// sides: the one table state a new cutover cannot observe for itself.
type Last struct {
	// Direction is the last cutover's ("switch" or "reverse").
	Direction string
	Step      Step
	// FrozeRenamed: it froze its losing side by renaming the tables (a RENAME
	// freeze, or a LOCK one turned into it), so a Done cutover left that side
	// under the frozen names.
	FrozeRenamed bool
	// GainingRenamed: the side it was to give the writes to held its tables
	// under the frozen names when it started.
	GainingRenamed bool
}

// GainingRenamed reports whether the side that gains the writes in a cutover
// in direction dir holds its tables under their frozen names, so that the
// cutover must rename them back to make that side live. last is the pair's
// last journal (nil: the pair was never cut over, and the tables of the side
// gaining the writes, the forward workflow's targets, are where the copy wrote
// them).
//
// A Done cutover left the side it froze frozen, and that side gains the writes
// of the next cutover, which goes the other way. A RolledBack one changed
// neither side: the next cutover goes the same way (the other way has nothing
// to switch) and finds the gaining side as the rolled-back one did, so its
// record is carried on. Reading only "the last one was Done and renamed", as
// rowlift once did, leaves the gaining side frozen after a rolled-back
// cutover while the losing side freezes too: both sides frozen.
func GainingRenamed(last *Last, dir string) (bool, error) {
	if last == nil {
		return false, nil
	}
	switch {
	case !Finished(last.Step):
		return false, fmt.Errorf("a %s is in progress at step %s", last.Direction, last.Step)
	case last.Step == Done && last.Direction != dir:
		return last.FrozeRenamed, nil
	case last.Step == RolledBack && last.Direction == dir:
		return last.GainingRenamed, nil
	case last.Step == Done:
		return false, fmt.Errorf("the last %s is done: the writes are on the side a %s would give them to", last.Direction, dir)
	}
	return false, fmt.Errorf("the last %s rolled back: the writes never left the side a %s would give them to", last.Direction, dir)
}
