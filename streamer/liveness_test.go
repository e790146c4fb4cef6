package streamer

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/gtid"
)

// livenessStep is one observation of a dump, as the watch feeds them.
type livenessStep byte

const (
	stepHeartbeat    livenessStep = 'h' // a heartbeat event arrived
	stepTransaction  livenessStep = 'x' // a transaction's first event arrived
	stepListed       livenessStep = 'l' // the processlist lists the dump, sending
	stepListedAtEnd  livenessStep = 'e' // the processlist lists the dump, waiting at the end
	stepGone         livenessStep = 'g' // the processlist no longer lists the dump
	stepReadStarts   livenessStep = 'r' // the client starts waiting on a read
	stepReadReturns  livenessStep = 'b' // a read returned bytes
	stepPeriod       livenessStep = 'p' // one heartbeat period passes
	stepWindowPasses livenessStep = 'w' // the whole silence window passes
)

var livenessSteps = []livenessStep{stepHeartbeat, stepTransaction, stepListed, stepListedAtEnd, stepGone, stepReadStarts,
	stepReadReturns, stepPeriod, stepWindowPasses}

const (
	testPeriod = time.Second
	testMisses = 5
)

// runLiveness feeds steps to a fresh dumpLiveness and returns its verdict
// after the last one.
func runLiveness(steps []livenessStep, heartbeatLocates bool) dumpVerdict {
	l := newDumpLiveness(testPeriod, testMisses, heartbeatLocates)
	l.connected(42)
	now := time.Unix(1000, 0)
	var since time.Time
	for _, s := range steps {
		switch s {
		case stepHeartbeat:
			l.heartbeat()
		case stepTransaction:
			l.transaction()
		case stepListed:
			l.processlist(true, "Sending binlog event to slave")
		case stepListedAtEnd:
			l.processlist(true, "Source has sent all binlog to replica; waiting for more updates")
		case stepGone:
			l.processlist(false, "")
		case stepReadStarts:
			if since.IsZero() {
				since = now
			}
			l.reading(since)
		case stepReadReturns:
			since = time.Time{}
			l.reading(since)
		case stepPeriod:
			now = now.Add(testPeriod)
		case stepWindowPasses:
			now = now.Add(testMisses * testPeriod)
		}
	}
	return l.verdict(now)
}

// modelVerdict is the rule read off the whole history at once: dead when the
// processlist said the dump is gone, or when the server had shown it sends
// heartbeats and the read outstanding at the end has waited a whole window.
func modelVerdict(steps []livenessStep, heartbeatLocates bool) (dead bool, locating bool) {
	var gone, armed, located bool
	c := newReadClock()
	for _, s := range steps {
		if c.step(s) {
			continue
		}
		switch s {
		case stepHeartbeat:
			armed = true
			located = located || heartbeatLocates
		case stepTransaction:
			armed, located = true, true
		case stepListedAtEnd:
			located = true
		case stepGone:
			gone = true
		}
	}
	silent := c.waitStart >= 0 && c.elapsed-c.waitStart >= testMisses*testPeriod
	return gone || (armed && silent), !located
}

// TestDumpLivenessExhaustive checks every sequence of up to six observations,
// for both flavors' heartbeat behaviour, against the rule read off the whole
// history: a dump is dead only when the processlist lost it or when it went
// silent for a window after showing it sends heartbeats.
func TestDumpLivenessExhaustive(t *testing.T) {
	checked := 0
	var walk func(prefix []livenessStep)
	walk = func(prefix []livenessStep) {
		for _, heartbeatLocates := range []bool{false, true} {
			v := runLiveness(prefix, heartbeatLocates)
			dead, locating := modelVerdict(prefix, heartbeatLocates)
			if (v.dead != "") != dead || v.locating != locating {
				t.Fatalf("steps %q (heartbeat locates: %v): verdict %+v, want dead %v locating %v", prefix, heartbeatLocates, v, dead, locating)
			}
			checked++
		}
		if len(prefix) == 6 {
			return
		}
		for _, s := range livenessSteps {
			walk(append(prefix[:len(prefix):len(prefix)], s))
		}
	}
	walk(nil)
	t.Logf("%d sequences checked", checked)
}

// TestDumpLivenessCases are the situations the rule exists for, by name.
func TestDumpLivenessCases(t *testing.T) {
	for _, tc := range []struct {
		name             string
		steps            string
		heartbeatLocates bool
		dead             string // substring of the reason; empty: alive
		locating         bool
	}{
		{name: "MariaDB scans a large binlog for minutes, sending nothing", steps: "rlwwwwwwwwwwwwl", heartbeatLocates: true, locating: true},
		{name: "MySQL stops answering mid-scan after sending heartbeats", steps: "rbhrpbhrpbhrw", locating: true, dead: "not even a heartbeat"},
		{name: "MySQL heartbeats during the scan keep it alive", steps: "rbhrpbhrpbhrp", locating: true},
		{name: "MariaDB reaches the end: first heartbeat", steps: "rwwbhrp", heartbeatLocates: true},
		{name: "idle stream with heartbeats", steps: "rbxrpbhrpbhrp"},
		{name: "server stopped after the first event", steps: "rbxrpbhrw", dead: "not even a heartbeat"},
		{name: "consumer busy, no read outstanding", steps: "rbxwwwww"},
		{name: "cut connection before the first event", steps: "rlwwg", locating: true, dead: "gone from its processlist"},
		{name: "cut connection while streaming", steps: "rbxg", dead: "gone from its processlist"},
		{name: "dump waiting at the end per processlist", steps: "rwe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := runLiveness([]livenessStep(tc.steps), tc.heartbeatLocates)
			require.Equal(t, tc.locating, v.locating)
			if tc.dead == "" {
				require.Empty(t, v.dead)
				return
			}
			require.Contains(t, v.dead, tc.dead)
			require.Contains(t, v.dead, "reopens by itself")
		})
	}
}

// TestDumpLivenessUnknownConnection: a processlist read before the
// connection's ID is known cannot say the dump is gone.
func TestDumpLivenessUnknownConnection(t *testing.T) {
	l := newDumpLiveness(testPeriod, testMisses, true)
	l.processlist(false, "")
	require.Empty(t, l.verdict(time.Unix(1000, 0)).dead)
}

// fixedReadTimeout is the rule the streamer had: any read waiting 10 s ends
// the dump. It is here to show that the scenario the liveness rule exists for
// breaks it.
func fixedReadTimeout(steps []livenessStep) bool {
	c := newReadClock()
	for _, s := range steps {
		c.step(s)
	}
	return c.waitStart >= 0 && c.elapsed-c.waitStart >= 10*time.Second
}

// readClock is the models' view of time and of the read outstanding: elapsed
// since the first step, and when the waiting read started (-1: none).
type readClock struct{ elapsed, waitStart time.Duration }

func newReadClock() *readClock { return &readClock{waitStart: -1} }

// step applies a step that moves time or starts or ends a read, and reports
// whether it was one.
func (c *readClock) step(s livenessStep) bool {
	switch s {
	case stepReadStarts:
		if c.waitStart < 0 {
			c.waitStart = c.elapsed
		}
	case stepReadReturns:
		c.waitStart = -1
	case stepPeriod:
		c.elapsed += testPeriod
	case stepWindowPasses:
		c.elapsed += testMisses * testPeriod
	default:
		return false
	}
	return true
}

// TestFixedReadTimeoutFailsALongScan: the old rule ends a MariaDB dump that
// scans a large binlog in silence for more than 10 s, which the new rule waits
// for; so does the model the exhaustive test checks against.
func TestFixedReadTimeoutFailsALongScan(t *testing.T) {
	scan := []livenessStep(strings.Repeat("w", 3))
	scan = append([]livenessStep{stepReadStarts}, scan...)
	require.True(t, fixedReadTimeout(scan), "the old rule gives up on the scan")
	require.Empty(t, runLiveness(scan, true).dead, "the liveness rule waits for it")
	dead, _ := modelVerdict(scan, true)
	require.False(t, dead)
}

// TestBeforeStart: the file the server scans for a start position is the
// newest whose header lists only GTIDs the position contains, read from each
// flavor's header text.
func TestBeforeStart(t *testing.T) {
	const uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	for _, tc := range []struct {
		info, start string
		want        bool
	}{
		{"[]", "0-1-500", true},
		{"[0-1-400]", "0-1-500", true},
		{"[0-1-500]", "0-1-500", true},
		{"[0-1-501]", "0-1-500", false},
		{"[0-1-400,1-2-7]", "0-1-500,1-2-7", true},
		{"[0-1-400,1-2-8]", "0-1-500,1-2-7", false},
		{"", uuid + ":1-500", true},
		{uuid + ":1-400", uuid + ":1-500", true},
		{uuid + ":1-501", uuid + ":1-500", false},
		{uuid + ":1-400,\n" + uuid[:35] + "3:1-2", uuid + ":1-500", false},
	} {
		start, err := gtid.Parse(tc.start)
		require.NoError(t, err)
		got, err := beforeStart(tc.info, start)
		require.NoError(t, err, tc.info)
		require.Equal(t, tc.want, got, "%q before %s", tc.info, tc.start)
	}
	_, err := beforeStart("[garbage]", &gtid.Set{})
	require.ErrorContains(t, err, "binlog header")
}
