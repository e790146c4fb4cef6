package streamer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
)

// TestDumpOutlivesAStalledReader: a binlog reader held back by a slow target
// stops reading the dump, and the server's write to it waits. On a source
// whose net_write_timeout is 1 s, the dump must still deliver every event once
// the reader goes on after several seconds, not end in a dropped connection.
func TestDumpOutlivesAStalledReader(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		srv := sandboxtest.Start(t, sandbox.Options{Flavor: flavor, Args: []string{"--net-write-timeout=1"}})
		admin := sandboxtest.Open(t, srv, "")
		sandboxtest.Exec(t, admin, "CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY, v VARCHAR(200))")
		s, err := New(Config{SourceDSN: srv.DSN(""), Logger: zaptest.NewLogger(t)})
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		dbFlavor := dbconn.MariaDB
		if flavor == sandbox.MySQL {
			dbFlavor = dbconn.MySQL
		}
		pos, err := dbFlavor.Position(ctx, admin)
		require.NoError(t, err)
		start := gtidSet(t, pos)
		syncer, events, err := s.startBinlog(ctx, start, dbFlavor, newDumpWatch(start, dbFlavor == dbconn.MariaDB, s.log), s.log)
		require.NoError(t, err)
		defer syncer.Close()
		// Far more binlog than the syncer's event cache and the sockets' buffers
		// hold: the server's writes wait while nothing reads.
		for i := range 20 {
			sandboxtest.Exec(t, admin, "INSERT INTO d.t SELECT seq, REPEAT('x', 200) FROM (SELECT "+
				"a.n + 10 * b.n + 100 * c.n + 1000 * d.n + 10000 * "+fmt.Sprint(i)+" AS seq FROM "+digits("a")+", "+digits("b")+", "+
				digits("c")+", "+digits("d")+") s")
		}
		end, err := dbFlavor.Position(ctx, admin)
		require.NoError(t, err)
		time.Sleep(5 * time.Second) // five times the source's net_write_timeout
		r := newBinlogReader(events, "d", nil, start.Clone())
		for !r.pos.Contains(gtidSet(t, end)) {
			_, err := r.next(ctx)
			require.NoError(t, err, "the dump ended while its reader was held")
		}
	})
}

// digits is a derived table of the numbers 0 to 9, named as.
func digits(as string) string {
	return "(SELECT 0 n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL " +
		"SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) " + as
}
