package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
)

// rowHistory is a wrong row's story, for a failure to explain itself: every
// row event of table in the source's binlog whose image holds the row's key
// values (key columns and their values, in order), each under its GTID, as
// the server's binlog tool decodes them. A wrong row on a target is then read
// against the transactions that wrote it and the target's position.
func rowHistory(t *testing.T, srv *sandbox.Server, db *sql.DB, table string, keyCols, keyVals []string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ords := make([]int, len(keyCols))
	for i, c := range keyCols {
		if err := db.QueryRowContext(ctx, "SELECT ORDINAL_POSITION FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'race' "+
			"AND TABLE_NAME = ? AND COLUMN_NAME = ?", table, c).Scan(&ords[i]); err != nil {
			return fmt.Sprintf("(no history: column %s of %s: %v)", c, table, err)
		}
	}
	logs := binaryLogs(t, db)
	host, port, _ := strings.Cut(srv.Addr(), ":")
	args := append([]string{"--read-from-remote-server", "--host=" + host, "--port=" + port, "--user=root",
		"--base64-output=decode-rows", "--verbose"}, logs...)
	cmd, err := srv.Tool(ctx, sandbox.BinlogDump, args...)
	if err != nil {
		return fmt.Sprintf("(no history: %v)", err)
	}
	out, err := cmd.Output()
	if err != nil {
		return fmt.Sprintf("(no history: %s: %v)", cmd, err)
	}
	return matchRowEvents(string(out), table, ords, keyVals)
}

var (
	gtidLine  = regexp.MustCompile(`^(?:#.*\bGTID (\S+)|SET @@SESSION\.GTID_NEXT= '([^']+)')`)
	eventLine = regexp.MustCompile("^### (INSERT INTO|UPDATE|DELETE FROM) `[^`]+`\\.`([^`]+)`")
)

// matchRowEvents picks from a decoded binlog the row events of table whose
// before or after image holds every key value at its column's position.
func matchRowEvents(decoded, table string, ords []int, keyVals []string) string {
	var b strings.Builder
	gtid := "?"
	var block []string
	flush := func() {
		if len(block) == 0 {
			return
		}
		if m := eventLine.FindStringSubmatch(block[0]); m != nil && m[2] == table && imageHolds(block, ords, keyVals) {
			fmt.Fprintf(&b, "GTID %s:\n  %s\n", gtid, strings.Join(block, "\n  "))
		}
		block = nil
	}
	for _, line := range strings.Split(decoded, "\n") {
		if m := gtidLine.FindStringSubmatch(line); m != nil {
			flush()
			gtid = m[1] + m[2]
			continue
		}
		if !strings.HasPrefix(line, "### ") {
			flush()
			continue
		}
		if eventLine.MatchString(line) {
			flush()
		}
		block = append(block, line)
	}
	flush()
	if b.Len() == 0 {
		return "(no row event of the key in the source's binlog)"
	}
	return b.String()
}

// imageHolds reports whether one image (WHERE or SET part) of a decoded row
// event holds every key value at its column.
func imageHolds(block []string, ords []int, keyVals []string) bool {
	var images [][]string
	for _, line := range block[1:] {
		if s := strings.TrimSpace(strings.TrimPrefix(line, "###")); s == "WHERE" || s == "SET" {
			images = append(images, nil)
			continue
		}
		if len(images) > 0 {
			images[len(images)-1] = append(images[len(images)-1], strings.TrimSpace(strings.TrimPrefix(line, "###")))
		}
	}
	for _, img := range images {
		all := true
		for i, ord := range ords {
			prefix := fmt.Sprintf("@%d=", ord)
			found := false
			for _, v := range img {
				if rest, ok := strings.CutPrefix(v, prefix); ok {
					rest, _, _ = strings.Cut(rest, " /*")
					found = rest == keyVals[i] || rest == "'"+keyVals[i]+"'"
					break
				}
			}
			all = all && found
		}
		if all {
			return true
		}
	}
	return false
}

func TestMatchRowEvents(t *testing.T) {
	decoded := strings.Join([]string{
		"#261126 18:00:00 server id 1  end_log_pos 100 CRC32 0x0 	GTID 0-1-7 trans",
		"### UPDATE `race`.`ints`",
		"### WHERE",
		"###   @1=382 /* INT meta=0 nullable=0 is_null=0 */",
		"###   @2=191 /* INT meta=0 nullable=1 is_null=0 */",
		"### SET",
		"###   @1=382 /* INT meta=0 nullable=0 is_null=0 */",
		"###   @2=NULL /* INT meta=0 nullable=1 is_null=1 */",
		"### UPDATE `race`.`ints`",
		"### WHERE",
		"###   @1=3820 /* INT meta=0 nullable=0 is_null=0 */",
		"### SET",
		"###   @1=3820 /* INT meta=0 nullable=0 is_null=0 */",
		"# at 200",
		"#261126 18:00:01 server id 1  end_log_pos 300 CRC32 0x0 	GTID 0-1-8 trans",
		"### DELETE FROM `race`.`composite`",
		"### WHERE",
		"###   @1='eu' /* VARSTRING(32) meta=32 nullable=0 is_null=0 */",
		"###   @2=382 /* INT meta=0 nullable=0 is_null=0 */",
		"### INSERT INTO `race`.`ints`",
		"### SET",
		"###   @1=5 /* INT meta=0 nullable=0 is_null=0 */",
		"###   @2=382 /* INT meta=0 nullable=1 is_null=0 */",
	}, "\n")
	got := matchRowEvents(decoded, "ints", []int{1}, []string{"382"})
	require.Contains(t, got, "GTID 0-1-7:")
	require.Contains(t, got, "@2=NULL")
	require.NotContains(t, got, "3820", "another key's event")
	require.NotContains(t, got, "0-1-8", "382 as another column's value, and another table's key")
	require.Contains(t, matchRowEvents(decoded, "composite", []int{1, 2}, []string{"eu", "382"}), "GTID 0-1-8:")
	require.Equal(t, "(no row event of the key in the source's binlog)", matchRowEvents(decoded, "ints", []int{1}, []string{"9"}))
}
