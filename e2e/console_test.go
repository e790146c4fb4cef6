package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/statustext"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// TestConsole opens the coordinator's web console in headless Chromium,
// driven over WebDriver, against a real coordinator moving a table between
// real servers: a reader signs in and sees the list and the workflow's page
// with its progress in rows and bytes and its charts (replay throughput
// among them), and is refused an action with the words the CLI prints; an
// admin stops the workflow; the page goes on updating across a coordinator
// restart; the admin is refused a verify of the stopped workflow, resumes it,
// starts a verify and cancels it, and runs one whose result the page shows;
// cancelling with no verify running and a reverse of a workflow created
// without the reverse roles say what the CLI says, as does a start of the
// running workflow. TestDemoConsole clicks switch and reverse. Screenshots land in
// consoleOutputDir.
func TestConsole(t *testing.T) {
	chromium, driver := lookBrowser(t)
	e := newEnv(t)
	e.sourceExec("CREATE DATABASE condb", "CREATE TABLE condb.t (id INT PRIMARY KEY, v VARCHAR(40))",
		"INSERT INTO condb.t WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 3000) SELECT i, LEFT(SHA2(i, 256), 40) FROM s",
		"ANALYZE TABLE condb.t")
	e.startStreamer()
	e.startApplier()

	dir := t.TempDir()
	tokens, readFile, adminFile := filepath.Join(dir, "tokens"), filepath.Join(dir, "read"), filepath.Join(dir, "admin")
	require.NoError(t, os.WriteFile(tokens, []byte("admin "+e2eAdminToken+"\nread "+e2eReadToken+"\n"), 0o600))
	require.NoError(t, os.WriteFile(readFile, []byte(e2eReadToken+"\n"), 0o600))
	require.NoError(t, os.WriteFile(adminFile, []byte(e2eAdminToken+"\n"), 0o600))
	addr, httpAddr := freeAddr(t), freeAddr(t)
	coordinator := startProc(t, "coordinator", nil, "coordinator", "--listen", addr, "--target", "main="+e.dst.DSN(""),
		"--auth-token-file", tokens, "--http-listen", httpAddr)
	base := "http://" + httpAddr + "/"
	e.waitFor("the console to answer", 30*time.Second, func() (bool, string) {
		resp, err := http.Get(base)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	e.start(e.workflow("con", "condb", "t"))

	wd := startWebDriver(t, chromium, driver)
	out := consoleOutputDir(t)
	wd.navigate(base)
	wd.waitScript("the sign-in form", `return !document.getElementById('login').hidden`)
	wd.signIn(e2eReadToken)

	wd.waitScript("the workflow in the list, copied", `const r = document.querySelector('tr[data-workflow="con"]');
		return r && r.textContent.includes('3,000 / ') && r.querySelector('.phase').textContent`)
	wd.screenshot(filepath.Join(out, "list.png"))

	// The bytes as the CLI words them (statustext.Bytes, which app.js mirrors).
	cli := newCLIAt(t, addr)
	cli.env = append(cli.env, "ROWLIFT_TOKEN_FILE="+readFile)
	var shown rowliftv1.Workflow
	require.NoError(t, protojson.Unmarshal([]byte(cli.ok("workflow", "show", "con", "--output", "json")), &shown))
	st := shown.GetStatus()
	require.Positive(t, st.GetBytesCopied())
	require.Positive(t, st.GetBytesEstimate())
	sizes := statustext.Bytes(st.GetBytesCopied()) + " / " + statustext.Bytes(st.GetBytesEstimate())
	require.Equal(t, sizes, wd.waitScript("the bytes in the list", `const b = document.querySelector('tr[data-workflow="con"] .bytes'); return b && b.textContent`))

	wd.navigate(base + "#/workflow/con")
	wd.waitScript("the table's progress and charts of two samples", `const r = document.querySelector('#tables tr[data-table="t"]');
		const points = (c) => { const l = document.querySelector('.' + c + ' polyline'); return l ? l.getAttribute('points').split(' ').length : 0; };
		return r && r.querySelector('.rows').textContent.startsWith('3,000 / ') && r.querySelector('.bytes').textContent === arguments[0] &&
			r.querySelector('.bar > span').style.width === '100%' &&
			['chart-lag', 'chart-rate', 'chart-bytes', 'chart-replay'].every((c) => points(c) >= 2)`, sizes)
	require.Contains(t, wd.script(`return document.getElementById('phase').textContent`), " rows · "+sizes)
	// A source transaction moves the replay chart off zero.
	e.sourceExec("UPDATE condb.t SET v = 'replayed' WHERE id = 1")
	wd.waitScript("the replay chart to show the transaction", `const top = document.querySelector('.chart-replay text');
		return top && top.textContent !== '0 tx/s' && top.textContent`)
	wd.screenshot(filepath.Join(out, "workflow.png"))

	// A reader is refused as the CLI is, word for word.
	refusal := strings.TrimSuffix(strings.TrimPrefix(cli.fails(3, "workflow", "stop", "con"), "rowlift: "), "\n")
	require.Equal(t, "stop workflow con: StopWorkflow needs the admin role, and this caller has the read role (its token has the read role): "+
		"use credentials with the admin role (PermissionDenied)", refusal)
	require.Equal(t, "Stop workflow con?", wd.clickConfirm(`button[data-action="stop"]`))
	require.Equal(t, refusal, wd.result("refused"))

	// An admin stops it.
	wd.click("#signout")
	wd.signIn(e2eAdminToken)
	require.Regexp(t, `^stopped workflow con: stopped \(stopped by an operator at [0-9T:-]+Z\)$`, wd.act("stop", "ok"))
	wd.waitScript("the page to show the stop", `return document.getElementById('phase').textContent.startsWith('stopped')`)

	// The page survives a coordinator restart: it says the coordinator is out
	// of reach, then updates again with the token it kept.
	coordinator.kill()
	wd.waitScript("the page to see the coordinator gone", `return document.getElementById('conn').classList.contains('down') && document.body.dataset.updates`)
	before := wd.script(`return document.body.dataset.updates`)
	coordinator.restart()
	wd.waitScript("the page to update again", `return !document.getElementById('conn').classList.contains('down') &&
		document.body.dataset.updates !== arguments[0] && document.getElementById('phase').textContent.startsWith('stopped')`, before)

	// A verify of the stopped workflow is refused as the CLI refuses it.
	admin := newCLIAt(t, addr)
	admin.env = append(admin.env, "ROWLIFT_TOKEN_FILE="+adminFile)
	refusal = strings.TrimSuffix(strings.TrimPrefix(admin.fails(1, "workflow", "verify", "con"), "rowlift: "), "\n")
	require.Contains(t, refusal, "resume it first (`rowlift workflow resume con`)")
	require.Equal(t, refusal, wd.act("verify", "refused"))
	require.Contains(t, wd.act("resume", "ok"), "resumed workflow con: ")

	// A verify with no applier to run it stays running, and is cancelled.
	e.applier.kill()
	require.Contains(t, wd.act("verify", "ok"), "verifying workflow con: verify running")
	require.Equal(t, "Cancel verify workflow con?", wd.clickConfirm(`button[data-action="cancel-verify"]`))
	require.Regexp(t, `^cancelled the running verify of con \(.+\); the streams go on without it$`, wd.result("ok"))
	e.applier.restart()

	// An admin's verify runs, and the page shows its result per table.
	require.Contains(t, wd.act("verify", "ok"), "verifying workflow con: ")
	wd.waitScript("the verify's result", `const r = document.querySelector('#verify td.msg'); return r && r.textContent === 'identical' &&
		document.getElementById('verify-line').textContent === 'verify done: 3,000 rows compared, no difference'`)

	// With none running, cancel says so; a reverse of a workflow without
	// reverse roles is refused: both in the CLI's words.
	none := strings.TrimSuffix(admin.ok("workflow", "verify", "con", "--cancel"), "\n")
	require.Equal(t, "no verify of con is running, nothing to cancel (last: verify done: 3,000 rows compared, no difference)", none)
	require.Equal(t, none, wd.act("cancel-verify", "ok"))
	refusal = strings.TrimSuffix(strings.TrimPrefix(admin.fails(1, "workflow", "reverse", "con"), "rowlift: "), "\n")
	require.Contains(t, refusal, "reverse workflow con: workflow \"con\" cannot switch: source main has no reverse target")
	require.Equal(t, refusal, wd.act("reverse", "refused"))
	// Start, of a workflow that is already running: it stays so, as the CLI says.
	started := strings.TrimSuffix(admin.ok("workflow", "start", "con"), "\n")
	require.Regexp(t, `^started workflow con: running`, started)
	require.Equal(t, started, wd.act("start", "ok"))
	wd.screenshot(filepath.Join(out, "after-restart.png"))
}

// act clicks the button of action on a workflow's page, accepts its
// confirmation and returns the result it shows, which must be of class
// "ok" or "refused" as want says.
func (wd *webDriver) act(action, want string) string {
	wd.t.Helper()
	wd.clickConfirm(`button[data-action="` + action + `"]`)
	return wd.result(want)
}

// result waits for the outcome of the action clicked last, of class want
// ("ok" or "refused"), and returns its text. The page shows "Label…" from
// the moment the confirmation is accepted until the outcome arrives.
func (wd *webDriver) result(want string) string {
	wd.t.Helper()
	return wd.waitScriptWithin(actionWait, "the action's "+want+" result", `const r = document.getElementById('result');
		return !r.textContent.endsWith('…') && r.className === arguments[0] && r.textContent`, want)
}

// lookBrowser finds Debian's chromium and chromedriver, failing (not
// skipping) when they are missing: `make setup` installs them.
func lookBrowser(t *testing.T) (chromium, driver string) {
	t.Helper()
	for _, name := range []string{"chromium", "chromedriver"} {
		path, err := exec.LookPath(name)
		if err != nil {
			t.Fatalf("%s is not installed (the console test drives a real browser): run make setup", name)
		}
		if name == "chromium" {
			chromium = path
		} else {
			driver = path
		}
	}
	return chromium, driver
}

// consoleOutputDir is where the screenshots go: $ROWLIFT_TEST_OUTPUT/TestConsole,
// else e2e/testdata-out/TestConsole (ignored by git); t.TempDir would delete them.
func consoleOutputDir(t *testing.T) string {
	root := os.Getenv("ROWLIFT_TEST_OUTPUT")
	if root == "" {
		root = "testdata-out"
	}
	dir, err := filepath.Abs(filepath.Join(root, t.Name()))
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}

// webDriver is a W3C WebDriver session on chromedriver: the few calls the
// test makes, as JSON over HTTP.
type webDriver struct {
	t       *testing.T
	base    string
	session string
}

func startWebDriver(t *testing.T, chromium, driver string) *webDriver {
	t.Helper()
	port, err := sandbox.FreePort()
	require.NoError(t, err)
	log, err := os.Create(filepath.Join(t.TempDir(), "chromedriver.log"))
	require.NoError(t, err)
	cmd := exec.Command(driver, fmt.Sprintf("--port=%d", port))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		log.Close()
	})
	wd := &webDriver{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(wd.base + "/status")
		if err == nil {
			resp.Body.Close()
			break
		}
		require.True(t, time.Now().Before(deadline), "chromedriver did not answer: %v", err)
		time.Sleep(50 * time.Millisecond)
	}
	var created struct {
		SessionID string `json:"sessionId"`
	}
	wd.call("POST", "/session", map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"goog:chromeOptions": map[string]any{"binary": chromium,
			"args": []string{"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1100"}},
		"unhandledPromptBehavior": "ignore",
	}}}, &created)
	wd.session = "/session/" + created.SessionID
	t.Cleanup(func() { wd.call("DELETE", wd.session, nil, nil) })
	return wd
}

// call sends one WebDriver command and decodes its value into out.
func (wd *webDriver) call(method, path string, body any, out any) {
	wd.t.Helper()
	require.NoError(wd.t, wd.try(method, path, body, out))
}

func (wd *webDriver) try(method, path string, body any, out any) error {
	var in io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		in = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, wd.base+path, in)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("webdriver %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	var reply struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&reply); err != nil {
		return fmt.Errorf("webdriver %s %s: %s: %w", method, path, resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("webdriver %s %s: %s: %s", method, path, resp.Status, reply.Value)
	}
	if out != nil {
		return json.Unmarshal(reply.Value, out)
	}
	return nil
}

func (wd *webDriver) navigate(url string) {
	wd.call("POST", wd.session+"/url", map[string]any{"url": url}, nil)
}

// element finds the element css selects.
func (wd *webDriver) element(css string) string {
	var ref map[string]string
	wd.call("POST", wd.session+"/element", map[string]any{"using": "css selector", "value": css}, &ref)
	return ref["element-6066-11e4-a52e-4f735466cecf"] // the W3C web element identifier
}

func (wd *webDriver) click(css string) {
	wd.call("POST", wd.session+"/element/"+wd.element(css)+"/click", map[string]any{}, nil)
}

// clickConfirm clicks a button that asks for confirmation, accepts the
// dialog and returns its text.
func (wd *webDriver) clickConfirm(css string) string {
	wd.t.Helper()
	wd.click(css)
	var text string
	deadline := time.Now().Add(5 * time.Second)
	for wd.try("GET", wd.session+"/alert/text", nil, &text) != nil {
		require.True(wd.t, time.Now().Before(deadline), "no confirm dialog after clicking %s", css)
		time.Sleep(50 * time.Millisecond)
	}
	wd.call("POST", wd.session+"/alert/accept", map[string]any{}, nil)
	return text
}

// signIn types token into the sign-in form and submits it.
func (wd *webDriver) signIn(token string) {
	wd.waitScript("the sign-in form", `return !document.getElementById('login').hidden`)
	wd.call("POST", wd.session+"/element/"+wd.element("#token")+"/value", map[string]any{"text": token}, nil)
	wd.click("#signin")
	wd.waitScript("the sign-in to take", `return document.getElementById('login').hidden`)
}

// script runs JavaScript in the page and returns its result as text ("" for
// null, false or undefined).
func (wd *webDriver) script(js string, args ...any) string {
	wd.t.Helper()
	if args == nil {
		args = []any{}
	}
	var v any
	wd.call("POST", wd.session+"/execute/sync", map[string]any{"script": js, "args": args}, &v)
	switch v := v.(type) {
	case nil, bool:
		if v == true {
			return "true"
		}
		return ""
	case string:
		return v
	default:
		return fmt.Sprint(v)
	}
}

// actionWait bounds the wait for an action's outcome: a switch or reverse
// answers within its timeout (1 minute) and its rollback.
const actionWait = 2 * time.Minute

// waitScript runs js until it returns something, for up to 20 seconds, and
// returns that; it fails the test with the page's text otherwise.
func (wd *webDriver) waitScript(what, js string, args ...any) string {
	wd.t.Helper()
	return wd.waitScriptWithin(20*time.Second, what, js, args...)
}

// waitScriptWithin is waitScript for up to limit.
func (wd *webDriver) waitScriptWithin(limit time.Duration, what, js string, args ...any) string {
	wd.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		if v := wd.script(js, args...); v != "" {
			return v
		}
		if time.Now().After(deadline) {
			wd.t.Fatalf("waited %s for %s; the page shows:\n%s", limit, what, wd.script(`return document.body.innerText`))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// screenshot saves the page as a PNG at path.
func (wd *webDriver) screenshot(path string) {
	wd.t.Helper()
	var b64 string
	wd.call("GET", wd.session+"/screenshot", nil, &b64)
	png, err := base64.StdEncoding.DecodeString(b64)
	require.NoError(wd.t, err)
	require.NoError(wd.t, os.WriteFile(path, png, 0o644))
	wd.t.Logf("screenshot: %s", path)
}
