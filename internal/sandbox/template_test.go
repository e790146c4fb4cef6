package sandbox

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A failed mariadb-install-db prints the server's errors, then a screen of
// generic advice: the errors are what the failure's message must keep.
func TestErrorLinesKeepsTheServersErrors(t *testing.T) {
	out := "Installing MariaDB/MySQL system tables in '/tmp/x/data' ...\n" +
		"2026-11-26 15:56:01 0 [ERROR] InnoDB: Cannot allocate memory for the buffer pool\n" +
		"2026-11-26 15:56:01 0 [ERROR] Aborting\n" +
		"\nInstallation of system tables failed!  Examine the logs in\n/tmp/x/data for more information.\n" +
		"\nThe problem could be conflicting information in an external\nmy.cnf files. You can ignore these by doing:\n"
	require.Equal(t, "2026-11-26 15:56:01 0 [ERROR] InnoDB: Cannot allocate memory for the buffer pool\n"+
		"2026-11-26 15:56:01 0 [ERROR] Aborting\n", errorLines(out, 20))
	require.Equal(t, "2026-11-26 15:56:01 0 [ERROR] InnoDB: Cannot allocate memory for the buffer pool\n", errorLines(out, 1))
	require.Empty(t, errorLines("all well\n", 20))
}
