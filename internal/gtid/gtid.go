// Package gtid holds source positions as GTID sets of either server flavor, so
// the stream, the applier and the state compare and merge positions without
// knowing which server wrote them.
//
// The flavor is read from the text: a MySQL GTID is "uuid[:tag]:n" and always
// has a colon, a MariaDB one is "domain-server-seq" and never has one. The
// empty set has no flavor until something is added to it.
package gtid

import (
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Set is a position: the set of transactions a source has applied, a chunk's
// snapshot contains or a target has committed. The zero value is empty.
type Set struct {
	// set is nil while the set is empty and its flavor unknown.
	set mysql.GTIDSet
}

// flavorOf is the flavor a GTID or GTID set is written in (go-mysql's names).
func flavorOf(text string) string {
	if strings.Contains(text, ":") {
		return mysql.MySQLFlavor
	}
	return mysql.MariaDBFlavor
}

// Parse reads a GTID set in either flavor's syntax; "" is the empty set.
func Parse(text string) (*Set, error) {
	text = strings.TrimSpace(text)
	if text == "" {
		return &Set{}, nil
	}
	set, err := mysql.ParseGTIDSet(flavorOf(text), text)
	if err != nil {
		return nil, fmt.Errorf("GTID set %q: %w", text, err)
	}
	return &Set{set: set}, nil
}

// Flavor is go-mysql's flavor of the set ("mysql" or "mariadb"), or "" while
// the set is empty.
func (s *Set) Flavor() string {
	switch s.set.(type) {
	case *mysql.MysqlGTIDSet:
		return mysql.MySQLFlavor
	case *mysql.MariadbGTIDSet:
		return mysql.MariaDBFlavor
	}
	return ""
}

// IsEmpty reports whether the set holds no transaction.
func (s *Set) IsEmpty() bool { return s.set == nil || s.set.IsEmpty() }

// String is the set in its flavor's syntax, as the server prints it.
func (s *Set) String() string {
	if s.set == nil {
		return ""
	}
	return s.set.String()
}

// Clone returns an independent copy.
func (s *Set) Clone() *Set {
	if s.set == nil {
		return &Set{}
	}
	return &Set{set: s.set.Clone()}
}

// GoMySQL is the set as go-mysql's binlog syncer takes it, in the given flavor
// when the set is empty (an empty position starts at the oldest binlog).
func (s *Set) GoMySQL(flavor string) (mysql.GTIDSet, error) {
	if s.set != nil {
		if f := s.Flavor(); f != flavor {
			return nil, fmt.Errorf("position %s is a %s GTID set, the source is %s", s, f, flavor)
		}
		return s.set.Clone(), nil
	}
	return mysql.ParseGTIDSet(flavor, "")
}

// Contains reports whether every transaction in o is in s. Sets of different
// flavors contain nothing of each other, except the empty set.
func (s *Set) Contains(o *Set) bool {
	if o.IsEmpty() {
		return true
	}
	if s.set == nil {
		return false
	}
	return s.set.Contain(o.set)
}

// Add records one transaction, given as its GTID ("0-1-5" or "uuid:5"), or
// every transaction of a GTID set of the same flavor. On MariaDB the set holds
// the last transaction per domain, so adding a GTID moves its domain to it.
func (s *Set) Add(text string) error {
	text = strings.TrimSpace(text)
	if text == "" {
		return nil
	}
	if s.set == nil {
		set, err := mysql.ParseGTIDSet(flavorOf(text), "")
		if err != nil {
			return err
		}
		s.set = set
	}
	if f := flavorOf(text); f != s.Flavor() {
		return fmt.Errorf("GTID %q is %s, the position %s is %s", text, f, s, s.Flavor())
	}
	if err := s.set.Update(text); err != nil {
		return fmt.Errorf("add GTID %q: %w", text, err)
	}
	return nil
}

// Advance moves s to cover o as well: on MySQL the union of the two sets, on
// MariaDB the later position per replication domain (positions of one stream
// only move forward, so the later one covers everything the earlier one does).
func (s *Set) Advance(o *Set) error {
	if o.IsEmpty() {
		return nil
	}
	if s.IsEmpty() {
		s.set = o.set.Clone()
		return nil
	}
	switch dst := s.set.(type) {
	case *mysql.MariadbGTIDSet:
		src, ok := o.set.(*mysql.MariadbGTIDSet)
		if !ok {
			return fmt.Errorf("cannot merge %s position %s into MariaDB position %s", o.Flavor(), o, s)
		}
		for domain, g := range src.Sets {
			if cur, ok := dst.Sets[domain]; !ok || cur.SequenceNumber < g.SequenceNumber {
				dst.Sets[domain] = g.Clone()
			}
		}
		return nil
	default:
		if o.Flavor() != s.Flavor() {
			return fmt.Errorf("cannot merge %s position %s into %s position %s", o.Flavor(), o, s.Flavor(), s)
		}
		return s.set.Update(o.set.String())
	}
}

// Count is how many transactions the set holds, so that two positions of one
// stream read apart in time give its throughput: on MySQL the sum of the
// lengths of its intervals; on MariaDB the sum of each domain's sequence
// number, which grows by one per transaction of the domain whichever server
// wrote it, so the difference of two counts is the sum of the domains'
// progress even across a failover.
func (s *Set) Count() uint64 {
	var n uint64
	switch set := s.set.(type) {
	case *mysql.MysqlGTIDSet:
		for _, tags := range *set {
			for _, intervals := range tags {
				for _, i := range intervals {
					n += uint64(i.Stop - i.Start)
				}
			}
		}
	case *mysql.MariadbGTIDSet:
		for _, g := range set.Sets {
			n += g.SequenceNumber
		}
	}
	return n
}

// Merge returns the position that covers both a and b (see Advance), as text.
func Merge(a, b string) (string, error) {
	sa, err := Parse(a)
	if err != nil {
		return "", err
	}
	sb, err := Parse(b)
	if err != nil {
		return "", err
	}
	if err := sa.Advance(sb); err != nil {
		return "", err
	}
	return sa.String(), nil
}

// Covers reports whether the position a contains every transaction of b, both
// given as text.
func Covers(a, b string) (bool, error) {
	sa, err := Parse(a)
	if err != nil {
		return false, err
	}
	sb, err := Parse(b)
	if err != nil {
		return false, err
	}
	return sa.Contains(sb), nil
}
