package e2e

import (
	"database/sql"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/testhook"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// plantDifferences adds rows on the source past the writers' keys, waits until
// the target has them, then changes the target behind rowlift's back in each
// way verify must see: a row missing, a row extra, one byte changed, and a
// string key respelled in a way its collation calls equal. It returns the
// differences verify must name, exactly.
func plantDifferences(p *pairEnv, keys int) []string {
	p.t.Helper()
	return p.plantOn(keys, p.srcDB, p.dstDB, func(n string) string { return n })
}

// plantOn is plantDifferences for any workflow: live is the server whose
// tables take the writes, follower the one the workflow applies them to, in
// the tables twin names (a reverse workflow's are the frozen twins).
func (p *pairEnv) plantOn(keys int, live, follower *sql.DB, twin func(string) string) []string {
	p.t.Helper()
	k := keys + 1000
	ints, composite := "race."+twin("ints"), "race."+twin("composite")
	sandboxtest.Exec(p.t, live,
		fmt.Sprintf("INSERT INTO race.ints VALUES (%d, 'missing', 1), (%d, 'abcdef', 3)", k+1, k+3),
		fmt.Sprintf("INSERT INTO race.composite VALUES ('eu', %d, 'respelled', NULL)", k+4))
	p.waitFor("the planted rows on the target", time.Minute, func() (bool, string) {
		return count(p.t, follower, fmt.Sprintf("%s WHERE id = %d", composite, k+4)) == 1, "not yet"
	})
	for _, q := range []string{
		fmt.Sprintf("DELETE FROM %s WHERE id = %d", ints, k+1),
		fmt.Sprintf("INSERT INTO %s VALUES (%d, 'extra', 2)", ints, k+2),
		fmt.Sprintf("UPDATE %s SET v = 'abcdeF' WHERE id = %d", ints, k+3),
		fmt.Sprintf("UPDATE %s SET region = 'EU' WHERE region = 'eu' AND id = %d", composite, k+4),
	} {
		_, err := follower.Exec(q)
		require.NoError(p.t, err, q)
	}
	return []string{
		fmt.Sprintf("missing on target: (id=%d)", k+1),
		fmt.Sprintf("extra on target: (id=%d)", k+2),
		fmt.Sprintf("different: (id=%d)", k+3),
		fmt.Sprintf("different: (region='eu', id=%d), on target (region='EU', id=%d)", k+4, k+4),
	}
}

// verifyExample is a difference verify --wait lists; "on several sources"
// names a key more than one source of a merge holds.
var verifyExample = regexp.MustCompile(`(?m)^    ((?:missing|extra|different|on several sources).*)$`)

// verifyWait runs `workflow verify race --wait` and returns the differences it
// listed and its exit code.
func (p *pairEnv) verifyWait(args ...string) (found []string, code int) {
	p.t.Helper()
	return p.verifyWorkflow("race", args...)
}

// verifyWorkflow runs `workflow verify NAME --wait` and returns the
// differences it listed and its exit code.
func (p *pairEnv) verifyWorkflow(name string, args ...string) (found []string, code int) {
	p.t.Helper()
	return p.cli.verify(name, args...)
}

// verify runs `workflow verify NAME --wait` and returns the differences it
// listed and its exit code.
func (c *cli) verify(name string, args ...string) (found []string, code int) {
	c.t.Helper()
	r := c.run(append([]string{"workflow", "verify", name, "--wait", "--interval", "200ms"}, args...)...)
	for _, m := range verifyExample.FindAllStringSubmatch(r.stdout, -1) {
		found = append(found, m[1])
	}
	return found, r.code
}

// TestVerifyFindsPlantedDifferences verifies under live writes a target that
// was changed by hand: verify names exactly the planted keys and nothing else,
// --repair rewrites exactly those and reports them, and a verify after it is
// clean; the tables are then identical.
func TestVerifyFindsPlantedDifferences(t *testing.T) {
	sandboxtest.EachFlavor(t, testVerifyFindsPlantedDifferences)
}

func testVerifyFindsPlantedDifferences(t *testing.T, flavor sandbox.Flavor) {
	const keys = 1500
	// Chunks of 1 KiB hold a few dozen rows, not the 500 of --chunk-rows,
	// and a table's first one, sized before its rows' width is known, ends
	// by its bytes below its LIMIT: the target side of a verify chunk is
	// bounded by the chunk's last key, whatever its row count.
	p := newPairEnv(t, flavor, keys, nil, withChunkBytes(1024))
	stop := p.writers(keys)
	planted := plantDifferences(p, keys)

	found, code := p.verifyWait()
	require.Equal(t, 1, code, "verify of a changed target exits 1")
	require.ElementsMatch(t, planted, found)
	require.Contains(t, p.applier.logText(), "digests differ; reopening the stream to compare its rows",
		"chunks are summed up first, and only those whose digests differ compare rows")

	found, code = p.verifyWait("--repair")
	require.Zero(t, code, "a verify that repaired everything it found exits 0")
	require.ElementsMatch(t, planted, found, "repair reports every key it rewrote")
	require.Contains(t, p.applier.logText(), "verify repairs a key that differs from the source")

	found, code = p.verifyWait()
	require.Zero(t, code)
	require.Empty(t, found)
	out := p.cli.ok("workflow", "show", "race")
	require.Regexp(t, `verify\s+verify done: [0-9,]+ rows compared, no difference`, out)

	t.Logf("%d writes during the verifies", stop())
	p.waitCaughtUp("race", time.Minute)
	p.sameRows(p.srcDB, p.dstDB, nil)
}

// TestVerifyFindsSwappedValues plants, under live writes, a difference that
// the 32-bit chunk checksum other tools use (BIT_XOR of the rows' CRC32)
// cannot see: two rows of the same shape that swapped a value on the target.
// The test shows that checksum is blind to it, and verify names both keys.
func TestVerifyFindsSwappedValues(t *testing.T) {
	sandboxtest.EachFlavor(t, testVerifyFindsSwappedValues)
}

func testVerifyFindsSwappedValues(t *testing.T, flavor sandbox.Flavor) {
	const keys = 1500
	p := newPairEnv(t, flavor, keys, nil)
	stop := p.writers(keys)
	k := keys + 1000
	sandboxtest.Exec(t, p.srcDB, fmt.Sprintf("INSERT INTO race.ints VALUES (%d, 'aaaaaa', 1), (%d, 'bbbbbb', 1)", k+1, k+2))
	p.waitFor("the planted rows on the target", time.Minute, func() (bool, string) {
		return count(t, p.dstDB, fmt.Sprintf("race.ints WHERE id IN (%d, %d)", k+1, k+2)) == 2, "not yet"
	})
	sandboxtest.Exec(t, p.dstDB, fmt.Sprintf("UPDATE race.ints SET v = IF(id = %d, 'bbbbbb', 'aaaaaa') WHERE id IN (%d, %d)", k+1, k+1, k+2))
	crc := func(db *sql.DB) (n, x uint64) {
		q := fmt.Sprintf("SELECT COUNT(*), BIT_XOR(CRC32(CONCAT_WS(',', id, v, n))) FROM race.ints WHERE id IN (%d, %d)", k+1, k+2)
		require.NoError(t, db.QueryRow(q).Scan(&n, &x))
		return n, x
	}
	sn, sx := crc(p.srcDB)
	dn, dx := crc(p.dstDB)
	require.Equal(t, [2]uint64{sn, sx}, [2]uint64{dn, dx}, "the swap is invisible to BIT_XOR(CRC32)")

	found, code := p.verifyWait()
	require.Equal(t, 1, code, "verify of a changed target exits 1")
	require.ElementsMatch(t, []string{fmt.Sprintf("different: (id=%d)", k+1), fmt.Sprintf("different: (id=%d)", k+2)}, found)
	t.Logf("%d writes during the verify", stop())
}

// TestVerifyRecheckWithChecksQueued changes a row of a table's first chunk
// on the target while the target's digest checks are slowed, so the next
// chunks' snapshots wait in the queue when the first chunk's digests differ
// and end the stream: their connections go back to the pool out of their
// read-only transactions (else the stream's next takeover, on one of them,
// fails forever), and verify names the key.
func TestVerifyRecheckWithChecksQueued(t *testing.T) {
	sandboxtest.EachFlavor(t, testVerifyRecheckWithChecksQueued)
}

func testVerifyRecheckWithChecksQueued(t *testing.T, flavor sandbox.Flavor) {
	const keys = 1500
	p := newPairEnv(t, flavor, keys, nil)
	p.applier.kill()
	p.applier.env = append(p.applier.env, testhook.EnvVar+"="+string(testhook.VerifyDigest)+"=200-300ms")
	p.applier.restart()
	sandboxtest.Exec(t, p.dstDB, "UPDATE race.ints SET n = IFNULL(n, 0) + 1 WHERE id = 10")
	found, code := p.verifyWait()
	require.Equal(t, 1, code, "verify of a changed target exits 1")
	require.Equal(t, []string{"different: (id=10)"}, found)
	require.Contains(t, p.applier.logText(), "digests differ; reopening the stream to compare its rows")
}

// TestVerifyOnReadCommittedTarget runs a verify under live writes on a target
// whose default isolation is READ COMMITTED, where a plain START TRANSACTION
// WITH CONSISTENT SNAPSHOT takes none: the target's digest of a chunk must
// still be of the rows at the chunk's point, not of later ones the apply
// commits meanwhile, so no chunk of the identical tables is rechecked.
func TestVerifyOnReadCommittedTarget(t *testing.T) {
	sandboxtest.EachFlavor(t, testVerifyOnReadCommittedTarget)
}

func testVerifyOnReadCommittedTarget(t *testing.T, flavor sandbox.Flavor) {
	const keys = 1500
	p := newPairEnv(t, flavor, keys, nil)
	sandboxtest.Exec(t, p.dstDB, "SET GLOBAL TRANSACTION ISOLATION LEVEL READ COMMITTED")
	p.applier.kill()
	p.applier.restart() // its connections take the new default
	stop := p.writers(keys)
	found, code := p.verifyWait()
	require.Zero(t, code, "verify of an identical target")
	require.Empty(t, found)
	require.NotContains(t, p.applier.logText(), "digests differ", "a digest saw rows of a later point than its chunk's")
	t.Logf("%d writes during the verify", stop())
}

// TestVerifyFollowingWorkflowsIsExact verifies, under live writers that
// follow the live side, each kind of workflow that follows writes: the
// reverse workflow a switch creates, the forward one a reverse resumes, and
// the reverse one the next switch resumes, each several times. Every verify
// must be clean (issue 23: a verify chunk of race_reverse was placed after a
// transaction its snapshot did not see yet, and named that transaction's
// uniq keys as different). Then differences planted in the source's frozen
// tables, uniq's included, must be named exactly.
func TestVerifyFollowingWorkflowsIsExact(t *testing.T) {
	sandboxtest.EachFlavor(t, testVerifyFollowingWorkflowsIsExact)
}

func testVerifyFollowingWorkflowsIsExact(t *testing.T, flavor sandbox.Flavor) {
	const keys = 1500
	p := newPairEnv(t, flavor, keys, nil)
	stop := p.writers(keys)
	clean := func(workflow string, times int) {
		t.Helper()
		for i := range times {
			p.waitWrites("the writers to write to the live side")
			found, code := p.verifyWorkflow(workflow)
			require.Zero(t, code, "verify %d of %s under live writes: a false difference", i+1, workflow)
			require.Empty(t, found)
		}
	}
	p.cutover("switch")
	clean("race_reverse", 3)
	p.cutover("reverse")
	clean("race", 2)
	p.cutover("switch")
	clean("race_reverse", 2)

	planted := p.plantOn(keys, p.dstDB, p.srcDB, p.twin)
	k := keys + 1000
	sandboxtest.Exec(t, p.dstDB, fmt.Sprintf("INSERT INTO race.uniq VALUES (%d, 'planted', NULL)", k+5))
	uniq := "race." + p.twin("uniq")
	p.waitFor("the planted uniq row on the source", time.Minute, func() (bool, string) {
		return count(t, p.srcDB, fmt.Sprintf("%s WHERE id = %d", uniq, k+5)) == 1, "not yet"
	})
	sandboxtest.Exec(t, p.srcDB, fmt.Sprintf("UPDATE %s SET email = 'planted, changed' WHERE id = %d", uniq, k+5))
	planted = append(planted, fmt.Sprintf("different: (id=%d)", k+5))

	found, code := p.verifyWorkflow("race_reverse")
	require.Equal(t, 1, code, "verify of changed frozen tables exits 1")
	require.ElementsMatch(t, planted, found)
	t.Logf("%d writes during the verifies", stop())
}

// TestVerifySurvivesKills slows every verify chunk down and kills the applier,
// the streamer and the coordinator with SIGKILL in the middle of a verify: it
// resumes from its last chunk and ends naming exactly the planted keys, each
// once (a chunk counted twice would count its difference twice).
func TestVerifySurvivesKills(t *testing.T) {
	sandboxtest.EachFlavor(t, testVerifySurvivesKills)
}

func testVerifySurvivesKills(t *testing.T, flavor sandbox.Flavor) {
	const keys = 1500
	p := newPairEnv(t, flavor, keys, nil)
	p.applier.kill()
	p.applier.env = append(p.applier.env, testhook.EnvVar+"="+string(testhook.VerifyCheck)+"=150-250ms")
	p.applier.restart()
	stop := p.writers(keys)
	planted := plantDifferences(p, keys)
	v := verifyUnderKills(t, p.cli, p.waitFor, "race", p.applier, p.streamer, p.coord)
	require.EqualValues(t, [3]int64{1, 1, 2}, [3]int64{v.GetMissing(), v.GetExtra(), v.GetDifferent()}, "each planted key counted once")
	require.ElementsMatch(t, planted, verifyExamples(v))
	t.Logf("%d writes during the verify", stop())
}

// verifyUnderKills starts a verify of workflow and, each time it has compared
// more rows, kills one of victims with SIGKILL and restarts it (a victim
// whose name is "coordinator" is waited for until it answers); then it polls,
// rather than calling `verify --wait`, which after the first verify ended
// would start a new one and prove nothing about resuming, until the verify is
// done, and returns its status. wait is the env's waitFor.
func verifyUnderKills(t *testing.T, c *cli, wait func(string, time.Duration, func() (bool, string)), workflow string, victims ...*proc) *rowliftv1.VerifyStatus {
	t.Helper()
	c.ok("workflow", "verify", workflow)
	compared := regexp.MustCompile(`verify running, [0-9.]+%: ([0-9,]+) rows compared`)
	var before string
	for _, victim := range victims {
		wait("the verify to make progress", time.Minute, func() (bool, string) {
			out := c.ok("workflow", "show", workflow)
			m := compared.FindStringSubmatch(out)
			ok := m != nil && m[1] != "0" && m[1] != before
			if ok {
				before = m[1]
			}
			return ok, out
		})
		victim.kill()
		t.Logf("killed %s with %s rows compared", victim.name, before)
		victim.restart()
		if victim.name == "coordinator" {
			wait("the coordinator to answer", 30*time.Second, func() (bool, string) {
				r := c.run("workflow", "list")
				return r.code == 0, r.stderr
			})
		}
	}
	var w rowliftv1.Workflow
	wait("the verify to finish", 2*time.Minute, func() (bool, string) {
		out := c.ok("workflow", "show", workflow, "--output", "json")
		require.NoError(t, protojson.Unmarshal([]byte(out), &w))
		return w.GetStatus().GetVerify().GetState() == rowliftv1.VerifyState_VERIFY_STATE_DONE, out
	})
	return w.GetStatus().GetVerify()
}

// verifyExamples are the keys a verify's status names, every table's.
func verifyExamples(v *rowliftv1.VerifyStatus) []string {
	var found []string
	for _, vt := range v.GetTables() {
		found = append(found, vt.GetExamples()...)
	}
	return found
}
