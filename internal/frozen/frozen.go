// Package frozen names the tables a cutover renames out of the way.
package frozen

import "fmt"

// Name is the name a cutover renames table to while it is frozen.
func Name(table string) (string, error) {
	n := "_" + table + "_frozen"
	if len(n) > 64 {
		return "", fmt.Errorf("table %s: its frozen name %s is longer than 64 characters; switch with --freeze lock instead", table, n)
	}
	return n, nil
}
