package console_test

// The tests in this file drive the console in a real headless Chromium
// against the real server binary, run as a separate process on SQLite:
// the page's fetches and EventSources go over the network as a user's
// would. Without chromium the tests skip, except when CI=true, where they
// fail.

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/threadline/threadline/server/servertest"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "write docs/console.png from the browser test")

// step bounds one wait of the page; generous, for a loaded machine.
const step = 20 * time.Second

func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("THREADLINE_CHROMIUM"), "/usr/bin/chromium"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed (/usr/bin/chromium); CI must run the browser tests")
	}
	t.Skip("chromium is not installed (/usr/bin/chromium): the browser tests skip")
	return ""
}

// browser is one headless Chromium tab, with the page's JavaScript errors
// collected: any of them fails the test at its end.
type browser struct {
	t     *testing.T
	ctx   context.Context
	shots string
	n     int

	mu     sync.Mutex
	errors []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		// The network here is closed: without these Chromium keeps trying
		// to reach its services and misbehaves.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 860),
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	b := &browser{t: t, ctx: ctx, shots: os.Getenv("THREADLINE_SCREENSHOTS")}
	if b.shots == "" {
		b.shots = filepath.Join(os.TempDir(), "threadline-screenshots")
	}
	b.shots = filepath.Join(b.shots, strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.MkdirAll(b.shots, 0o755); err != nil {
		t.Fatal(err)
	}
	// The first Run starts the browser; it must not run on a context with a
	// deadline, which would end the browser with it.
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	go func() {
		for ev, err := range chromedp.Events(ctx, runtime.ExceptionThrown) {
			if err != nil {
				return
			}
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			b.addError(msg)
		}
	}()
	go func() {
		// The delete button asks first: say yes.
		for _, err := range chromedp.Events(ctx, page.JavascriptDialogOpening) {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, e := range b.errors {
			t.Errorf("JavaScript error on the page: %s", e)
		}
	})
	return b
}

func (b *browser) addError(s string) {
	b.mu.Lock()
	b.errors = append(b.errors, s)
	b.mu.Unlock()
}

// do runs actions with a deadline; a failure takes a screenshot first.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, step)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.fail(what, err)
	}
}

func (b *browser) fail(what string, err error) {
	b.t.Helper()
	path := b.shot("failed-" + what)
	notice, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.getElementById('notice').textContent`))
	b.t.Fatalf("%s: %v (screenshot %s; notice %q)", what, err, path, notice)
}

// until waits for a JavaScript condition to be true.
func (b *browser) until(what, cond string) {
	b.t.Helper()
	b.do(what, chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(step)))
}

// eval returns a JavaScript expression's value.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, step)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.fail("eval "+expr, err)
	}
	return v
}

// shot writes a full-page screenshot and returns its path.
func (b *browser) shot(name string) string {
	b.n++
	path := filepath.Join(b.shots, fmt.Sprintf("%02d-%s.png", b.n, name))
	ctx, cancel := context.WithTimeout(b.ctx, step)
	defer cancel()
	// The whole page in a viewport as tall as the page, rather than
	// FullScreenshot, which leaves the sticky chat bar where the viewport
	// ended.
	// (The page's own height follows the viewport's: measure its content.)
	height, err := chromedp.Run(ctx, chromedp.Evaluate[int64](`Math.ceil(Math.max(...['runs', 'agui-events', 'thread-list'].map(
	  (id) => document.getElementById(id).getBoundingClientRect().bottom + window.scrollY)) + 80)`))
	var buf []byte
	if err == nil {
		err = chromedp.Do(ctx, chromedp.EmulateViewport(1280, max(height, 860)))
	}
	if err == nil {
		buf, err = chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if rerr := chromedp.Do(ctx, chromedp.EmulateReset()); err == nil {
			err = rerr
		}
	}
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return ""
	}
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", path)
	return path
}

// send types a message into the chat box and sends it.
func (b *browser) send(message string) {
	b.t.Helper()
	b.do("send "+message, chromedp.SetValue(chromedp.CSS(`[data-testid=chat-input]`), message),
		chromedp.Click(chromedp.CSS(`[data-testid=chat-send]`)))
}

// createThread creates a thread from the form and waits until it is open.
func (b *browser) createThread(id, title string) {
	b.t.Helper()
	steps := []chromedp.Action[chromedp.Void]{chromedp.SetValue(chromedp.CSS(`[data-testid=new-thread-id]`), id)}
	if title != "" {
		// (SetValue cannot set an empty value: it checks what it set.)
		steps = append(steps, chromedp.SetValue(chromedp.CSS(`[data-testid=new-thread-title]`), title))
	}
	steps = append(steps, chromedp.Click(chromedp.CSS(`[data-testid=new-thread-create]`)))
	b.do("create thread "+id, steps...)
	b.until("thread "+id+" open", fmt.Sprintf(`location.hash === %q && document.querySelector('[data-testid=thread-id]').textContent === %q && document.querySelector('[data-testid=conn-state]').textContent === 'live'`,
		"#thread="+id, id))
}

// The page's view of the n-th run (0-based): its status and the root
// agent's text, as the user sees it.
const runJS = `(n) => { const r = document.querySelectorAll('[data-testid=run]')[n]; if (!r) return null;
  const root = r.querySelector(':scope > [data-testid=agent]');
  return { id: r.dataset.runId, status: r.dataset.status,
    text: [...root.querySelectorAll(':scope > .timeline > [data-testid=text]')].map((e) => e.textContent).join(''),
    tools: [...r.querySelectorAll('[data-testid=tool-call]')].map((e) => ({ name: e.dataset.toolName, state: e.dataset.state,
      result: !!e.querySelector('[data-testid=tool-result]') })) }; }`

type pageRun struct {
	ID     string
	Status string
	Text   string
	Tools  []struct {
		Name   string
		State  string
		Result bool
	}
}

func (b *browser) run(n int) pageRun {
	b.t.Helper()
	return eval[pageRun](b, fmt.Sprintf(`(%s)(%d)`, runJS, n))
}

// untilRun waits until the n-th run has the status.
func (b *browser) untilRun(n int, status string) pageRun {
	b.t.Helper()
	b.until(fmt.Sprintf("run %d %s", n, status), fmt.Sprintf(`((r) => r !== null && r.status === %q)((%s)(%d))`, status, runJS, n))
	return b.run(n)
}

// storedContent is the run's assistant text as the server's log has it.
func storedContent(t *testing.T, api *servertest.Server, thread, runID string) string {
	t.Helper()
	var page struct {
		Messages []struct {
			RunID, Role, Content string
		}
	}
	if code := api.DoInto(http.MethodGet, "/instance-ai/threads/"+thread+"/messages?limit=200", "", &page); code != http.StatusOK {
		t.Fatalf("messages of %s: %d", thread, code)
	}
	for _, m := range page.Messages {
		if m.RunID == runID && m.Role == "assistant" {
			return m.Content
		}
	}
	t.Fatalf("messages of %s: no assistant message of run %s", thread, runID)
	return ""
}

func launch(t *testing.T, delay time.Duration, flags ...string) *servertest.Process {
	args := append([]string{"-store", "sqlite:" + filepath.Join(t.TempDir(), "console.db"), "-script-delay", delay.String(),
		"-drain-timeout", "0"}, flags...)
	return servertest.Launch(t, args...)
}

// TestConsoleChatToolsApprovalsAGUI: threads, a streamed run with its tool
// call, an approval, the AG-UI view of a suspended and of a missing run.
func TestConsoleChatToolsApprovalsAGUI(t *testing.T) {
	b := newBrowser(t)
	p := launch(t, 2*time.Millisecond)
	b.do("load the console", chromedp.Navigate(p.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=new-thread-form]`)))

	// A bad id is refused with the server's message.
	b.do("bad id", chromedp.SetValue(chromedp.CSS(`[data-testid=new-thread-id]`), "no spaces allowed"),
		chromedp.Click(chromedp.CSS(`[data-testid=new-thread-create]`)))
	b.until("bad id message", `(() => { const n = document.querySelector('[data-testid=notice]'); return !n.hidden && /id/.test(n.textContent); })()`)

	b.createThread("console-1", "")
	b.send("simple hello")
	first := b.untilRun(0, "completed")
	if !strings.Contains(first.Text, "hello") || len(first.Tools) == 0 || !first.Tools[0].Result || first.Tools[0].State != "done" {
		t.Fatalf("simple hello on the page: %+v", first)
	}
	if want := storedContent(t, p.API, "console-1", first.ID); first.Text != want {
		t.Fatalf("the page shows %q, the log %q", first.Text, want)
	}
	b.until("user message", `document.querySelector('[data-testid=run] [data-testid=user-message]').textContent.includes('simple hello')`)
	b.until("title from the first message", `[...document.querySelectorAll('[data-testid=thread-item]')].some((e) => e.textContent.includes('simple hello'))`)
	b.shot("simple-hello")

	// An approval: the card, the AG-UI view of the suspended run, the answer.
	b.send("confirm")
	b.until("approval card", `!!document.querySelector('[data-testid=approval-card] [data-testid=approve]')`)
	b.shot("approval-card")
	b.do("AG-UI tab", chromedp.Click(chromedp.CSS(`[data-testid=tab-agui]`)))
	// A run waiting for its approval is rejoined as over: the snapshot,
	// then the interrupt.
	b.until("AG-UI events of the suspended run", `(() => {
	  const types = [...document.querySelectorAll('[data-testid=agui-event]')].map((e) => e.dataset.type);
	  const fin = document.querySelector('[data-testid=agui-event][data-type=RUN_FINISHED]');
	  return types[0] === 'RUN_STARTED' && types[1] === 'MESSAGES_SNAPSHOT' && fin !== null && fin.textContent.includes('outcome=interrupt') &&
	    document.querySelector('[data-testid=agui-state]').textContent === 'run finished'; })()`)
	b.until("AG-UI messages", `(() => { const m = [...document.querySelectorAll('[data-testid=agui-message]')];
	  return m.some((e) => e.dataset.role === 'user' && e.textContent.includes('confirm')) &&
	    m.some((e) => e.dataset.role === 'assistant' && e.textContent.includes('hello')); })()`)
	b.shot("agui-suspended")
	b.do("native tab", chromedp.Click(chromedp.CSS(`[data-testid=tab-native]`)),
		chromedp.Click(chromedp.CSS(`[data-testid=approval-card] [data-testid=approve]`)))
	second := b.untilRun(1, "completed")
	if len(second.Tools) == 0 || !second.Tools[0].Result || second.Text == "" {
		t.Fatalf("confirm after the approval: %+v", second)
	}
	if want := storedContent(t, p.API, "console-1", second.ID); second.Text != want {
		t.Fatalf("the page shows %q, the log %q", second.Text, want)
	}
	b.until("approval card gone", `document.querySelector('[data-testid=approval-card]') === null`)
	b.shot("approved")

	// The AG-UI view follows a new run live: its text streams in as
	// TEXT_MESSAGE_* events and builds the same text as the native view's.
	b.do("AG-UI tab again", chromedp.Click(chromedp.CSS(`[data-testid=tab-agui]`)))
	b.until("AG-UI at the last run's end", `document.querySelector('[data-testid=agui-state]').textContent === 'run finished'`)
	b.send("long 1500")
	b.until("AG-UI live run", `(() => { const types = [...document.querySelectorAll('[data-testid=agui-event]')].map((e) => e.dataset.type);
	  return types.includes('TEXT_MESSAGE_START') && types.includes('TEXT_MESSAGE_CONTENT') && types.includes('RUN_FINISHED') &&
	    document.querySelector('[data-testid=agui-state]').textContent === 'run finished'; })()`)
	b.shot("agui-live")
	b.do("native tab again", chromedp.Click(chromedp.CSS(`[data-testid=tab-native]`)))
	third := b.untilRun(2, "completed")
	aguiText := eval[string](b, `[...document.querySelectorAll('[data-testid=agui-message][data-role=assistant] .text')].pop().textContent`)
	if third.Text == "" || aguiText != third.Text {
		t.Fatalf("the AG-UI view built %d characters, the native view shows %d", len(aguiText), len(third.Text))
	}

	// A thread with no run yet: the AG-UI view says 404.
	b.createThread("console-empty", "Nothing yet")
	b.do("AG-UI tab, empty thread", chromedp.Click(chromedp.CSS(`[data-testid=tab-agui]`)))
	b.until("AG-UI 404", `document.querySelector('[data-testid=agui-state]').textContent.includes('404')`)
	b.do("native tab, empty thread", chromedp.Click(chromedp.CSS(`[data-testid=tab-native]`)))

	// Rename and delete.
	b.do("rename", chromedp.SetValue(chromedp.CSS(`[data-testid=thread-title]`), "Renamed here"),
		chromedp.Click(chromedp.CSS(`[data-testid=rename]`)))
	b.until("renamed in the list", `[...document.querySelectorAll('[data-testid=thread-item]')].some((e) => e.dataset.threadId === 'console-empty' && e.textContent.includes('Renamed here'))`)
	b.do("delete", chromedp.Click(chromedp.CSS(`[data-testid=delete-thread]`)))
	b.until("deleted", `location.hash === '' && ![...document.querySelectorAll('[data-testid=thread-item]')].some((e) => e.dataset.threadId === 'console-empty')`)
	if code, _ := p.API.Do(http.MethodGet, "/instance-ai/threads/console-empty/status", ""); code != http.StatusNotFound {
		t.Fatalf("status of the deleted thread: %d, want 404", code)
	}

	// Reload keeps the thread (the id is in the URL) and replays its runs.
	b.do("reload", chromedp.Navigate(p.URL+"/#thread=console-1"))
	b.until("runs after reload", `document.querySelectorAll('[data-testid=run][data-status=completed]').length === 3`)
	if got := b.run(1); got.Text != second.Text {
		t.Fatalf("after a reload the page shows %q, before %q", got.Text, second.Text)
	}

	// A background agent: a sub-agent in the tree that completes after
	// the orchestrator's run-finish.
	b.send("background")
	b.untilRun(3, "completed")
	b.until("the background agent completed", `(() => { const a = document.querySelectorAll('[data-testid=run]')[3].querySelector('[data-testid=sub-agent]');
	  return a !== null && a.dataset.status === 'completed' && a.textContent.includes('eval-setup') &&
	    a.querySelector('[data-testid=agent-result]').textContent.includes('evaluation nodes'); })()`)
	b.shot("background")

	// A second message while a run is active is refused; Cancel stops it.
	b.send("long 3000")
	b.until("long run streaming", fmt.Sprintf(`((r) => r !== null && r.status === 'active' && r.text.length > 0)((%s)(4))`, runJS))
	b.send("simple too early")
	b.until("409 message", `document.querySelector('[data-testid=notice]').textContent.includes('already active')`)
	b.do("cancel", chromedp.Click(chromedp.CSS(`[data-testid=cancel-run]`)))
	cancelled := b.untilRun(4, "cancelled")
	b.until("cancel button hidden", `document.querySelector('[data-testid=cancel-run]').hidden`)
	if want := storedContent(t, p.API, "console-1", cancelled.ID); cancelled.Text != want {
		t.Fatalf("cancelled run: the page shows %d characters, the log %d", len(cancelled.Text), len(want))
	}

	if *updateScreenshot {
		writeDocsScreenshot(t, b)
	}
}

// writeDocsScreenshot writes docs/console.png: a thread with a finished
// tasks run and a tools run.
func writeDocsScreenshot(t *testing.T, b *browser) {
	b.createThread("release-checklist", "Release checklist")
	b.send("tasks")
	b.untilRun(0, "completed")
	b.send("tools")
	b.untilRun(1, "completed")
	b.until("no run active", `document.querySelector('[data-testid=cancel-run]').hidden`)
	b.do("scroll to the top", chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
	path := b.shot("docs")
	if path == "" {
		t.Fatal("no screenshot for docs/console.png")
	}
	png, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("..", "..", "docs", "console.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote docs/console.png from %s", path)
}

// TestConsoleRestartMidRun stops the server in the middle of a long run,
// gracefully and then with SIGKILL, and starts it again on the same port
// and database: the page reconnects by itself, and the text it shows for
// the run is exactly the text the server's log has, no prefix twice.
func TestConsoleRestartMidRun(t *testing.T) {
	b := newBrowser(t)
	// A short lease: the runs of the killed process are settled within
	// seconds of the restart.
	p := launch(t, 2*time.Millisecond, "-lease", "2s", "-lease-renew", "250ms")
	b.do("load the console", chromedp.Navigate(p.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=new-thread-form]`)))
	b.createThread("restart-1", "Restarts")
	for i, stop := range []struct {
		name string
		do   func()
	}{{"SIGTERM", p.Stop}, {"SIGKILL", p.Kill}} {
		b.send("long 3000")
		b.until(stop.name+": text streaming", fmt.Sprintf(`((r) => r !== null && r.status === 'active' && r.text.length > 200)((%s)(%d))`, runJS, i))
		before := b.run(i)
		stop.do()
		b.until(stop.name+": the page sees the loss", `document.querySelector('[data-testid=conn-state]').textContent === 'reconnecting'`)
		b.shot("reconnecting-" + stop.name)
		p.Start()
		b.until(stop.name+": live again", `document.querySelector('[data-testid=conn-state]').textContent === 'live'`)
		got := b.untilRun(i, "cancelled")
		if got.ID != before.ID {
			t.Fatalf("%s: run %d is %s after the restart, %s before", stop.name, i, got.ID, before.ID)
		}
		want := storedContent(t, p.API, "restart-1", got.ID)
		if got.Text != want {
			t.Fatalf("%s: the page shows %d characters for the run, the log %d\npage: %.200q\nlog:  %.200q", stop.name, len(got.Text), len(want), got.Text, want)
		}
		if stop.name == "SIGTERM" && want == "" {
			t.Fatalf("%s: a graceful stop should have flushed the run's text", stop.name)
		}
		t.Logf("%s: the page showed %d characters when the server stopped; now the page and the log agree on %d", stop.name, len(before.Text), len(want))
		b.shot("restarted-" + stop.name)
	}
}

// TestConsoleWithTokens: with --tokens and --query-token, the page without
// a token says what is needed; with the token it lists, streams and chats.
func TestConsoleWithTokens(t *testing.T) {
	const token = "console-token-0123456789"
	b := newBrowser(t)
	p := launch(t, 2*time.Millisecond, "-tokens", token+"=alice", "-query-token")
	b.do("load the console", chromedp.Navigate(p.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=new-thread-form]`)))
	b.until("401 message", `(() => { const n = document.querySelector('[data-testid=notice]'); return !n.hidden && n.textContent.includes('needs a token'); })()`)
	b.shot("needs-token")
	b.do("enter the token", chromedp.SetValue(chromedp.CSS(`[data-testid=token-input]`), token),
		chromedp.Click(chromedp.CSS(`[data-testid=token-save]`)))
	b.until("notice cleared", `document.querySelector('[data-testid=notice]').hidden`)
	b.createThread("alice-1", "")
	b.send("simple with a token")
	got := b.untilRun(0, "completed")
	if want := storedContent(t, p.API.As(token), "alice-1", got.ID); got.Text != want || want == "" {
		t.Fatalf("the page shows %q, the log %q", got.Text, want)
	}
	if stored := eval[string](b, `localStorage.getItem('threadline.token')`); stored != token {
		t.Fatalf("the token is not kept: %q", stored)
	}
	b.shot("with-token")
	// A reload keeps the token and the thread.
	b.do("reload", chromedp.Navigate(p.URL+"/#thread=alice-1"))
	b.until("run after reload", `document.querySelectorAll('[data-testid=run][data-status=completed]').length === 1 &&
	  document.querySelector('[data-testid=conn-state]').textContent === 'live'`)
}

// TestConsoleWithoutQueryToken: a server with tokens but without
// --query-token takes the token on fetches and refuses it on the event
// streams; the page says that the server needs --query-token.
func TestConsoleWithoutQueryToken(t *testing.T) {
	const token = "console-token-0123456789"
	b := newBrowser(t)
	p := launch(t, 2*time.Millisecond, "-tokens", token+"=alice")
	b.do("load the console", chromedp.Navigate(p.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=new-thread-form]`)),
		chromedp.SetValue(chromedp.CSS(`[data-testid=token-input]`), token),
		chromedp.Click(chromedp.CSS(`[data-testid=token-save]`)))
	b.do("create a thread", chromedp.SetValue(chromedp.CSS(`[data-testid=new-thread-id]`), "no-query-token"),
		chromedp.Click(chromedp.CSS(`[data-testid=new-thread-create]`)))
	b.until("the --query-token message", `(() => { const n = document.querySelector('[data-testid=notice]');
	  return !n.hidden && n.textContent.includes('--query-token') &&
	    document.querySelector('[data-testid=conn-state]').textContent === 'offline'; })()`)
	b.shot("needs-query-token")
}
