package verify

import (
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/rowlift/rowlift/internal/dbconn"
)

// Digest sums up the rows of a key range so that two servers can tell
// whether they hold the same rows by exchanging 24 bytes instead of a hash
// per row: how many rows, and the XOR of the first 128 bits of every row's
// SHA-256 (the row hash of Plan). XOR does not depend on the order the
// server reads the rows in, and over SHA-256 it is as good as a random
// 128-bit value: two ranges that differ in any row have equal digests with
// probability 2^-128, whatever the difference (a plain XOR of CRC32s is
// linear, so swapping a column's values between two rows of equal length
// leaves it unchanged, and at 32 bits a table with millions of differing
// chunks would expect to miss one).
type Digest struct {
	Rows int64
	Sum  [16]byte
}

// String shows a digest for logs and verify's examples.
func (d Digest) String() string {
	return fmt.Sprintf("%d rows, %s", d.Rows, hex.EncodeToString(d.Sum[:]))
}

// DigestColumns is the select list that sums up the rows a query selects
// into a Digest, in the form the given flavor computes fastest; ScanDigest
// reads the row it returns. MySQL aggregates the 128 bits as one binary
// string (BIT_XOR of binary strings is bitwise over their bytes); MariaDB's
// BIT_XOR takes 64-bit integers only, so it sums the two halves apart.
func (p *Plan) DigestColumns(flavor dbconn.Flavor) string {
	h := p.selects[len(p.selects)-1]
	if flavor == dbconn.MySQL {
		return "COUNT(*), BIT_XOR(UNHEX(LEFT(" + h + ", 32)))"
	}
	return "COUNT(*), BIT_XOR(CAST(CONV(LEFT(" + h + ", 16), 16, 10) AS UNSIGNED)), " +
		"BIT_XOR(CAST(CONV(SUBSTRING(" + h + ", 17, 16), 16, 10) AS UNSIGNED))"
}

// DigestWidth is how many values the row of DigestColumns has for flavor.
func DigestWidth(flavor dbconn.Flavor) int {
	if flavor == dbconn.MySQL {
		return 2
	}
	return 3
}

// ScanDigest reads a Digest from the values of the row DigestColumns
// selected (as the driver returns them, text or bytes) on flavor.
func ScanDigest(flavor dbconn.Flavor, vals [][]byte) (Digest, error) {
	var d Digest
	if len(vals) != DigestWidth(flavor) {
		return d, fmt.Errorf("digest row has %d values, want %d", len(vals), DigestWidth(flavor))
	}
	n, err := strconv.ParseInt(string(vals[0]), 10, 64)
	if err != nil {
		return d, fmt.Errorf("digest row count %q: %w", vals[0], err)
	}
	d.Rows = n
	if n == 0 {
		return d, nil // the aggregate of no rows differs between flavors
	}
	if flavor == dbconn.MySQL {
		if len(vals[1]) != len(d.Sum) {
			return d, fmt.Errorf("digest sum has %d bytes, want %d", len(vals[1]), len(d.Sum))
		}
		copy(d.Sum[:], vals[1])
		return d, nil
	}
	for i, v := range vals[1:] {
		u, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			return d, fmt.Errorf("digest sum %q: %w", v, err)
		}
		binary.BigEndian.PutUint64(d.Sum[8*i:], u)
	}
	return d, nil
}

// QueryDigest runs query, a SELECT of DigestColumns over a key range, on
// conn (in the snapshot the digest is of) and reads the Digest it returns.
func QueryDigest(ctx context.Context, conn *sql.Conn, flavor dbconn.Flavor, query string) (Digest, error) {
	vals := make([][]byte, DigestWidth(flavor))
	dest := make([]any, len(vals))
	for i := range vals {
		dest[i] = &vals[i]
	}
	if err := conn.QueryRowContext(ctx, query).Scan(dest...); err != nil {
		return Digest{}, fmt.Errorf("sum the chunk's rows up: %w", err)
	}
	d, err := ScanDigest(flavor, vals)
	if err != nil {
		return d, fmt.Errorf("sum the chunk's rows up: %w", err)
	}
	return d, nil
}
