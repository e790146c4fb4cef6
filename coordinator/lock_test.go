package coordinator

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
)

// TestCutoverLockOfALongWorkflowName: the cutover lock of a workflow with the
// longest name allowed is taken, excludes a second taker, and is apart from
// the lock of another long name with the same start, on either flavor
// (MySQL refuses lock names over 64 characters).
func TestCutoverLockOfALongWorkflowName(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		srv := sandboxtest.Start(t, sandbox.Options{Flavor: flavor})
		db, cfg, err := dbconn.Open(srv.DSN(""), dbconn.Target)
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		tgt := &target{name: "main", db: db, cfg: cfg}
		ctx := context.Background()
		long := "rowlift.cutover." + strings.Repeat("w", 64)
		unlock, err := tgt.lock(ctx, long, 0)
		require.NoError(t, err)
		_, err = tgt.lock(ctx, long, 0)
		require.Equal(t, codes.Aborted, status.Code(err), "%v", err)
		require.Contains(t, err.Error(), "another coordinator is running "+long+" on target main")
		other, err := tgt.lock(ctx, long[:len(long)-1]+"x", 0)
		require.NoError(t, err, "a name with the same start is another lock")
		other()
		unlock()
		again, err := tgt.lock(ctx, long, 0)
		require.NoError(t, err, "unlock released it")
		again()
	})
}
