package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
)

// TestDemo runs `rowlift demo` as the README tells a new user to, at a smaller
// size: two servers, a copy under live writes, a comparison, and "identical: yes".
func TestDemo(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, rowliftBin, "demo", "--rows", "30000", "--flavor", string(flavor)).CombinedOutput()
		require.NoError(t, err, "demo output:\n%s", out)
		name := map[sandbox.Flavor]string{sandbox.MariaDB: "MariaDB", sandbox.MySQL: "MySQL"}[flavor]
		for _, want := range []string{"starting two throwaway " + name + " servers", "creating workflow demo-move", "copy done", "identical:       yes"} {
			require.Contains(t, string(out), want)
		}
	})
}

// TestDemoCutover runs `rowlift demo --cutover`: after the copy and the
// comparison, the rest of a move under the writer (verify, switch, reverse,
// switch, complete), a write pause for each cutover, and
// a final comparison that ends the output.
func TestDemoCutover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b, err := exec.CommandContext(ctx, rowliftBin, "demo", "--rows", "20000", "--cutover").CombinedOutput()
	out := string(b)
	require.NoError(t, err, "demo output:\n%s", out)
	steps := []string{"identical:       yes", "\nverify: ", " rows compared, 0 differences found", "\nswitch: writes go to the target", "\nreverse: writes go to the source",
		"\nswitch: writes go to the target", "\ncomplete: demo-move_reverse", "\nfinal comparison"}
	rest := out
	for _, step := range steps {
		i := strings.Index(rest, step)
		require.GreaterOrEqual(t, i, 0, "%q missing, or out of order, in the demo output:\n%s", step, out)
		rest = rest[i+len(step):]
	}
	require.Len(t, regexp.MustCompile(`(?m)^write pause: \d+ ms$`).FindAllString(out, -1), 3, "a write pause per cutover:\n%s", out)
	require.True(t, strings.HasSuffix(strings.TrimSpace(out), "\nidentical: yes"), "the output ends with identical: yes:\n%s", out)
}

// TestDemoReshard runs `rowlift demo --reshard 4`: the sample tables split
// from one source over four target shards under the writer, the warning of a
// unique key without the sharding column, the streams with their ranges, and
// one comparison line per shard, each ending in "identical: yes".
func TestDemoReshard(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b, err := exec.CommandContext(ctx, rowliftBin, "demo", "--rows", "20000", "--reshard", "4").CombinedOutput()
	out := string(b)
	require.NoError(t, err, "demo output:\n%s", out)
	for _, want := range []string{"creating workflow demo-reshard", "warning: table customers: unique key email (email) does not contain the sharding column id",
		"copy done", "split:           3 tables by hash of id over 4 target shards"} {
		require.Contains(t, out, want)
	}
	shards := regexp.MustCompile(`(?m)^  (shard\d) +(\S+) +events [\d,]+, customers [\d,]+, all_types [\d,]+ rows +identical: (\S+)$`).FindAllStringSubmatch(out, -1)
	require.Len(t, shards, 4, "a comparison line per shard:\n%s", out)
	for i, m := range shards {
		require.Equal(t, fmt.Sprintf("shard%d", i+1), m[1])
		require.Equal(t, []string{"-40", "40-80", "80-c0", "c0-"}[i], m[2])
		require.Equal(t, "yes", m[3], "%s differs from the source rows of its range:\n%s", m[1], out)
	}
}

// TestDemoInterrupted: Ctrl-C during the demo stops it cleanly, with its
// servers removed.
func TestDemoInterrupted(t *testing.T) {
	cmd := exec.Command(rowliftBin, "demo", "--rows", "200000")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	deadline := time.Now().Add(time.Minute)
	dirs := regexp.MustCompile(`(?m)^  (?:source|target) \S+ in (\S+)$`)
	for len(dirs.FindAllStringSubmatch(out.String(), -1)) < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	require.NoError(t, cmd.Wait(), "demo output:\n%s", out.String())
	require.Contains(t, out.String(), "interrupted: stopping and removing the servers")
	found := dirs.FindAllStringSubmatch(out.String(), -1)
	require.Len(t, found, 2, "the demo did not say where its servers are:\n%s", out.String())
	for _, m := range found {
		_, err := os.Stat(m[1])
		require.True(t, os.IsNotExist(err), "server directory %s is still there", m[1])
	}
}

// TestDemoConsole runs `rowlift demo --console`: the demo serves its
// coordinator's web console, says where, and keeps running after the move
// with the reverse roles up; in headless Chromium the console's verify,
// switch and reverse are clicked and say what the CLI says (a reverse before
// the switch is refused), and the page shows each cutover's journal as a
// timeline of its steps. Ctrl-C ends it.
func TestDemoConsole(t *testing.T) {
	chromium, driver := lookBrowser(t)
	addr := freeAddr(t)
	cmd := exec.Command(rowliftBin, "demo", "--rows", "20000", "--console", "--console-listen", addr)
	f, err := os.Create(filepath.Join(t.TempDir(), "demo.out"))
	require.NoError(t, err)
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	output := func() string {
		b, err := os.ReadFile(f.Name())
		require.NoError(t, err)
		return string(b)
	}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := "http://" + addr + "/"
	deadline := time.Now().Add(3 * time.Minute)
	for !strings.Contains(output(), "the workflow runs on: in the console at "+url) {
		require.True(t, time.Now().Before(deadline), "the demo did not say the console runs on; its output:\n%s", output())
		time.Sleep(200 * time.Millisecond)
	}
	require.Contains(t, output(), "web console: "+url)

	wd := startWebDriver(t, chromium, driver)
	out := consoleOutputDir(t)
	wd.navigate(url + "#/workflow/demo-move")
	wd.waitScript("the workflow's page", `return document.getElementById('phase') !== null`)
	require.Contains(t, wd.act("verify", "ok"), "verifying workflow demo-move: ")
	// In the CLI's form, "WHAT: MESSAGE (Code)", which TestConsole compares
	// with the CLI's own word for word.
	refused := wd.act("reverse", "refused")
	require.True(t, strings.HasPrefix(refused, `reverse workflow demo-move: workflow "demo-move" was not switched (no reverse workflow "demo-move_reverse" on target `), refused)
	require.True(t, strings.HasSuffix(refused, "there is nothing to reverse; `rowlift workflow switch demo-move` switches it (FailedPrecondition)"), refused)

	// Each cutover's message is the CLI's (statustext.Switched), and its
	// steps come from the journal, every one of them however fast.
	steps := `["freezing","frozen","applied","writable","started","done"]`
	timeline := func(direction string) {
		t.Helper()
		defer wd.script(`document.getElementById('cutover').scrollIntoView()`) // for the screenshot
		wd.waitScript("the "+direction+"'s timeline", `const line = document.getElementById('cutover-line');
			const steps = [...document.querySelectorAll('#cutover li[data-step]')];
			return line && line.textContent.startsWith(arguments[0] + ' done') &&
				JSON.stringify(steps.map((li) => li.dataset.step)) === arguments[1] &&
				steps.every((li) => li.querySelector('time').textContent !== '' && /^[a-z ]+ at \+[\d,]+ ms(: .+)?$/.test(li.lastChild.textContent))`, direction, steps)
	}
	require.Equal(t, "Switch workflow demo-move?", wd.clickConfirm(`button[data-action="switch"]`))
	switched := wd.result("ok")
	require.True(t, strings.HasPrefix(switched, "switched writes of demo-move to its targets\n"), switched)
	require.Regexp(t, `(?m)^write pause: \d+ ms$`, switched)
	require.Contains(t, switched, "\nfollowing back: demo-move_reverse")
	timeline("switch")
	wd.screenshot(filepath.Join(out, "switched.png"))

	require.Equal(t, "Reverse workflow demo-move?", wd.clickConfirm(`button[data-action="reverse"]`))
	reversed := wd.result("ok")
	require.True(t, strings.HasPrefix(reversed, "switched writes of demo-move back to its sources\n"), reversed)
	require.Contains(t, reversed, "\nfollowing back: demo-move")
	timeline("reverse")
	wd.screenshot(filepath.Join(out, "reversed.png"))

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	require.NoError(t, cmd.Wait())
}
