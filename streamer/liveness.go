package streamer

import (
	"fmt"
	"strings"
	"time"

	"github.com/rowlift/rowlift/internal/gtid"
)

// dumpLiveness decides, with no I/O, whether a binlog dump connection is
// still worth waiting for. It keeps one invariant: a dump is declared dead
// only on evidence that the server stopped serving it, never because the
// server is slow. The evidence it accepts:
//
//   - the dump thread is gone from the source's processlist while the
//     connection still looks open (a cut connection: a network device or the
//     server dropped it without the client hearing);
//   - once the server has shown that it sends heartbeats on this dump (a
//     heartbeat or a transaction arrived), nothing at all arrived for
//     misses heartbeat periods while the client was waiting to read.
//
// Before that, while the server locates the start GTID (it reads the binlog
// file from its start; MariaDB sends nothing during that scan, MySQL sends
// heartbeats), silence alone proves nothing: a slow server and a dead one
// look the same on the wire, and only the processlist or the TCP connection
// (keepalive) tells them apart. Time during which the client was not reading
// (its consumer was busy) is never the server's silence.
type dumpLiveness struct {
	period time.Duration
	misses int
	// heartbeatLocates says a heartbeat means the start is located: MariaDB
	// sends heartbeats only once it waits at the end of the binlog, MySQL also
	// while it skips the transactions before the start.
	heartbeatLocates bool

	armed   bool // a heartbeat or a transaction arrived
	located bool // the server is past the start position
	gone    bool // the processlist no longer lists the dump thread
	// waitingSince is when the client's outstanding read began; zero when no
	// read is outstanding.
	waitingSince time.Time
	connID       uint64
}

// dumpVerdict is what to do about the dump now.
type dumpVerdict struct {
	// dead is why the dump must be reopened; empty while it is worth waiting for.
	dead string
	// locating is true while the server has not reached the start position.
	locating bool
}

func newDumpLiveness(period time.Duration, misses int, heartbeatLocates bool) *dumpLiveness {
	return &dumpLiveness{period: period, misses: misses, heartbeatLocates: heartbeatLocates}
}

// connected records the dump connection's ID, the one the processlist shows.
func (l *dumpLiveness) connected(id uint64) { l.connID = id }

// heartbeat records a heartbeat event from the server.
func (l *dumpLiveness) heartbeat() {
	l.armed = true
	if l.heartbeatLocates {
		l.located = true
	}
}

// transaction records the first event of a transaction: the server is past
// the start position and streams.
func (l *dumpLiveness) transaction() { l.armed, l.located = true, true }

// processlist records what the source's processlist says of the dump's
// connection: whether it is listed and, if so, its state. The state a dump
// thread has once it has sent everything (both flavors say "has sent all
// binlog to") also means the start is located.
func (l *dumpLiveness) processlist(listed bool, state string) {
	if !listed {
		l.gone = true
		return
	}
	if sentAll(state) {
		l.located = true
	}
}

// reading records whether the client waits on a read of the dump connection,
// and since when (the start of the outstanding read); a read that returned
// bytes ends the wait.
func (l *dumpLiveness) reading(since time.Time) { l.waitingSince = since }

// verdict says, at now, whether the dump is dead and whether it still locates.
func (l *dumpLiveness) verdict(now time.Time) dumpVerdict {
	v := dumpVerdict{locating: !l.located}
	switch {
	case l.gone && l.connID != 0:
		v.dead = fmt.Sprintf("the source's binlog dump thread (connection %d) is gone from its processlist while the connection "+
			"still looks open: the connection was cut on the way (a firewall or proxy dropped it) or the dump was killed; "+
			"the stream reopens by itself; if this repeats, check what sits between the streamer and the source", l.connID)
	case l.armed && !l.waitingSince.IsZero() && now.Sub(l.waitingSince) >= l.window():
		v.dead = fmt.Sprintf("the source sent nothing on the binlog dump, not even a heartbeat, for %s (%d heartbeat periods of %s): "+
			"the server or the network to it is not responding; the stream reopens by itself once the server answers "+
			"(check the source server's health and the network to it)",
			now.Sub(l.waitingSince).Truncate(time.Second), l.misses, l.period)
	}
	return v
}

// window is how long an armed dump may stay silent.
func (l *dumpLiveness) window() time.Duration { return time.Duration(l.misses) * l.period }

// sentAll reports a dump thread state that says it has sent the whole binlog
// and waits for more: MariaDB's "Master has sent all binlog to slave; waiting
// for more updates", MySQL's "Source has sent all binlog to replica; ...".
func sentAll(state string) bool {
	return strings.Contains(strings.ToLower(state), "has sent all binlog to")
}

// beforeStart reports whether a binlog file whose header says info (the Info
// of its Gtid_list event on MariaDB, "[0-1-5,1-2-9]", or of its
// Previous_gtids event on MySQL, "uuid:1-5") begins at or before start: the
// server looks for start in the newest such file, as MariaDB's
// gtid_find_binlog_file and MySQL's find_first_log_not_in_gtid_set do.
func beforeStart(info string, start *gtid.Set) (bool, error) {
	text := strings.NewReplacer("[", "", "]", "", "\n", "", " ", "").Replace(info)
	before, err := gtid.Parse(text)
	if err != nil {
		return false, fmt.Errorf("binlog header %q: %w", info, err)
	}
	return start.Contains(before), nil
}
