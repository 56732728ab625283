package console_test

import (
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gorilla/mux"

	"github.com/threadline/threadline/server/console"
)

func serveConsole(t *testing.T) *httptest.Server {
	// As server.New builds it: no path cleaning, dot segments reach the handler.
	r := mux.NewRouter().SkipClean(true)
	console.Register(r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, url string, header http.Header) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, body
}

// staticFiles lists the files under static/ as the source tree has them.
func staticFiles(t *testing.T) []string {
	var names []string
	err := fs.WalkDir(os.DirFS("static"), ".", func(name string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, name)
		}
		return err
	})
	if err != nil || len(names) == 0 {
		t.Fatalf("static files: %v %v", names, err)
	}
	return names
}

func checkHeaders(t *testing.T, name string, res *http.Response) {
	t.Helper()
	h := res.Header
	if h.Get("Cache-Control") != "no-cache" || h.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("%s: Cache-Control %q, X-Content-Type-Options %q", name, h.Get("Cache-Control"), h.Get("X-Content-Type-Options"))
	}
	csp := h.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'self'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("%s: CSP %q lacks %q", name, csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
		t.Errorf("%s: CSP %q allows inline code", name, csp)
	}
}

func TestIndexAtRoot(t *testing.T) {
	srv := serveConsole(t)
	res, body := get(t, srv.URL+"/", nil)
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET /: %d %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	checkHeaders(t, "/", res)
	index, err := os.ReadFile("static/index.html")
	if err != nil {
		t.Fatal(err)
	}
	if string(body) != string(index) {
		t.Error("GET / is not static/index.html")
	}
	if !strings.Contains(string(body), `<script type="module" src="/console/app.js"></script>`) {
		t.Error("the page does not load /console/app.js as a module")
	}
}

// TestEveryStaticFileIsServed fetches each file under static/ at
// /console/<name>: its bytes, a content type of its kind, the headers,
// and a 304 for a request that already has it.
func TestEveryStaticFileIsServed(t *testing.T) {
	srv := serveConsole(t)
	types := map[string]string{".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
	for _, name := range staticFiles(t) {
		want, err := os.ReadFile(path.Join("static", name))
		if err != nil {
			t.Fatal(err)
		}
		res, body := get(t, srv.URL+"/console/"+name, nil)
		if res.StatusCode != http.StatusOK || string(body) != string(want) {
			t.Errorf("%s: %d, %d bytes, want 200 and the file's %d", name, res.StatusCode, len(body), len(want))
			continue
		}
		ct := res.Header.Get("Content-Type")
		if wantCT, ok := types[path.Ext(name)]; ok && ct != wantCT {
			t.Errorf("%s: Content-Type %q, want %q", name, ct, wantCT)
		}
		if ct == "application/octet-stream" {
			t.Errorf("%s: served as application/octet-stream: add its type to the console's table", name)
		}
		checkHeaders(t, name, res)
		etag := res.Header.Get("ETag")
		again, _ := get(t, srv.URL+"/console/"+name, http.Header{"If-None-Match": {etag}})
		if etag == "" || again.StatusCode != http.StatusNotModified {
			t.Errorf("%s: ETag %q, revalidation %d, want 304", name, etag, again.StatusCode)
		}
	}
	if got, want := len(console.Names()), len(staticFiles(t)); got != want {
		t.Errorf("the binary embeds %d files, static/ has %d", got, want)
	}
}

func TestUnknownFileIsJSON404(t *testing.T) {
	srv := serveConsole(t)
	for _, p := range []string{"/console/nope.js", "/console/sub/app.js", "/console/..%2Fconsole.go", "/console/.hidden"} {
		res, body := get(t, srv.URL+p, nil)
		var e struct {
			Error struct{ Code, Message string }
		}
		if res.StatusCode != http.StatusNotFound || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") ||
			json.Unmarshal(body, &e) != nil || e.Error.Code != "not_found" || e.Error.Message == "" {
			t.Errorf("GET %s: %d %q %s, want a JSON 404 not_found", p, res.StatusCode, res.Header.Get("Content-Type"), body)
		}
	}
}

// TestPageReferencesResolve checks that what the page and its modules load
// is served, and that none of it could break the CSP or the rule that
// event data is never parsed as markup.
func TestPageReferencesResolve(t *testing.T) {
	names := staticFiles(t)
	index, _ := os.ReadFile("static/index.html")
	for _, m := range regexp.MustCompile(`(?:src|href)="/console/([^"]+)"`).FindAllStringSubmatch(string(index), -1) {
		if !slices.Contains(names, m[1]) {
			t.Errorf("index.html loads /console/%s, which static/ lacks", m[1])
		}
	}
	// Without an icon of its own the browser asks for /favicon.ico, a 404
	// it reports as an error in the page's console.
	if !regexp.MustCompile(`<link rel="icon" href="/console/[^"]+\.svg"`).Match(index) {
		t.Error("index.html names no icon")
	}
	if regexp.MustCompile(`<script(?:\s[^>]*)?>[^<]`).Match(index) || regexp.MustCompile(`\sstyle=|<style`).Match(index) ||
		regexp.MustCompile(`\son[a-z]+=`).Match(index) {
		t.Error("index.html has inline script or style, which the CSP blocks")
	}
	imports := regexp.MustCompile(`from '\./([^']+)'`)
	for _, name := range names {
		if path.Ext(name) != ".js" {
			continue
		}
		src, _ := os.ReadFile(path.Join("static", name))
		for _, m := range imports.FindAllStringSubmatch(string(src), -1) {
			if !slices.Contains(names, m[1]) {
				t.Errorf("%s imports ./%s, which static/ lacks", name, m[1])
			}
		}
		for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
			if strings.Contains(string(src), bad) {
				t.Errorf("%s uses %s", name, bad)
			}
		}
	}
}
