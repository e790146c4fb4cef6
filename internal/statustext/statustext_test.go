package statustext

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBytes(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{1536, "1.5 KiB"},
		{1280, "1.3 KiB"}, // 1.25: half up, as JavaScript's toFixed
		{87_136_870, "83.1 MiB"},
		{211_182_387, "201.4 MiB"},
		{1<<30 - 1, "1.0 GiB"},
		{1<<20 - 52, "1023.9 KiB"},
		{5 << 40, "5.0 TiB"},
		{math.MaxInt64, "8.0 EiB"},
	} {
		require.Equal(t, c.want, Bytes(c.n), "%d", c.n)
	}
}
