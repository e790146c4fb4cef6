package applier

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReadAheadFullBoundsGroupsAndBytes(t *testing.T) {
	for _, tc := range []struct {
		groups, bytes int
		want          bool
	}{
		{0, 0, false},
		{1, 100, false},
		{maxPendingGroups - 1, maxPendingBytes - 1, false},
		{maxPendingGroups, 0, true},                   // many small groups
		{16, maxPendingBytes, true},                   // 16 groups of 4 MiB: wide rows
		{1, maxPendingBytes + 1, true},                // one transaction above the bound waits for its commit
		{0, maxPendingBytes, false},                   // nothing to commit: never wait on nothing
		{maxPendingGroups - 1, maxPendingBytes, true}, // either bound holds
	} {
		t.Run(fmt.Sprintf("%d groups %d bytes", tc.groups, tc.bytes), func(t *testing.T) {
			require.Equal(t, tc.want, readAheadFull(tc.groups, tc.bytes))
		})
	}
}
