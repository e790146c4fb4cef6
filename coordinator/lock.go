package coordinator

import (
	"crypto/sha256"
	"encoding/hex"
)

// maxLockName is the longest lock name MySQL takes (error 3057 beyond it;
// MariaDB has no such limit).
const maxLockName = 64

// serverLockName is the name GET_LOCK takes for a lock: the name itself when
// it fits MySQL's limit, else its start and a hash of the whole, so that a
// workflow with a long name locks alike on either flavor and apart from
// others with the same start.
func serverLockName(name string) string {
	if len(name) <= maxLockName {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	suffix := "#" + hex.EncodeToString(sum[:12])
	return name[:maxLockName-len(suffix)] + suffix
}
