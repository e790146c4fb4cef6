package sandbox

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDefaultRoot: $ROWLIFT_SANDBOX_ROOT wins; without it the root is a
// rowlift-sandbox folder on the memory tmpfs or in the temp dir.
func TestDefaultRoot(t *testing.T) {
	t.Setenv(RootEnv, "/srv/sandboxes")
	require.Equal(t, "/srv/sandboxes", DefaultRoot())
	t.Setenv(RootEnv, "")
	root := DefaultRoot()
	require.Contains(t, []string{filepath.Join(memoryRoot, "rowlift-sandbox"), DiskRoot()}, root)
	require.Equal(t, filepath.Join(os.TempDir(), "rowlift-sandbox"), DiskRoot())
}
