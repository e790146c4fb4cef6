package cutover

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGainingRenamed walks the pair's history: what each cutover finds on the
// side it gives the writes to, after every way the one before it ended.
func TestGainingRenamed(t *testing.T) {
	const sw, rev = "switch", "reverse"
	for _, tc := range []struct {
		name    string
		last    *Last
		dir     string
		renamed bool
		err     string
	}{
		{"first switch: the copy's tables", nil, sw, false, ""},
		{"after a renaming switch", &Last{Direction: sw, Step: Done, FrozeRenamed: true}, rev, true, ""},
		{"after a lock switch of an old coordinator", &Last{Direction: sw, Step: Done}, rev, false, ""},
		{"after a renaming reverse", &Last{Direction: rev, Step: Done, FrozeRenamed: true}, sw, true, ""},
		// failure 1 of issue 23: switch, reverse, rolled-back switch, switch.
		{"after a rolled-back switch that found the target renamed", &Last{Direction: sw, Step: RolledBack, FrozeRenamed: true, GainingRenamed: true}, sw, true, ""},
		{"after a rolled-back first switch", &Last{Direction: sw, Step: RolledBack, FrozeRenamed: true}, sw, false, ""},
		{"after a rolled-back reverse", &Last{Direction: rev, Step: RolledBack, FrozeRenamed: true, GainingRenamed: true}, rev, true, ""},
		{"switch after a done switch", &Last{Direction: sw, Step: Done, FrozeRenamed: true}, sw, false, "the last switch is done"},
		{"reverse after a rolled-back switch", &Last{Direction: sw, Step: RolledBack}, rev, false, "the last switch rolled back"},
		{"while one runs", &Last{Direction: sw, Step: Frozen}, sw, false, "a switch is in progress at step frozen"},
	} {
		got, err := GainingRenamed(tc.last, tc.dir)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.name)
			continue
		}
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.renamed, got, tc.name)
	}
}
