package testhook

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	c, err := parse("chunk_read=0-30ms, chunk_apply=1ms-2ms,slow_target=50-150ms,unsafe_fence=1,seed=7")
	require.NoError(t, err)
	require.Equal(t, [2]time.Duration{0, 30 * time.Millisecond}, c.delays[ChunkRead])
	require.Equal(t, [2]time.Duration{time.Millisecond, 2 * time.Millisecond}, c.delays[ChunkApply])
	require.Equal(t, [2]time.Duration{50 * time.Millisecond, 150 * time.Millisecond}, c.delays[SlowTarget])
	require.True(t, c.unsafe)

	off, err := parse("")
	require.NoError(t, err)
	require.Empty(t, off.delays)
	require.False(t, off.unsafe)

	for _, bad := range []string{"chunk_read", "chunk_read=30ms-1ms", "chunk_read=x", "nope=1", "seed=x"} {
		_, err := parse(bad)
		require.Error(t, err, bad)
	}
}
