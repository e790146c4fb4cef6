package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/rowlift/rowlift/internal/frozen"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/testhook"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// shown is `workflow show NAME --output json`, parsed.
func (p *pairEnv) shown(name string) *rowliftv1.Workflow {
	p.t.Helper()
	var w rowliftv1.Workflow
	require.NoError(p.t, protojson.Unmarshal([]byte(p.cli.ok("workflow", "show", name, "--output", "json")), &w))
	return &w
}

// slowVerifyChecks restarts proc (an applier) with every verify chunk's check
// delayed, so a verify runs long enough to be cancelled or cut over.
func slowVerifyChecks(proc *proc) {
	proc.kill()
	proc.env = append(proc.env, testhook.EnvVar+"="+string(testhook.VerifyCheck)+"=150-250ms")
	proc.restart()
}

// startSlowVerify starts a verify of workflow name and waits until it has
// compared some rows.
func (p *pairEnv) startSlowVerify(name string) {
	p.t.Helper()
	p.cli.ok("workflow", "verify", name)
	p.waitFor("the verify of "+name+" to make progress", time.Minute, func() (bool, string) {
		v := p.shown(name).GetStatus().GetVerify()
		return v.GetState() == rowliftv1.VerifyState_VERIFY_STATE_RUNNING && v.GetRowsCompared() > 0, v.String()
	})
}

// waitMarker inserts a row on the source past the writers' keys and waits
// until the target has it: the stream replays.
func (p *pairEnv) waitMarker(id int) {
	p.t.Helper()
	p.sourceExec(fmt.Sprintf("INSERT INTO race.composite VALUES ('zz', %d, 'marker', NULL)", id))
	p.waitFor("the marker row on the target", time.Minute, func() (bool, string) {
		return count(p.t, p.dstDB, fmt.Sprintf("race.composite WHERE region = 'zz' AND id = %d", id)) == 1, "not yet"
	})
}

// lineRun is a rowlift command running in the background, its standard
// output read line by line as it prints.
type lineRun struct {
	t      *testing.T
	cmd    *exec.Cmd
	cancel context.CancelFunc
	lines  chan string
	stderr strings.Builder
	last   string
}

// start runs the binary with args in the background.
func (c *cli) start(args ...string) *lineRun {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	r := &lineRun{t: c.t, cmd: exec.CommandContext(ctx, rowliftBin, args...), cancel: cancel, lines: make(chan string, 1000)}
	r.cmd.Env = append(os.Environ(), c.env...)
	r.cmd.Stderr = &r.stderr
	stdout, err := r.cmd.StdoutPipe()
	require.NoError(c.t, err)
	require.NoError(c.t, r.cmd.Start())
	c.t.Cleanup(cancel)
	go func() {
		defer close(r.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
	}()
	return r
}

// waitLine waits until the command prints a line that matches re.
func (r *lineRun) waitLine(what string, re *regexp.Regexp) {
	r.t.Helper()
	deadline := time.After(time.Minute)
	for {
		select {
		case l, ok := <-r.lines:
			if !ok {
				r.t.Fatalf("waiting for %s: the command ended; last line %q, stderr %q", what, r.last, r.stderr.String())
			}
			r.last = l
			if re.MatchString(l) {
				return
			}
		case <-deadline:
			r.t.Fatalf("timed out waiting for %s; last line %q", what, r.last)
		}
	}
}

// end waits for the command to exit and returns the rest of its standard
// output, its standard error and its exit code.
func (r *lineRun) end() (stdout, stderr string, code int) {
	r.t.Helper()
	var rest []string
	for l := range r.lines {
		rest = append(rest, l)
	}
	_ = r.cmd.Wait()
	return strings.Join(rest, "\n"), r.stderr.String(), r.cmd.ProcessState.ExitCode()
}

// stop kills the command.
func (r *lineRun) stop() {
	r.cancel()
	for range r.lines {
	}
	_ = r.cmd.Wait()
}

// TestVerifyCancel cancels a slow verify under live writes: the CLI says what
// it cancelled, status shows it cancelled with how far it got, no chunk counts
// after the cancel, a kill -9 of the applier and the coordinator leaves it
// cancelled, a second cancel is a no-op that says so, and the stream goes on
// replaying the writes.
func TestVerifyCancel(t *testing.T) {
	sandboxtest.EachFlavor(t, testVerifyCancel)
}

func testVerifyCancel(t *testing.T, flavor sandbox.Flavor) {
	const keys = 1500
	p := newPairEnv(t, flavor, keys, nil)
	slowVerifyChecks(p.applier)
	stop := p.writers(keys)
	p.startSlowVerify("race")
	waiting := p.cli.start("workflow", "verify", "race", "--wait", "--interval", "100ms")
	waiting.waitLine("verify --wait to follow the running verify", regexp.MustCompile(`^verify running, `))

	out := p.cli.ok("workflow", "verify", "race", "--cancel")
	require.Regexp(t, `^cancelled the running verify of race \([0-9.]+% done\); the streams go on without it\n$`, out)
	v := p.shown("race").GetStatus().GetVerify()
	require.Equal(t, rowliftv1.VerifyState_VERIFY_STATE_CANCELLED, v.GetState(), v.String())
	require.Contains(t, v.GetMessage(), "cancelled by `rowlift workflow verify race --cancel`")
	require.Less(t, v.GetPercent(), 100.0)
	compared := v.GetRowsCompared()
	waitOut, waitErr, code := waiting.end()
	require.Equal(t, 1, code, "verify --wait of a verify that was cancelled fails")
	require.Regexp(t, `(?m)^verify cancelled at [0-9.]+%: `, waitOut)
	require.Contains(t, waitErr, "the verify of race was cancelled before its end: cancelled by `rowlift workflow verify race --cancel`; "+
		"`rowlift workflow verify race --wait` starts a new one")
	require.Regexp(t, `verify\s+verify cancelled at [0-9.]+%: [0-9,]+ rows compared`, p.cli.ok("workflow", "show", "race"))
	p.waitFor("the applier to restart the stream without the verify", time.Minute, func() (bool, string) {
		return strings.Contains(p.applier.logText(), "verify cancelled; restarting the stream without it"), "not yet"
	})

	for _, victim := range []*proc{p.applier, p.coord} {
		victim.kill()
		victim.restart()
	}
	p.waitFor("the coordinator to answer", 30*time.Second, func() (bool, string) {
		r := p.cli.run("workflow", "list")
		return r.code == 0, r.stderr
	})
	require.Contains(t, p.cli.ok("workflow", "verify", "race", "--cancel"), "no verify of race is running, nothing to cancel (last: verify cancelled at ")

	p.waitMarker(keys + 1000)
	t.Logf("%d writes during the test", stop())
	p.waitCaughtUp("race", time.Minute)
	v = p.shown("race").GetStatus().GetVerify()
	require.Equal(t, rowliftv1.VerifyState_VERIFY_STATE_CANCELLED, v.GetState(), "cancelled after kill -9 of the applier and the coordinator")
	require.Equal(t, compared, v.GetRowsCompared(), "no verify chunk counted after the cancel")
	p.sameRows(p.srcDB, p.dstDB, nil)
}

// TestSwitchCancelsVerify switches a workflow whose slow verify is running,
// then reverses it while a slow verify of its reverse workflow runs (issue 23:
// the reverse renamed the tables under that verify and rolled back): each
// cutover cancels the verify before its freeze, says so, and goes through as
// usual; the verify's status says which cutover cancelled it.
func TestSwitchCancelsVerify(t *testing.T) {
	sandboxtest.EachFlavor(t, testSwitchCancelsVerify)
}

func testSwitchCancelsVerify(t *testing.T, flavor sandbox.Flavor) {
	const keys = 1500
	p := newPairEnv(t, flavor, keys, nil)
	slowVerifyChecks(p.applier)
	slowVerifyChecks(p.revApplier)
	stop := p.writers(keys)
	for _, c := range []struct{ direction, stopping, following string }{
		{"switch", "race", "race_reverse"},
		{"reverse", "race_reverse", "race"},
	} {
		p.startSlowVerify(c.stopping)
		r := p.startCutover(c.direction)()
		require.Zero(t, r.code, "rowlift workflow %s failed: %s", c.direction, r.stderr)
		require.Regexp(t, `(?m)^cancelled the running verify of `+c.stopping+` \((?:[0-9.]+% done|[0-9]+ rows compared)\); run it again after the cutover, on `+c.following+` \(`+
			"`rowlift workflow verify "+c.following+" --wait`"+`\)$`, r.stdout)
		require.Regexp(t, writePause, r.stdout)
		v := p.shown(c.stopping).GetStatus().GetVerify()
		require.Equal(t, rowliftv1.VerifyState_VERIFY_STATE_CANCELLED, v.GetState(), v.String())
		require.Contains(t, v.GetMessage(), "cancelled by the "+c.direction+" of race before its freeze")
		p.waitWrites("the writers after the " + c.direction)
	}
	t.Logf("%d writes during the test", stop())
	p.identicalAfter("reverse")
}

// TestVerifyOfVanishedTable renames a table on the source under a running
// verify, as a cutover's freeze does: the table's verify fails with a message
// that names it and says what to do, the other tables are verified, and the
// stream goes on replaying instead of failing on the table forever.
func TestVerifyOfVanishedTable(t *testing.T) {
	sandboxtest.EachFlavor(t, testVerifyOfVanishedTable)
}

func testVerifyOfVanishedTable(t *testing.T, flavor sandbox.Flavor) {
	const keys = 1500
	p := newPairEnv(t, flavor, keys, nil)
	// Slow chunk reads on the source: ints has chunks left to read when it goes.
	p.streamer.kill()
	p.streamer.env = append(p.streamer.env, testhook.EnvVar+"="+string(testhook.ChunkRead)+"=400-400ms")
	p.streamer.restart()
	p.cli.ok("workflow", "verify", "race")
	p.waitFor("the verify of race.ints to make progress", time.Minute, func() (bool, string) {
		v := p.shown("race").GetStatus().GetVerify()
		for _, vt := range v.GetTables() {
			if vt.GetName() == "ints" {
				return vt.GetRowsCompared() > 0 && !vt.GetDone(), v.String()
			}
		}
		return false, v.String()
	})
	twin, err := frozen.Name("ints")
	require.NoError(t, err)
	p.sourceExec("RENAME TABLE race.ints TO race." + twin)

	var v *rowliftv1.VerifyStatus
	p.waitFor("the verify to end", 2*time.Minute, func() (bool, string) {
		v = p.shown("race").GetStatus().GetVerify()
		return v.GetState() != rowliftv1.VerifyState_VERIFY_STATE_RUNNING, v.String()
	})
	require.Equal(t, rowliftv1.VerifyState_VERIFY_STATE_FAILED, v.GetState(), v.String())
	for _, vt := range v.GetTables() {
		require.True(t, vt.GetDone(), vt.GetName())
		if vt.GetName() == "ints" {
			require.Contains(t, vt.GetMessage(), "table race.ints no longer exists on the source (renamed by a cutover, or dropped?)")
			require.Contains(t, vt.GetMessage(), "run the verify again on the workflow that now streams it")
			continue
		}
		require.Empty(t, vt.GetMessage(), vt.GetName())
		require.Positive(t, vt.GetRowsCompared(), vt.GetName())
	}
	require.Contains(t, p.cli.ok("workflow", "show", "race"), "verify failed: ")

	p.waitMarker(keys + 1000)
	w := p.shown("race")
	require.Equal(t, rowliftv1.WorkflowState_WORKFLOW_STATE_RUNNING, w.GetStatus().GetState(), w.GetStatus().GetMessage())
	require.Equal(t, 1, strings.Count(p.applier.logText(), "a table's verify failed; reopening the stream without it"),
		"the stream reopened once for the table, not in a loop")
}

// TestVerifyWaitShowsStreamError: with the streamer down, `verify --wait`
// prints the stream's retry error on its progress lines instead of a bare
// percentage; once the streamer is back the verify finishes.
func TestVerifyWaitShowsStreamError(t *testing.T) {
	sandboxtest.EachFlavor(t, testVerifyWaitShowsStreamError)
}

func testVerifyWaitShowsStreamError(t *testing.T, flavor sandbox.Flavor) {
	const keys = 300
	p := newPairEnv(t, flavor, keys, nil)
	p.streamer.kill()
	p.cli.ok("workflow", "verify", "race")

	waiting := p.cli.start("workflow", "verify", "race", "--wait", "--interval", "200ms")
	waiting.waitLine("verify --wait to print the stream's error", regexp.MustCompile(
		`^verify running, [0-9.]+%: .*; stream main -> main retrying \(attempt \d+, next in [^)]+\): .*streamer 127\.0\.0\.1:\d+ \(source main\): `))
	waiting.stop()

	p.streamer.restart()
	found, code := p.verifyWait()
	require.Zero(t, code)
	require.Empty(t, found)
}
