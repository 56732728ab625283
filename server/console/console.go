package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"time"

	"github.com/gorilla/mux"

	"github.com/threadline/threadline/server/httpjson"
)

//go:embed static
var embedded embed.FS

// ContentSecurityPolicy is sent with every console file: only the
// console's own scripts, styles and API calls run, nothing inline, nothing
// from elsewhere, and no framing, so event data shown on the page cannot
// become code even if a rendering bug put it into markup. Images may come
// from data: and http(s) URLs: the thumbnails of a user message's image
// attachments, inline or by URL (an image runs no code).
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: https: http:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// contentTypes names the types of the files the console ships. The table is
// the console's own so that the answer does not depend on the machine's
// MIME database (which maps .js differently on some systems); a file of
// another kind is served as application/octet-stream.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
	".png":  "image/png",
	".ico":  "image/x-icon",
	".json": "application/json",
}

// file is one embedded file, read once.
type file struct {
	body        []byte
	contentType string
	etag        string
}

// Files are the console's files by name, as /console/{file} serves them.
var files = mustLoad()

func mustLoad() map[string]file {
	root, err := fs.Sub(embedded, "static")
	if err != nil {
		panic(err)
	}
	out := map[string]file{}
	err = fs.WalkDir(root, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(root, name)
		if err != nil {
			return err
		}
		ct, ok := contentTypes[path.Ext(name)]
		if !ok {
			ct = "application/octet-stream"
		}
		sum := sha256.Sum256(body)
		out[name] = file{body: body, contentType: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		panic(err)
	}
	return out
}

// Names lists the files served under /console/.
func Names() []string {
	out := make([]string, 0, len(files))
	for name := range files {
		out = append(out, name)
	}
	return out
}

// Register serves the console on r: the page at / and its files at
// /console/{file}. The files carry no user data, so r is the public router;
// the page's API calls carry the user's token.
func Register(r *mux.Router) {
	r.HandleFunc("/", func(w http.ResponseWriter, req *http.Request) { serve(w, req, "index.html") }).
		Methods(http.MethodGet, http.MethodHead)
	// {file:.+} rather than {file}: a nested name reaches the handler and
	// gets the JSON 404 of an unknown file, not the router's plain one.
	r.HandleFunc("/console/{file:.+}", func(w http.ResponseWriter, req *http.Request) { serve(w, req, mux.Vars(req)["file"]) }).
		Methods(http.MethodGet, http.MethodHead)
}

func serve(w http.ResponseWriter, r *http.Request, name string) {
	f, ok := files[name]
	if !ok {
		httpjson.WriteError(w, httpjson.NewError(http.StatusNotFound, "not_found", "file", "no such console file: %q", name))
		return
	}
	h := w.Header()
	h.Set("Content-Type", f.contentType)
	// no-cache revalidates on every load (the ETag makes that a 304), so a
	// new binary's console is never mixed with the old one's modules.
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("ETag", f.etag)
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(f.body))
}
