package coordinator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/frozen"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// TestCheckLockLease: a LOCK switch whose lease (timeout plus margin) would
// pass the streamers' cap is refused before anything is frozen, saying which
// timeout fits; other freeze modes hold no lease.
func TestCheckLockLease(t *testing.T) {
	lock := rowliftv1.FreezeMode_FREEZE_MODE_LOCK
	require.NoError(t, checkLockLease(lock, DefaultSwitchTimeout))
	require.NoError(t, checkLockLease(lock, frozen.MaxLockLease-leaseMargin))
	require.EqualError(t, checkLockLease(lock, frozen.MaxLockLease-leaseMargin+time.Millisecond),
		"--timeout 4m50.001s is too long for --freeze lock: the lock blocks every writer of the tables for up to the timeout plus 10s, "+
			"and a lock's lease is capped at 5m0s; use --timeout 4m50s or less, or --freeze rename")
	require.NoError(t, checkLockLease(rowliftv1.FreezeMode_FREEZE_MODE_RENAME, time.Hour))
	require.NoError(t, checkLockLease(rowliftv1.FreezeMode_FREEZE_MODE_NONE, time.Hour))
}
