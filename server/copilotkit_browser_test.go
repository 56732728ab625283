package server_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/internal/browsertest"
	"github.com/threadline/threadline/server/servertest"
)

// copilotkitReactDir holds the pinned @copilotkitnext/react, React and
// esbuild, and the page the browser test bundles with them.
const copilotkitReactDir = "testdata/copilotkit-react"

// buildCopilotKitPage starts bundling page.jsx with the pinned esbuild
// into a temporary directory, beside index.html; the function it returns
// waits for the bundle and returns the directory. (The build takes
// seconds: the test starts the browser meanwhile.)
func buildCopilotKitPage(t *testing.T) func() string {
	t.Helper()
	nodeWith(t, copilotkitReactDir, filepath.Join("@copilotkitnext", "react"))
	nodeWith(t, copilotkitReactDir, "esbuild")
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cmd := exec.CommandContext(ctx, filepath.Join("node_modules", ".bin", "esbuild"), "page.jsx",
		"--bundle", "--format=esm", "--outdir="+out, "--jsx=automatic",
		// React and its libraries read it; nothing defines it in a browser.
		`--define:process.env.NODE_ENV="production"`,
		// The chat's markdown renders math with KaTeX, whose stylesheet
		// it imports, fonts and all.
		"--loader:.woff=file", "--loader:.woff2=file", "--loader:.ttf=file",
		// The markdown renderer's highlighter and diagrams come to 20 MB,
		// imported on demand: as chunks, the page loads only what it
		// shows, which keeps its (re)load short on a loaded machine.
		"--splitting",
		"--log-level=warning")
	cmd.Dir = copilotkitReactDir
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("esbuild: %v", err)
	}
	var once sync.Once
	var werr error
	wait := func() error {
		once.Do(func() { werr = cmd.Wait(); cancel() })
		return werr
	}
	// A test that ends first (a skip, a failure) stops the build before
	// its directory goes.
	t.Cleanup(func() { cancel(); _ = wait() })
	return func() string {
		t.Helper()
		if err := wait(); err != nil {
			t.Fatalf("esbuild: %v\n%s", err, output.String())
		}
		html, err := os.ReadFile(filepath.Join(copilotkitReactDir, "index.html"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, "index.html"), html, 0o644); err != nil {
			t.Fatal(err)
		}
		return out
	}
}

// copilotkitSite serves the page and, on the same origin as a CopilotKit
// app's runtime usually is, proxies /copilotkit/ to the Threadline server,
// noting the runtime calls the page makes.
type copilotkitSite struct {
	*httptest.Server
	start time.Time

	mu    sync.Mutex
	calls []string
}

func serveCopilotKitPage(t *testing.T, dir, threadline string) *copilotkitSite {
	t.Helper()
	target, err := url.Parse(threadline)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1 // the runs' SSE, as it comes
	s := &copilotkitSite{start: time.Now()}
	mux := http.NewServeMux()
	mux.Handle("/copilotkit/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		call := r.Method + " " + r.URL.Path
		s.mark("→ " + call)
		// The request is read whole first: Go's HTTP/1 server closes the
		// body of a request once its answer begins, and the runtime
		// answers a connect at once; the proxy's transport, still sending
		// the body upstream, would then drop the connection and cut the
		// stream (golang/go#40747).
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		// (Deferred: the proxy ends a stream the page left with a panic.)
		defer func() {
			if r.Context().Err() != nil {
				s.mark("× " + call + " (aborted by the page)")
			} else {
				s.mark("← " + call)
			}
		}()
		proxy.ServeHTTP(w, r)
	}))
	mux.Handle("/", http.FileServer(http.Dir(dir)))
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// mark notes a runtime call beginning (→), ending (←) or aborted by the
// page (×), or a step of the test, with the time since the site started.
func (s *copilotkitSite) mark(what string) {
	s.mu.Lock()
	s.calls = append(s.calls, fmt.Sprintf("%6.2fs %s", time.Since(s.start).Seconds(), what))
	s.mu.Unlock()
}

func (s *copilotkitSite) log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.calls, "\n")
}

// runProgress is what the log holds of a thread's runs. (A run's text is
// not in it yet while the run streams: the writer stores a reply as one
// block when it ends, and checkpoints it only every 2 s meanwhile.)
type runProgress struct {
	runs     []string // run ids, in order of their run-start
	finished bool     // the last run's run-finish is stored
}

func storedProgress(t *testing.T, store instanceai.Store, thread string) runProgress {
	t.Helper()
	var p runProgress
	for _, r := range servertest.StoredEvents(t, store, thread) {
		switch r.Event.Type {
		case instanceai.TypeRunStart:
			p.runs = append(p.runs, r.Event.RunID)
			p.finished = false
		case instanceai.TypeRunFinish:
			p.finished = true
		}
	}
	return p
}

// The page's view of the conversation: the text of each user and
// assistant message CopilotChat renders, and whether it shows the latest
// reply as done (its toolbar only appears once the run is over).
const copilotkitChatJS = `(() => {
  const text = (sel) => [...document.querySelectorAll(sel)].map((m) => m.firstElementChild.textContent);
  const last = [...document.querySelectorAll('[data-testid=copilot-assistant-message]')].pop();
  return { user: text('[data-testid=copilot-user-message]'), assistant: text('[data-testid=copilot-assistant-message]'),
    done: !!(last && last.querySelector('[data-testid=copilot-assistant-toolbar]')),
    errors: window.copilotkitErrors || [] };
})()`

// copilotkitChatNote sums the page's view up for a failure.
const copilotkitChatNote = `((c) => 'page: ' + JSON.stringify({ user: c.user, done: c.done, errors: c.errors,
  assistant: c.assistant.map((a) => a.length + ' characters, ending ' + a.slice(-30)) }))(` + copilotkitChatJS + `)`

type copilotkitChat struct {
	User      []string
	Assistant []string
	Done      bool
	Errors    []string
}

// TestCopilotKitBrowserReloadMidRun proves that a real CopilotKit React app
// (@copilotkitnext/react 1.54.1's CopilotChat in headless Chromium) works
// on Threadline's runtime routes end to end, and that a reload in the
// middle of a reply loses nothing and doubles nothing: the user's message,
// sent through the chat's own input, streams a reply that shows while the
// run is still under way; after the reload, the page's connect gets the
// thread back from the log and follows the same run live, and the page
// ends with the user's message once and the whole reply once, in one
// assistant message, with no JavaScript error and no second run.
func TestCopilotKitBrowserReloadMidRun(t *testing.T) {
	// 400 deltas 15 ms apart: the run lasts 6 s at the very least, which
	// a reload on a loaded machine fits in several times over, and it
	// stays short enough for a quick test. The test checks, rather than
	// assumes, that the reload landed mid-run.
	const (
		deltas = 400
		thread = "ck-browser"
	)
	message := fmt.Sprintf("long %d", deltas)
	var want strings.Builder
	for i := range deltas {
		fmt.Fprintf(&want, "chunk %d. ", i)
	}
	reply := strings.TrimSpace(want.String())

	built := buildCopilotKitPage(t)
	b := browsertest.New(t, browsertest.ConsoleErrors(), browsertest.FailureNote(copilotkitChatNote))
	store := servertest.OpenStore(t, "sqlite:"+filepath.Join(t.TempDir(), "threadline.db"))
	h := start(t, store, servertest.Options{AgentDelay: 15 * time.Millisecond})
	site := serveCopilotKitPage(t, built(), h.URL)
	chat := func() copilotkitChat { return browsertest.Eval[copilotkitChat](b, copilotkitChatJS) }
	defer func() {
		if t.Failed() {
			t.Logf("runtime calls:\n%s", site.log())
		}
	}()

	b.Navigate(site.URL + "/?thread=" + thread)
	// The chat connects to its (empty) thread first and takes no message
	// while it does: its send button is enabled once the text is in and
	// the connect is over.
	b.Do("type the message", chromedp.SendKeys(chromedp.CSS(`[data-testid=copilot-chat-textarea]`), message))
	b.Until("the send button enabled", `!document.querySelector('[data-testid=copilot-send-button]').disabled`)
	site.mark("test: send")
	b.Do("send", chromedp.Click(chromedp.CSS(`[data-testid=copilot-send-button]`)))

	// Part of the reply is on the page while the log has the run under
	// way: it streams.
	b.Until("the reply streaming in", `((c) => c.assistant.length === 1 && c.assistant[0].startsWith('chunk 0. chunk 1. chunk 2.'))(`+copilotkitChatJS+`)`)
	before := chat()
	p := storedProgress(t, store, thread)
	if len(p.runs) != 1 || p.finished {
		t.Fatalf("when the page showed %d characters of the reply the log had runs %v, finished %v; want one run under way",
			len(before.Assistant[0]), p.runs, p.finished)
	}
	if len(before.Assistant[0]) >= len(reply) || before.Done {
		t.Fatalf("before the reload the page shows the reply done (%d of %d characters, done %v): the run did not stream",
			len(before.Assistant[0]), len(reply), before.Done)
	}

	site.mark("test: reload")
	b.Reload()
	// The reloaded page has the conversation back, the reply in part, and
	// the run is still going: what follows comes live through its connect.
	b.Until("the conversation back after the reload", `((c) => c.user.length === 1 && c.assistant.length === 1 && c.assistant[0].startsWith('chunk 0. '))(`+copilotkitChatJS+`)`)
	after := chat()
	if p := storedProgress(t, store, thread); p.finished {
		t.Fatalf("the run was over when the reloaded page showed it (%d characters of the reply): the reload did not land mid-run; the run needs to last longer",
			len(after.Assistant[0]))
	}
	site.mark("test: the reloaded page shows the run under way")

	finish := waitRunFinish(t, store, thread, 60*time.Second)
	if finish.Status != instanceai.RunCompleted {
		t.Fatalf("the run ended %+v", finish)
	}
	// The chat renders markdown in a React transition, which may commit
	// after the toolbar that marks the reply done: wait for the last
	// chunk, then check the whole.
	b.Until("the reply done on the page", fmt.Sprintf(`((c) => c.done && c.assistant.length > 0 && c.assistant.at(-1).trim().endsWith(%q))(%s)`,
		fmt.Sprintf("chunk %d.", deltas-1), copilotkitChatJS))
	site.mark("test: the page shows the reply done")
	got := chat()
	if len(got.User) != 1 || got.User[0] != message {
		t.Fatalf("user messages on the page: %q, want [%q]", got.User, message)
	}
	if len(got.Assistant) != 1 {
		t.Fatalf("%d assistant messages on the page, want 1: %.200q", len(got.Assistant), got.Assistant)
	}
	if text := strings.TrimSpace(got.Assistant[0]); text != reply {
		t.Fatalf("the reply on the page (%d characters) is not the agent's (%d)\npage: …%s\nwant: …%s",
			len(text), len(reply), text[max(0, len(text)-80):], reply[len(reply)-80:])
	}
	// Once, in the whole page: no copy of it elsewhere either.
	if n := browsertest.Eval[int](b, fmt.Sprintf(`document.body.innerText.split(%q).length - 1`, fmt.Sprintf("chunk %d.", deltas-1))); n != 1 {
		t.Fatalf("the reply's last chunk shows %d times on the page", n)
	}
	if len(got.Errors) > 0 {
		t.Fatalf("CopilotKit reported errors: %q", got.Errors)
	}
	if p := storedProgress(t, store, thread); len(p.runs) != 1 {
		t.Fatalf("the thread has runs %v: the reload started another", p.runs)
	}
	t.Logf("runtime calls:\n%s", site.log())
}
