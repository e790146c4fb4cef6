package state

import (
	"fmt"
	"regexp"
)

// validName is what a workflow's or a target's name may be: the sidecar
// schema keeps both in VARCHAR(64) columns, and a target name must split
// cleanly from its DSN at '=' and from the next NAME=DSN at ',' (the
// coordinator's $ROWLIFT_TARGET).
var validName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// CheckName refuses workflow names the sidecar schema cannot hold, so callers
// can refuse a request before doing anything else.
func CheckName(name string) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("workflow name %q: use 1 to 64 letters, digits, '_' or '-'", name)
	}
	return nil
}

// CheckTargetName is the one rule for target names, wherever one is given:
// the coordinator's --target NAME=DSN, a workflow's targets and reverse
// targets, the CLI's --target and --reverse-target.
func CheckTargetName(name string) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("target name %q: use 1 to 64 letters, digits, '_' or '-', e.g. main or shard-80", name)
	}
	return nil
}
