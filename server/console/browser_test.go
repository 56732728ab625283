package console_test

// The tests in this file drive the console in a real headless Chromium
// against the real server binary, run as a separate process on SQLite:
// the page's fetches and EventSources go over the network as a user's
// would. Without chromium the tests skip, except when CI=true, where they
// fail.

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/threadline/threadline/internal/browsertest"
	"github.com/threadline/threadline/server/servertest"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "write docs/console.png from the browser test")

// browser is the console in a headless Chromium tab.
type browser struct {
	*browsertest.Browser
	t *testing.T
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	return &browser{t: t, Browser: browsertest.New(t,
		// The delete button asks first: say yes.
		browsertest.AcceptDialogs(),
		browsertest.FailureNote(`'notice ' + JSON.stringify(document.getElementById('notice').textContent)`),
		// The page's own height follows the viewport's: measure its
		// content, so that a screenshot holds the whole page rather than
		// the sticky chat bar where the viewport ended.
		browsertest.ShotHeight(`Math.ceil(Math.max(...['runs', 'agui-events', 'thread-list'].map(
	  (id) => document.getElementById(id).getBoundingClientRect().bottom + window.scrollY)) + 80)`))}
}

// send types a message into the chat box and sends it.
func (b *browser) send(message string) {
	b.t.Helper()
	b.Do("send "+message, chromedp.SetValue(chromedp.CSS(`[data-testid=chat-input]`), message),
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
	b.Do("create thread "+id, steps...)
	b.Until("thread "+id+" open", fmt.Sprintf(`location.hash === %q && document.querySelector('[data-testid=thread-id]').textContent === %q && document.querySelector('[data-testid=conn-state]').textContent === 'live'`,
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
	return browsertest.Eval[pageRun](b.Browser, fmt.Sprintf(`(%s)(%d)`, runJS, n))
}

// untilRun waits until the n-th run has the status.
func (b *browser) untilRun(n int, status string) pageRun {
	b.t.Helper()
	b.Until(fmt.Sprintf("run %d %s", n, status), fmt.Sprintf(`((r) => r !== null && r.status === %q)((%s)(%d))`, status, runJS, n))
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
	b.Do("load the console", chromedp.Navigate(p.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=new-thread-form]`)))

	// A bad id is refused with the server's message.
	b.Do("bad id", chromedp.SetValue(chromedp.CSS(`[data-testid=new-thread-id]`), "no spaces allowed"),
		chromedp.Click(chromedp.CSS(`[data-testid=new-thread-create]`)))
	b.Until("bad id message", `(() => { const n = document.querySelector('[data-testid=notice]'); return !n.hidden && /id/.test(n.textContent); })()`)

	b.createThread("console-1", "")
	b.send("simple hello")
	first := b.untilRun(0, "completed")
	if !strings.Contains(first.Text, "hello") || len(first.Tools) == 0 || !first.Tools[0].Result || first.Tools[0].State != "done" {
		t.Fatalf("simple hello on the page: %+v", first)
	}
	if want := storedContent(t, p.API, "console-1", first.ID); first.Text != want {
		t.Fatalf("the page shows %q, the log %q", first.Text, want)
	}
	b.Until("user message", `document.querySelector('[data-testid=run] [data-testid=user-message]').textContent.includes('simple hello')`)
	b.Until("title from the first message", `[...document.querySelectorAll('[data-testid=thread-item]')].some((e) => e.textContent.includes('simple hello'))`)
	b.Shot("simple-hello")

	// An approval: the card, the AG-UI view of the suspended run, the answer.
	b.send("confirm")
	b.Until("approval card", `!!document.querySelector('[data-testid=approval-card] [data-testid=approve]')`)
	b.Shot("approval-card")
	b.Do("AG-UI tab", chromedp.Click(chromedp.CSS(`[data-testid=tab-agui]`)))
	// A run waiting for its approval is rejoined as over: the snapshot,
	// then the interrupt.
	b.Until("AG-UI events of the suspended run", `(() => {
	  const types = [...document.querySelectorAll('[data-testid=agui-event]')].map((e) => e.dataset.type);
	  const fin = document.querySelector('[data-testid=agui-event][data-type=RUN_FINISHED]');
	  return types[0] === 'RUN_STARTED' && types[1] === 'MESSAGES_SNAPSHOT' && fin !== null && fin.textContent.includes('outcome=interrupt') &&
	    document.querySelector('[data-testid=agui-state]').textContent === 'run finished'; })()`)
	b.Until("AG-UI messages", `(() => { const m = [...document.querySelectorAll('[data-testid=agui-message]')];
	  return m.some((e) => e.dataset.role === 'user' && e.textContent.includes('confirm')) &&
	    m.some((e) => e.dataset.role === 'assistant' && e.textContent.includes('hello')); })()`)
	b.Shot("agui-suspended")
	b.Do("native tab", chromedp.Click(chromedp.CSS(`[data-testid=tab-native]`)),
		chromedp.Click(chromedp.CSS(`[data-testid=approval-card] [data-testid=approve]`)))
	second := b.untilRun(1, "completed")
	if len(second.Tools) == 0 || !second.Tools[0].Result || second.Text == "" {
		t.Fatalf("confirm after the approval: %+v", second)
	}
	if want := storedContent(t, p.API, "console-1", second.ID); second.Text != want {
		t.Fatalf("the page shows %q, the log %q", second.Text, want)
	}
	b.Until("approval card gone", `document.querySelector('[data-testid=approval-card]') === null`)
	b.Shot("approved")

	// The AG-UI view follows a new run live: its text streams in as
	// TEXT_MESSAGE_* events and builds the same text as the native view's.
	b.Do("AG-UI tab again", chromedp.Click(chromedp.CSS(`[data-testid=tab-agui]`)))
	b.Until("AG-UI at the last run's end", `document.querySelector('[data-testid=agui-state]').textContent === 'run finished'`)
	b.send("long 1500")
	b.Until("AG-UI live run", `(() => { const types = [...document.querySelectorAll('[data-testid=agui-event]')].map((e) => e.dataset.type);
	  return types.includes('TEXT_MESSAGE_START') && types.includes('TEXT_MESSAGE_CONTENT') && types.includes('RUN_FINISHED') &&
	    document.querySelector('[data-testid=agui-state]').textContent === 'run finished'; })()`)
	b.Shot("agui-live")
	b.Do("native tab again", chromedp.Click(chromedp.CSS(`[data-testid=tab-native]`)))
	third := b.untilRun(2, "completed")
	aguiText := browsertest.Eval[string](b.Browser, `[...document.querySelectorAll('[data-testid=agui-message][data-role=assistant] .text')].pop().textContent`)
	if third.Text == "" || aguiText != third.Text {
		t.Fatalf("the AG-UI view built %d characters, the native view shows %d", len(aguiText), len(third.Text))
	}

	// A thread with no run yet: the AG-UI view says 404.
	b.createThread("console-empty", "Nothing yet")
	b.Do("AG-UI tab, empty thread", chromedp.Click(chromedp.CSS(`[data-testid=tab-agui]`)))
	b.Until("AG-UI 404", `document.querySelector('[data-testid=agui-state]').textContent.includes('404')`)
	b.Do("native tab, empty thread", chromedp.Click(chromedp.CSS(`[data-testid=tab-native]`)))

	// Rename and delete.
	b.Do("rename", chromedp.SetValue(chromedp.CSS(`[data-testid=thread-title]`), "Renamed here"),
		chromedp.Click(chromedp.CSS(`[data-testid=rename]`)))
	b.Until("renamed in the list", `[...document.querySelectorAll('[data-testid=thread-item]')].some((e) => e.dataset.threadId === 'console-empty' && e.textContent.includes('Renamed here'))`)
	b.Do("delete", chromedp.Click(chromedp.CSS(`[data-testid=delete-thread]`)))
	b.Until("deleted", `location.hash === '' && ![...document.querySelectorAll('[data-testid=thread-item]')].some((e) => e.dataset.threadId === 'console-empty')`)
	if code, _ := p.API.Do(http.MethodGet, "/instance-ai/threads/console-empty/status", ""); code != http.StatusNotFound {
		t.Fatalf("status of the deleted thread: %d, want 404", code)
	}

	// Reload keeps the thread (the id is in the URL) and replays its runs.
	b.Do("reload", chromedp.Navigate(p.URL+"/#thread=console-1"))
	b.Until("runs after reload", `document.querySelectorAll('[data-testid=run][data-status=completed]').length === 3`)
	if got := b.run(1); got.Text != second.Text {
		t.Fatalf("after a reload the page shows %q, before %q", got.Text, second.Text)
	}

	// A background agent: a sub-agent in the tree that completes after
	// the orchestrator's run-finish.
	b.send("background")
	b.untilRun(3, "completed")
	b.Until("the background agent completed", `(() => { const a = document.querySelectorAll('[data-testid=run]')[3].querySelector('[data-testid=sub-agent]');
	  return a !== null && a.dataset.status === 'completed' && a.textContent.includes('eval-setup') &&
	    a.querySelector('[data-testid=agent-result]').textContent.includes('evaluation nodes'); })()`)
	b.Shot("background")

	// A second message while a run is active is refused; Cancel stops it.
	b.send("long 3000")
	b.Until("long run streaming", fmt.Sprintf(`((r) => r !== null && r.status === 'active' && r.text.length > 0)((%s)(4))`, runJS))
	b.send("simple too early")
	b.Until("409 message", `document.querySelector('[data-testid=notice]').textContent.includes('already active')`)
	b.Do("cancel", chromedp.Click(chromedp.CSS(`[data-testid=cancel-run]`)))
	cancelled := b.untilRun(4, "cancelled")
	b.Until("cancel button hidden", `document.querySelector('[data-testid=cancel-run]').hidden`)
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
	b.Until("no run active", `document.querySelector('[data-testid=cancel-run]').hidden`)
	b.Do("scroll to the top", chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
	path := b.Shot("docs")
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
	b.Do("load the console", chromedp.Navigate(p.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=new-thread-form]`)))
	b.createThread("restart-1", "Restarts")
	for i, stop := range []struct {
		name string
		do   func()
	}{{"SIGTERM", p.Stop}, {"SIGKILL", p.Kill}} {
		b.send("long 3000")
		b.Until(stop.name+": text streaming", fmt.Sprintf(`((r) => r !== null && r.status === 'active' && r.text.length > 200)((%s)(%d))`, runJS, i))
		before := b.run(i)
		stop.do()
		b.Until(stop.name+": the page sees the loss", `document.querySelector('[data-testid=conn-state]').textContent === 'reconnecting'`)
		b.Shot("reconnecting-" + stop.name)
		p.Start()
		b.Until(stop.name+": live again", `document.querySelector('[data-testid=conn-state]').textContent === 'live'`)
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
		b.Shot("restarted-" + stop.name)
	}
}

// TestConsoleWithTokens: with --tokens and --query-token, the page without
// a token says what is needed; with the token it lists, streams and chats.
func TestConsoleWithTokens(t *testing.T) {
	const token = "console-token-0123456789"
	b := newBrowser(t)
	p := launch(t, 2*time.Millisecond, "-tokens", token+"=alice", "-query-token")
	b.Do("load the console", chromedp.Navigate(p.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=new-thread-form]`)))
	b.Until("401 message", `(() => { const n = document.querySelector('[data-testid=notice]'); return !n.hidden && n.textContent.includes('needs a token'); })()`)
	b.Shot("needs-token")
	b.Do("enter the token", chromedp.SetValue(chromedp.CSS(`[data-testid=token-input]`), token),
		chromedp.Click(chromedp.CSS(`[data-testid=token-save]`)))
	b.Until("notice cleared", `document.querySelector('[data-testid=notice]').hidden`)
	b.createThread("alice-1", "")
	b.send("simple with a token")
	got := b.untilRun(0, "completed")
	if want := storedContent(t, p.API.As(token), "alice-1", got.ID); got.Text != want || want == "" {
		t.Fatalf("the page shows %q, the log %q", got.Text, want)
	}
	if stored := browsertest.Eval[string](b.Browser, `localStorage.getItem('threadline.token')`); stored != token {
		t.Fatalf("the token is not kept: %q", stored)
	}
	b.Shot("with-token")
	// A reload keeps the token and the thread.
	b.Do("reload", chromedp.Navigate(p.URL+"/#thread=alice-1"))
	b.Until("run after reload", `document.querySelectorAll('[data-testid=run][data-status=completed]').length === 1 &&
	  document.querySelector('[data-testid=conn-state]').textContent === 'live'`)
}

// TestConsoleWithoutQueryToken: a server with tokens but without
// --query-token takes the token on fetches and refuses it on the event
// streams; the page says that the server needs --query-token.
func TestConsoleWithoutQueryToken(t *testing.T) {
	const token = "console-token-0123456789"
	b := newBrowser(t)
	p := launch(t, 2*time.Millisecond, "-tokens", token+"=alice")
	b.Do("load the console", chromedp.Navigate(p.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=new-thread-form]`)),
		chromedp.SetValue(chromedp.CSS(`[data-testid=token-input]`), token),
		chromedp.Click(chromedp.CSS(`[data-testid=token-save]`)))
	b.Do("create a thread", chromedp.SetValue(chromedp.CSS(`[data-testid=new-thread-id]`), "no-query-token"),
		chromedp.Click(chromedp.CSS(`[data-testid=new-thread-create]`)))
	b.Until("the --query-token message", `(() => { const n = document.querySelector('[data-testid=notice]');
	  return !n.hidden && n.textContent.includes('--query-token') &&
	    document.querySelector('[data-testid=conn-state]').textContent === 'offline'; })()`)
	b.Shot("needs-query-token")
}

// TestConsoleShowsAttachments: a user message's files, sent on n8n's chat,
// are shown on the page: an image as a thumbnail the browser decodes (the
// page's image policy admits data URLs), any other file as its name; the
// AG-UI view shows them as the user message's content parts.
func TestConsoleShowsAttachments(t *testing.T) {
	const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
	b := newBrowser(t)
	p := launch(t, 2*time.Millisecond)
	body := `{"message":"simple look at these","attachments":[` +
		`{"type":"file","data":"` + png + `","mimeType":"image/png","fileName":"dot.png"},` +
		`{"type":"file","data":"JVBERi0xLjQK","mimeType":"application/pdf","fileName":"report.pdf"}]}`
	if code, answer := p.API.Do(http.MethodPost, "/instance-ai/chat/console-files", body); code != http.StatusOK {
		t.Fatalf("chat with attachments: %d %v", code, answer)
	}
	b.Do("open the thread", chromedp.Navigate(p.URL+"/#thread=console-files"))
	b.untilRun(0, "completed")
	b.Until("image thumbnail decoded", `(() => { const img = document.querySelector('[data-testid=user-message] [data-testid=attachment] img');
	  if (!img) return false; img.scrollIntoView(); return img.complete && img.naturalWidth === 1 && img.alt === 'dot.png'; })()`)
	b.Until("file name", `[...document.querySelectorAll('[data-testid=user-message] [data-testid=attachment]')].some((e) => e.textContent.includes('report.pdf') && e.textContent.includes('application/pdf') && !e.querySelector('img'))`)
	b.Shot("attachments")
	b.Do("AG-UI tab", chromedp.Click(chromedp.CSS(`[data-testid=tab-agui]`)))
	b.Until("AG-UI user message with its parts", `(() => { const m = [...document.querySelectorAll('[data-testid=agui-message][data-role=user]')].pop();
	  return !!m && m.textContent.includes('simple look at these') && m.textContent.includes('report.pdf') && !!m.querySelector('[data-testid=attachment] img'); })()`)
}
