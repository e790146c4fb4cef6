package state

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"main", true},
		{"shard-80", true},
		{"Shard_2", true},
		{"0", true},
		{strings.Repeat("a", 64), true},
		{"", false},
		{strings.Repeat("a", 65), false},
		{"a=b", false},
		{"a,b", false},
		{"a b", false},
		{" main", false},
		{"shard.1", false},
		{"main:1", false},
		{"ünï", false},
		{"a/b", false},
	} {
		werr, terr := CheckName(tc.name), CheckTargetName(tc.name)
		if tc.ok {
			require.NoError(t, werr, tc.name)
			require.NoError(t, terr, tc.name)
			continue
		}
		require.EqualError(t, werr, `workflow name "`+tc.name+`": use 1 to 64 letters, digits, '_' or '-'`)
		require.EqualError(t, terr, `target name "`+tc.name+`": use 1 to 64 letters, digits, '_' or '-', e.g. main or shard-80`)
	}
}
