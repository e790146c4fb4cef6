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
// whether they hold the same rows by exchanging a few bytes instead of a
// hash per row: how many rows, and the XOR of the first Bytes bytes (8 or
// 16) of every row's SHA-256 (the row hash of Plan). XOR does not depend on
// the order the server reads the rows in, and over SHA-256 it is as good as
// a random value of that width: two ranges that differ in any row have
// equal digests with probability 2^-64 or 2^-128, whatever the difference.
// A plain XOR of CRC32s is not: CRC is linear, so swapping a column's values
// between two rows of the same shape leaves it unchanged, and at 32 bits a
// table with millions of differing chunks would expect to miss one.
type Digest struct {
	Rows  int64
	Bytes int // of Sum that count: DigestBytes
	Sum   [16]byte
}

// String shows a digest for logs.
func (d Digest) String() string {
	return fmt.Sprintf("%d rows, %s", d.Rows, hex.EncodeToString(d.Sum[:d.Bytes]))
}

// DigestBytes is the width of the digests a source of flavor computes. A
// MySQL server XORs a 16-byte binary string in one aggregate as fast as 8
// bytes; MariaDB's BIT_XOR takes 64-bit integers only, and a second half
// costs it a second SHA-256 and hex conversion of every row (1.8 times the
// work, which CONV dominates), so a MariaDB source sums up 64 bits: a
// differing chunk then goes unseen with probability 2^-64 (5.4e-20), so a
// table of 10^5 chunks that all differ would be missed with 5e-15.
func DigestBytes(flavor dbconn.Flavor) int {
	if flavor == dbconn.MySQL {
		return 16
	}
	return 8
}

// DigestColumns is the select list that sums up the rows a query selects
// into a Digest of width bytes (8 or 16), in the form the given flavor
// computes fastest; ScanDigest reads the row it returns. MySQL aggregates
// the bytes as one binary string (BIT_XOR of binary strings is bitwise over
// their bytes); MariaDB's BIT_XOR takes 64-bit integers, one per 8 bytes.
// CAST AS UNSIGNED keeps CONV's result a number whatever the connection's
// character set (a binary CONV would make BIT_XOR a binary aggregate).
func (p *Plan) DigestColumns(flavor dbconn.Flavor, width int) string {
	h := p.selects[len(p.selects)-1]
	if flavor == dbconn.MySQL {
		return "COUNT(*), BIT_XOR(UNHEX(LEFT(" + h + ", " + strconv.Itoa(2*width) + ")))"
	}
	cols := "COUNT(*)"
	for i := 0; i < width; i += 8 {
		cols += ", BIT_XOR(CAST(CONV(SUBSTRING(" + h + ", " + strconv.Itoa(2*i+1) + ", 16), 16, 10) AS UNSIGNED))"
	}
	return cols
}

// digestWidth is how many values the row of DigestColumns has.
func digestWidth(flavor dbconn.Flavor, width int) int {
	if flavor == dbconn.MySQL {
		return 2
	}
	return 1 + width/8
}

// ScanDigest reads a Digest of width bytes from the values of the row
// DigestColumns selected on flavor (as the driver returns them).
func ScanDigest(flavor dbconn.Flavor, width int, vals [][]byte) (Digest, error) {
	d := Digest{Bytes: width}
	if width != 8 && width != 16 {
		return d, fmt.Errorf("digest of %d bytes, want 8 or 16", width)
	}
	if len(vals) != digestWidth(flavor, width) {
		return d, fmt.Errorf("digest row has %d values, want %d", len(vals), digestWidth(flavor, width))
	}
	n, err := strconv.ParseInt(string(vals[0]), 10, 64)
	if err != nil {
		return d, fmt.Errorf("digest row count %q: %w", vals[0], err)
	}
	d.Rows = n
	if n == 0 {
		return d, nil // MySQL's aggregate of no rows is a longer string of zeros
	}
	if flavor == dbconn.MySQL {
		if len(vals[1]) != width {
			return d, fmt.Errorf("digest sum has %d bytes, want %d", len(vals[1]), width)
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

// QueryDigest runs query, a SELECT of DigestColumns of width bytes over a
// key range, on conn (in the snapshot the digest is of) and reads the Digest
// it returns.
func QueryDigest(ctx context.Context, conn *sql.Conn, flavor dbconn.Flavor, width int, query string) (Digest, error) {
	vals := make([][]byte, digestWidth(flavor, width))
	dest := make([]any, len(vals))
	for i := range vals {
		dest[i] = &vals[i]
	}
	if err := conn.QueryRowContext(ctx, query).Scan(dest...); err != nil {
		return Digest{}, fmt.Errorf("sum the chunk's rows up: %w", err)
	}
	d, err := ScanDigest(flavor, width, vals)
	if err != nil {
		return d, fmt.Errorf("sum the chunk's rows up: %w", err)
	}
	return d, nil
}
