package gtid

import (
	"fmt"
	"sort"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Lack is what a source lacks of a position the target has applied: the
// transactions a failover that lost writes took with it. It is not a purge:
// a purged binlog still counts its transactions in the server's history.
type Lack struct {
	// Lost names the transactions, as exactly as the flavor's history tells.
	Lost string
	// Common is the last position of the target's that the source has, where
	// a rewound stream resumes; nil when the histories share no known point.
	Common *Set
}

// MariaDBLack compares a MariaDB position with a server's
// @@gtid_binlog_state, the last GTID it logged per domain and server id
// (kept across purges), and returns what the server lacks of the position
// (nil: nothing). In a domain, a position's GTID d-s-n is in the server's
// history when its state holds d-s-m with m >= n; with m < n the server has
// server s's transactions of domain d up to m and none of those after it up
// to n, which only the lost primary had.
func MariaDBLack(position *Set, binlogState string) (*Lack, error) {
	if position.IsEmpty() {
		return nil, nil
	}
	pos, ok := position.set.(*mysql.MariadbGTIDSet)
	if !ok {
		return nil, fmt.Errorf("position %s is not a MariaDB position", position)
	}
	has := map[[2]uint32]uint64{}
	for _, f := range strings.Split(binlogState, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		g, err := mysql.ParseMariadbGTID(f)
		if err != nil {
			return nil, fmt.Errorf("gtid_binlog_state %q: %w", binlogState, err)
		}
		k := [2]uint32{g.DomainID, g.ServerID}
		has[k] = max(has[k], g.SequenceNumber)
	}
	domains := make([]uint32, 0, len(pos.Sets))
	for d := range pos.Sets {
		domains = append(domains, d)
	}
	sort.Slice(domains, func(i, j int) bool { return domains[i] < domains[j] })
	var lost, common []string
	shared := true
	for _, d := range domains {
		g := pos.Sets[d]
		m, seen := has[[2]uint32{d, g.ServerID}]
		switch {
		case seen && m >= g.SequenceNumber:
			common = append(common, g.String())
		case seen && m+1 == g.SequenceNumber:
			lost = append(lost, g.String())
			common = append(common, fmt.Sprintf("%d-%d-%d", d, g.ServerID, m))
		case seen:
			lost = append(lost, fmt.Sprintf("%d-%d-%d to %s", d, g.ServerID, m+1, g))
			common = append(common, fmt.Sprintf("%d-%d-%d", d, g.ServerID, m))
		default:
			lost = append(lost, fmt.Sprintf("%s and every earlier transaction of server %d in domain %d", g, g.ServerID, d))
			shared = false
		}
	}
	if len(lost) == 0 {
		return nil, nil
	}
	l := &Lack{Lost: strings.Join(lost, ", ")}
	if shared {
		c, err := Parse(strings.Join(common, ","))
		if err != nil {
			return nil, err
		}
		l.Common = c
	}
	return l, nil
}
