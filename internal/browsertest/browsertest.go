// Package browsertest drives a headless Chromium from Go tests, for the
// tests that check a page as a user's browser runs it: its fetches and
// streams go over the network, and its JavaScript errors fail the test.
//
// A test without chromium skips, except when CI=true, where it fails: CI
// must not pass by running none of the browser tests.
package browsertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// Step bounds one action or wait of the page; generous, for a loaded
// machine.
const Step = 20 * time.Second

// The window the pages are laid out in.
const (
	width  = 1280
	height = 860
)

// Chromium returns the path of the Chromium to run: $THREADLINE_CHROMIUM,
// /usr/bin/chromium or chromium on the PATH. Without one the test skips,
// or fails when CI=true.
func Chromium(t testing.TB) string {
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

// Option changes what New sets up.
type Option func(*Browser)

// AcceptDialogs answers yes to every alert, confirm and prompt the page
// opens, which would otherwise block it.
func AcceptDialogs() Option { return func(b *Browser) { b.acceptDialogs = true } }

// ConsoleErrors counts console.error calls as errors of the page too:
// libraries that catch their failures often only log them.
func ConsoleErrors() Option { return func(b *Browser) { b.consoleErrors = true } }

// FailureNote is a JavaScript expression for a string that a failure
// reports beside the error, such as the text of the notice the page shows.
func FailureNote(expr string) Option { return func(b *Browser) { b.failureNote = expr } }

// ShotHeight is a JavaScript expression for the height, in pixels, of the
// page's content: Shot captures a viewport that tall, for pages whose own
// height follows the viewport's (a full-page capture would leave sticky
// parts where the viewport ended).
func ShotHeight(expr string) Option { return func(b *Browser) { b.shotHeight = expr } }

// Browser is one headless Chromium tab. The page's uncaught JavaScript
// errors (and console errors, with ConsoleErrors) are collected across
// navigations: any of them fails the test at its end.
type Browser struct {
	t   testing.TB
	ctx context.Context

	acceptDialogs bool
	consoleErrors bool
	failureNote   string
	shotHeight    string

	shots string
	n     int

	mu     sync.Mutex
	errors []string
}

// New starts Chromium for the test, which stops it at its end.
func New(t testing.TB, opts ...Option) *Browser {
	t.Helper()
	b := &Browser{t: t, shots: os.Getenv("THREADLINE_SCREENSHOTS")}
	for _, o := range opts {
		o(b)
	}
	allocOpts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(Chromium(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		// The network here is closed: without these Chromium keeps trying
		// to reach its services and misbehaves.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(width, height),
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), allocOpts...)
	ctx, cancel := chromedp.NewContext(alloc)
	b.ctx = ctx
	if b.shots == "" {
		b.shots = filepath.Join(os.TempDir(), "threadline-screenshots")
	}
	b.shots = filepath.Join(b.shots, strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.MkdirAll(b.shots, 0o755); err != nil {
		cancel()
		cancelAlloc()
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
	if b.consoleErrors {
		go func() {
			for ev, err := range chromedp.Events(ctx, runtime.ConsoleAPICalled) {
				if err != nil {
					return
				}
				if ev.Type == runtime.ConsoleAPICalledTypeError {
					b.addError("console.error: " + consoleText(ev.Args))
				}
			}
		}()
	}
	if b.acceptDialogs {
		go func() {
			for _, err := range chromedp.Events(ctx, page.JavascriptDialogOpening) {
				if err != nil {
					return
				}
				_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
			}
		}()
	}
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		for _, e := range b.Errors() {
			t.Errorf("JavaScript error on the page: %s", e)
		}
	})
	return b
}

// consoleText renders a console call's arguments as the console shows
// them, roughly.
func consoleText(args []*runtime.RemoteObject) string {
	parts := make([]string, 0, len(args))
	for _, a := range args {
		switch {
		case a.Type == runtime.RemoteObjectTypeString && len(a.Value) > 0:
			s, err := strconv.Unquote(string(a.Value))
			if err != nil {
				s = string(a.Value)
			}
			parts = append(parts, s)
		case a.Description != "":
			parts = append(parts, a.Description)
		default:
			parts = append(parts, string(a.Value))
		}
	}
	return strings.Join(parts, " ")
}

func (b *Browser) addError(s string) {
	b.mu.Lock()
	b.errors = append(b.errors, s)
	b.mu.Unlock()
}

// Errors returns the page's errors collected so far.
func (b *Browser) Errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errors...)
}

// Context is the tab's chromedp context, for actions the helpers do not
// cover; give it a deadline before running anything that may hang.
func (b *Browser) Context() context.Context { return b.ctx }

// Do runs actions within Step; a failure takes a screenshot and fails the
// test.
func (b *Browser) Do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, Step)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.Fail(what, err)
	}
}

// Fail fails the test with a screenshot of the page (and the FailureNote's
// value, when set).
func (b *Browser) Fail(what string, err error) {
	b.t.Helper()
	path := b.Shot("failed-" + strings.ReplaceAll(what, "/", "_"))
	note := ""
	if b.failureNote != "" {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		defer cancel()
		v, nerr := chromedp.Run(ctx, chromedp.Evaluate[string](b.failureNote))
		if nerr != nil {
			v = "no note: " + nerr.Error()
		}
		note = "; " + v
	}
	b.t.Fatalf("%s: %v (screenshot %s%s)", what, err, path, note)
}

// Until waits, within Step, for a JavaScript condition to be true. A
// condition that throws (an element it reads is not there yet, or is
// being drawn again) is not true yet; when the wait ends, the last
// exception is in the failure.
func (b *Browser) Until(what, cond string) {
	b.t.Helper()
	guarded := "(() => { try { return (" + cond + "); } catch (e) { globalThis.__untilError = String(e); return false; } })()"
	ctx, cancel := context.WithTimeout(b.ctx, Step)
	defer cancel()
	err := chromedp.Do(ctx, chromedp.Poll[chromedp.Void](guarded, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(Step)))
	if err == nil {
		return
	}
	lctx, lcancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer lcancel()
	if last, lerr := chromedp.Run(lctx, chromedp.Evaluate[string]("String(globalThis.__untilError ?? '')")); lerr == nil && last != "" {
		err = fmt.Errorf("%w (the condition last threw %s)", err, last)
	}
	b.Fail(what, err)
}

// Navigate loads url and waits for its load event.
func (b *Browser) Navigate(url string) {
	b.t.Helper()
	b.Do("navigate to "+url, chromedp.Navigate(url))
}

// Reload reloads the page, as the user's reload button does, and waits for
// its load event.
func (b *Browser) Reload() {
	b.t.Helper()
	b.Do("reload", chromedp.Reload())
}

// Eval returns a JavaScript expression's value, decoded into T.
func Eval[T any](b *Browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, Step)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.Fail("eval "+expr, err)
	}
	return v
}

// Shot writes a screenshot under $THREADLINE_SCREENSHOTS (or the temporary
// directory's threadline-screenshots), in a folder per test, and returns
// its path; "" when it could not be taken.
func (b *Browser) Shot(name string) string {
	b.n++
	path := filepath.Join(b.shots, fmt.Sprintf("%02d-%s.png", b.n, name))
	ctx, cancel := context.WithTimeout(b.ctx, Step)
	defer cancel()
	var buf []byte
	var err error
	if b.shotHeight != "" {
		var h int64
		h, err = chromedp.Run(ctx, chromedp.Evaluate[int64](b.shotHeight))
		if err == nil {
			err = chromedp.Do(ctx, chromedp.EmulateViewport(width, max(h, height)))
		}
		if err == nil {
			buf, err = chromedp.Run(ctx, chromedp.CaptureScreenshot())
			if rerr := chromedp.Do(ctx, chromedp.EmulateReset()); err == nil {
				err = rerr
			}
		}
	} else {
		buf, err = chromedp.Run(ctx, chromedp.CaptureScreenshot())
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
