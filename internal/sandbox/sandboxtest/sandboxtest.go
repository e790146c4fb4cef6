// Package sandboxtest gives tests a real throwaway server in one call: it fails the
// test with "run `make setup`" when no server is installed (never skips), prints the
// server's error log when the test fails, and removes the server at cleanup.
package sandboxtest

import (
	"context"
	"database/sql"
	"encoding/hex"
	"math/rand/v2"
	"testing"

	_ "github.com/go-sql-driver/mysql" // registers the "mysql" driver for Open

	"github.com/rowlift/rowlift/internal/sandbox"
)

// Flavors are the server flavors every test that starts servers runs on.
var Flavors = []sandbox.Flavor{sandbox.MariaDB, sandbox.MySQL}

// EachFlavor runs test once per flavor, as a subtest named for it
// (TestBinlogSettings/mysql), so a failure names the server it failed on. The
// flavors run side by side: their servers share nothing, and the test takes
// about as long as its slower half.
func EachFlavor(t *testing.T, test func(t *testing.T, flavor sandbox.Flavor)) {
	t.Helper()
	for _, flavor := range Flavors {
		t.Run(string(flavor), func(t *testing.T) {
			t.Parallel()
			test(t, flavor)
		})
	}
}

// Start starts a sandbox server for the test and removes it when the test ends.
func Start(t testing.TB, opts sandbox.Options) *sandbox.Server {
	t.Helper()
	s, err := sandbox.Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("start sandbox server: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("error log of server %s (port %d):\n%s", s.Dir, s.Port, s.ErrorLog())
		}
		if err := s.Remove(); err != nil {
			t.Errorf("remove sandbox server: %v", err)
		}
	})
	return s
}

// Open opens a connection pool to db on the server, closed when the test ends.
func Open(t testing.TB, s *sandbox.Server, db string) *sql.DB {
	t.Helper()
	conn, err := sql.Open("mysql", s.DSN(db))
	if err != nil {
		t.Fatalf("open %s: %v", s.Addr(), err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// OpenSocket is Open over the server's Unix socket, which a server that
// requires TLS on TCP (TLSFiles.ServerArgs) still takes without it.
func OpenSocket(t testing.TB, s *sandbox.Server, db string) *sql.DB {
	t.Helper()
	conn, err := sql.Open("mysql", "root@unix("+s.Socket+")/"+db)
	if err != nil {
		t.Fatalf("open %s: %v", s.Socket, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Exec runs statements in order on conn and fails the test on the first error.
func Exec(t testing.TB, conn *sql.DB, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		if _, err := conn.Exec(q); err != nil {
			t.Fatalf("exec %q: %v", q, err)
		}
	}
}

// HexLiteral writes v as a SQL hex literal, which a server stores byte for byte
// whatever the connection's character set.
func HexLiteral(v []byte) string {
	if len(v) == 0 {
		return "''"
	}
	return "X'" + hex.EncodeToString(v) + "'"
}

// EveryByte returns n deterministic pseudo-random bytes that begin with every
// byte value 0..255, for values that must survive a copy byte for byte.
func EveryByte(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	for i := 0; i < 256 && i < n; i++ {
		b[i] = byte(i)
	}
	return b
}
