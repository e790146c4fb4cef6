package verify

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/schema"
)

// digestTable holds a value of each kind of column the row hash treats
// apart (numbers, temporals, bounded strings, TEXT, BLOB, NULL), the same on
// every server.
var digestTable = []string{
	"CREATE DATABASE d",
	`CREATE TABLE d.t (id INT PRIMARY KEY, v VARCHAR(20), b VARBINARY(8), txt TEXT, bl BLOB, dec1 DECIMAL(10,3), f DOUBLE,
	 dt DATETIME(3), n INT NULL) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
	`INSERT INTO d.t VALUES (1, 'aaaaaa', 'x', 'text', X'00FF', 1.5, 0.1, '2024-01-02 03:04:05.678', NULL),
	 (2, 'bbbbbb', NULL, NULL, NULL, -2.25, 1e300, '1999-12-31 23:59:59.000', 7),
	 (3, 'cccccc', '', '', '', 0, -0.5, NULL, 0), (4, NULL, 'y', 'naïve', X'01', NULL, NULL, '2000-01-01 00:00:00', 1),
	 (5, 'é', 'z', 'z', X'02', 99.999, 2.5, '2038-01-19 03:14:07.5', 2)`,
}

// digestOf is the Digest of the rows of table with lo < id <= hi on db.
func digestOf(t *testing.T, db *sql.DB, flavor dbconn.Flavor, width int, p *Plan, table string, lo, hi int) Digest {
	t.Helper()
	conn, err := db.Conn(t.Context())
	require.NoError(t, err)
	defer conn.Close()
	d, err := QueryDigest(t.Context(), conn, flavor, width, fmt.Sprintf("SELECT %s FROM %s WHERE id > %d AND id <= %d", p.DigestColumns(flavor, width), table, lo, hi))
	require.NoError(t, err)
	return d
}

// digestByRows is the same digest computed here from the rows' hashes.
func digestByRows(t *testing.T, db *sql.DB, width int, p *Plan, lo, hi int) Digest {
	t.Helper()
	rows, err := db.Query("SELECT "+p.selects[len(p.selects)-1]+" FROM d.t WHERE id > ? AND id <= ?", lo, hi)
	require.NoError(t, err)
	defer rows.Close()
	d := Digest{Bytes: width}
	for rows.Next() {
		var h string
		require.NoError(t, rows.Scan(&h))
		sum, err := hex.DecodeString(h)
		require.NoError(t, err)
		require.Len(t, sum, sha256.Size)
		for i := range width {
			d.Sum[i] ^= sum[i]
		}
		d.Rows++
	}
	require.NoError(t, rows.Err())
	return d
}

// TestDigestIsTheSameOnBothFlavors: each flavor sums a range up in its own
// SQL (MySQL one binary BIT_XOR, MariaDB one 64-bit one per 8 bytes), and
// both give the XOR of the first 8 or 16 bytes of the rows' SHA-256, so
// sources and targets of either flavor compare digests of either width; an
// empty range is the zero digest on both.
func TestDigestIsTheSameOnBothFlavors(t *testing.T) {
	t.Parallel()
	dbs := map[dbconn.Flavor]*sql.DB{}
	for _, f := range []sandbox.Flavor{sandbox.MariaDB, sandbox.MySQL} {
		db := sandboxtest.Open(t, sandboxtest.Start(t, sandbox.Options{Flavor: f}), "")
		sandboxtest.Exec(t, db, digestTable...)
		dbs[dbconn.Flavor(f)] = db
	}
	for _, width := range []int{8, 16} {
		for _, r := range [][2]int{{0, 5}, {1, 3}, {4, 4}, {0, 1}} {
			var got []Digest
			for flavor, db := range dbs {
				tbl, err := schema.Load(context.Background(), db, "d", "t")
				require.NoError(t, err)
				p, err := NewPlan(context.Background(), db, tbl, nil, false)
				require.NoError(t, err)
				d := digestOf(t, db, flavor, width, p, "d.t", r[0], r[1])
				require.Equal(t, digestByRows(t, db, width, p, r[0], r[1]), d, "%s, %d bytes, rows %d < id <= %d", flavor, width, r[0], r[1])
				got = append(got, d)
			}
			require.Equal(t, got[0], got[1], "%d bytes, rows %d < id <= %d", width, r[0], r[1])
			require.EqualValues(t, r[1]-r[0], got[0].Rows)
		}
	}
}

// TestDigestSeesWhatCRC32Misses: swapping a column's values between two rows
// of the same shape leaves a BIT_XOR of the rows' CRC32 unchanged (CRC is
// linear), which is the chunk checksum other tools use; the digest changes.
func TestDigestSeesWhatCRC32Misses(t *testing.T) {
	t.Parallel()
	sandboxtest.EachFlavor(t, func(t *testing.T, f sandbox.Flavor) {
		db := sandboxtest.Open(t, sandboxtest.Start(t, sandbox.Options{Flavor: f}), "")
		sandboxtest.Exec(t, db, "CREATE DATABASE d", "CREATE TABLE d.s (id INT PRIMARY KEY, v CHAR(6), n INT)",
			"INSERT INTO d.s VALUES (1, 'aaaaaa', 5), (2, 'bbbbbb', 5), (3, 'cccccc', 6)")
		flavor := dbconn.Flavor(f)
		tbl, err := schema.Load(context.Background(), db, "d", "s")
		require.NoError(t, err)
		p, err := NewPlan(context.Background(), db, tbl, nil, false)
		require.NoError(t, err)
		crc := func() (n int64, x uint64) {
			require.NoError(t, db.QueryRow("SELECT COUNT(*), BIT_XOR(CRC32(CONCAT_WS(',', id, v, n))) FROM d.s").Scan(&n, &x))
			return n, x
		}
		n, x := crc()
		width := DigestBytes(flavor)
		before := digestOf(t, db, flavor, width, p, "d.s", 0, 3)
		sandboxtest.Exec(t, db, "UPDATE d.s SET v = IF(id = 1, 'bbbbbb', 'aaaaaa') WHERE id IN (1, 2)")
		n2, x2 := crc()
		require.Equal(t, [2]uint64{uint64(n), x}, [2]uint64{uint64(n2), x2}, "the swap must collide under BIT_XOR(CRC32)")
		require.NotEqual(t, before, digestOf(t, db, flavor, width, p, "d.s", 0, 3))
	})
}
