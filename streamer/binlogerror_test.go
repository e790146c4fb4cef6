package streamer

import (
	"errors"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestBinlogErrorTellsPurgedFromTorn: error 1236 means a purged binlog or a
// binlog file a crash left torn; the operator's way out differs, so the
// messages must too.
func TestBinlogErrorTellsPurgedFromTorn(t *testing.T) {
	pos, _ := mysql.ParseMariadbGTIDSet("0-1-353")
	for _, tc := range []struct{ server, want, not string }{
		{"Could not find GTID state requested by slave in any binlog files. Probably the slave state is too old and required binlog files have been purged.",
			"it was purged", "torn"},
		{"binlog truncated in the middle of event; consider out of disk space on master; the first event '.' at 0, the last event read from 'binlog.000001' at 389091",
			"ends in a torn event", "purged before"},
	} {
		err := binlogError(&mysql.MyError{Code: mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG, Message: tc.server}, pos)
		require.Equal(t, codes.FailedPrecondition, status.Code(err))
		require.Contains(t, err.Error(), tc.want)
		require.Contains(t, err.Error(), "0-1-353")
		require.NotContains(t, err.Error(), tc.not)
	}
	require.Equal(t, codes.Unavailable, status.Code(binlogError(errors.New("connection reset"), pos)))
}
