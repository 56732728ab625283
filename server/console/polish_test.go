package console_test

// The tests in this file check the console's layout and accessibility in
// the headless Chromium: the empty states, the narrow layout, the scroll
// to a new run, the destructive badge, and axe-core's audit of the main
// states.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/threadline/threadline/internal/browsertest"
)

// axeDir holds the pinned axe-core (`make node-deps` installs it).
var axeDir = filepath.Join("testdata", "axe")

// axeSource returns axe.min.js, skipping the test (failing it on CI) when
// the pinned package is not installed.
func axeSource(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(axeDir, "node_modules", "axe-core", "axe.min.js"))
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("needs the pinned axe-core (npm ci in %s): %v", axeDir, err)
		}
		t.Skipf("skipping: %v (run `make node-deps`)", err)
	}
	return string(src)
}

type axeViolation struct {
	ID      string
	Impact  string
	Help    string
	Targets []string
}

// audit runs axe-core on the page as it stands and fails the test on any
// serious or critical violation, naming the rule, its help and the
// elements.
func (b *browser) audit(state, axe string) {
	b.t.Helper()
	if !browsertest.Eval[bool](b.Browser, `typeof window.axe !== 'undefined'`) {
		b.Do("inject axe-core", chromedp.Evaluate[chromedp.Void](axe+"\n;undefined"))
	}
	ctx, cancel := context.WithTimeout(b.Context(), browsertest.Step)
	defer cancel()
	found, err := chromedp.Run(ctx, chromedp.Evaluate[[]axeViolation](`axe.run(document, { resultTypes: ['violations'] }).then((r) =>
	  r.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) =>
	    ({ id: v.id, impact: v.impact, help: v.help, targets: v.nodes.map((n) => n.target.join(' ')) })))`, chromedp.EvalAwaitPromise))
	if err != nil {
		b.Fail("axe on "+state, err)
	}
	if len(found) == 0 {
		return
	}
	var msg strings.Builder
	for _, v := range found {
		fmt.Fprintf(&msg, "\n  %s (%s): %s\n    %s", v.ID, v.Impact, v.Help, strings.Join(v.Targets, "\n    "))
	}
	b.Shot("axe-" + strings.ReplaceAll(state, " ", "-"))
	b.t.Errorf("axe-core on %s: %d serious or critical violations:%s", state, len(found), msg.String())
}

// viewport lays the page out in a window w×h.
func (b *browser) viewport(w, h int64) {
	b.t.Helper()
	b.Do(fmt.Sprintf("viewport %dx%d", w, h), chromedp.EmulateViewport(w, h))
	b.Until(fmt.Sprintf("laid out at %d px", w), fmt.Sprintf(`window.innerWidth === %d`, w))
}

// colorScheme makes the page see prefers-color-scheme as light or dark
// ("" for the system's).
func (b *browser) colorScheme(scheme string) {
	b.t.Helper()
	var features []*emulation.MediaFeature
	if scheme != "" {
		features = []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}
	}
	ctx, cancel := context.WithTimeout(b.Context(), browsertest.Step)
	defer cancel()
	if _, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{Features: features}); err != nil {
		b.Fail("color scheme "+scheme, err)
	}
}

// windowShot saves what the window shows as it is laid out now (Shot
// lays the page out at the full width first).
func (b *browser) windowShot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.Context(), browsertest.Step)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(b.t.TempDir(), name+".png")
	if dir := os.Getenv("THREADLINE_SCREENSHOTS"); dir != "" {
		path = filepath.Join(dir, b.t.Name()+"-"+name+".png")
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", path)
}

// noOverflow checks that nothing sticks out sideways and that the chat
// bar's input and button are within the window.
func (b *browser) noOverflow(where string) {
	b.t.Helper()
	type layout struct {
		ScrollWidth, InnerWidth int
		InputWidth, SendRight   float64
	}
	got := browsertest.Eval[layout](b.Browser, `(() => { const i = document.querySelector('[data-testid=chat-input]').getBoundingClientRect();
	  const s = document.querySelector('[data-testid=chat-send]').getBoundingClientRect();
	  return { scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth, inputWidth: i.width, sendRight: s.right }; })()`)
	if got.ScrollWidth > got.InnerWidth {
		b.Shot("overflow-" + where)
		b.t.Errorf("%s: the page is %d px wide in a %d px window", where, got.ScrollWidth, got.InnerWidth)
	}
	if got.InputWidth < 120 || got.SendRight > float64(got.InnerWidth) {
		b.Shot("chat-bar-" + where)
		b.t.Errorf("%s: the chat bar is not usable: input %.0f px wide, Send ends at %.0f px of %d", where, got.InputWidth, got.SendRight, got.InnerWidth)
	}
}

// TestConsoleEmptyStatesLayoutAccessibility: the empty states say what to
// do and go away; the layout holds from 360 px with a tool call and long
// unbroken text; a new run is scrolled into view; a destructive approval
// has its badge; and axe-core finds nothing serious on the main states.
func TestConsoleEmptyStatesLayoutAccessibility(t *testing.T) {
	axe := axeSource(t)
	b := newBrowser(t)
	p := launch(t, 0)
	b.Do("load the console", chromedp.Navigate(p.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=new-thread-form]`)))

	// No thread: the list says to create one, and what to send.
	b.Until("no-threads text", `(() => { const e = document.querySelector('[data-testid=threads-empty]');
	  return !e.hidden && e.offsetHeight > 0 && ['New thread', 'simple hello', 'tools', 'confirm'].every((w) => e.textContent.includes(w)); })()`)
	b.Shot("no-threads")
	b.audit("the empty thread list", axe)

	// A thread without a run: the view says what to type.
	b.createThread("polish-1", "Layout")
	b.Until("no-threads text gone", `document.querySelector('[data-testid=threads-empty]').hidden`)
	b.Until("no-run text", `(() => { const e = document.querySelector('[data-testid=runs-empty]');
	  return !e.hidden && e.offsetHeight > 0 && ['Send', 'simple hello', 'tools', 'confirm'].every((w) => e.textContent.includes(w)); })()`)
	b.audit("a thread without a run", axe)

	// A run with a tool call and long unbroken text.
	long := "simple " + strings.Repeat("unbroken", 60)
	b.send(long)
	run := b.untilRun(0, "completed")
	if len(run.Tools) == 0 {
		t.Fatalf("the run has no tool call: %+v", run)
	}
	b.Until("no-run text gone", `document.querySelector('[data-testid=runs-empty]').hidden`)
	b.noOverflow("1280x800")
	b.audit("a thread with a finished run", axe)
	b.viewport(1280, 800)
	b.noOverflow("1280x800")
	b.viewport(360, 740)
	b.Until("stacked", `(() => { const n = document.querySelector('nav.threads').getBoundingClientRect();
	  const m = document.querySelector('[data-testid=thread-view]').getBoundingClientRect(); return m.top >= n.bottom - 1; })()`)
	b.noOverflow("360x740")
	b.audit("the narrow layout", axe)
	b.windowShot("narrow-360")
	b.Do("reset the viewport", chromedp.EmulateReset())

	// More runs, scrolled to the top: a new run is brought into view.
	b.send("long 1500")
	b.untilRun(1, "completed")
	b.send("tools")
	b.untilRun(2, "completed")
	b.Until("no run active", `document.querySelector('[data-testid=cancel-run]').hidden`)
	if !browsertest.Eval[bool](b.Browser, `document.documentElement.scrollHeight > 2 * window.innerHeight`) {
		t.Fatal("the page is not tall enough for the scroll check")
	}
	b.Do("scroll to the top", chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
	b.Until("at the top", `window.scrollY === 0`)
	b.send("simple scrolled")
	b.Until("the new run in view", `(() => { const r = document.querySelectorAll('[data-testid=run]')[3]; if (!r) return false;
	  const b = r.getBoundingClientRect(); return b.top >= 0 && b.top < window.innerHeight; })()`)
	b.untilRun(3, "completed")

	// A destructive approval: a badge in words, with an accessible name.
	b.send("confirm")
	b.Until("destructive badge", `(() => { const s = document.querySelector('[data-testid=approval-card] [data-testid=severity-badge]');
	  return !!s && s.dataset.severity === 'destructive' && /destructive/i.test(s.textContent) &&
	    s.getAttribute('role') === 'img' && /destructive/i.test(s.getAttribute('aria-label')); })()`)
	b.Shot("destructive")
	b.audit("an approval card", axe)
	b.colorScheme("dark")
	b.Until("dark colors", `matchMedia('(prefers-color-scheme: dark)').matches`)
	b.audit("an approval card in the dark scheme", axe)
	b.Shot("destructive-dark")
	b.colorScheme("")

	b.Do("AG-UI tab", chromedp.Click(chromedp.CSS(`[data-testid=tab-agui]`)))
	b.Until("AG-UI events", `document.querySelector('[data-testid=agui-state]').textContent === 'run finished'`)
	b.audit("the AG-UI view", axe)
}
