package console_test

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"testing"
)

// The console draws an image attachment from its inline bytes or its
// http(s) URL only, and names every other file; every string is set as
// text or an attribute (render-attachments.mjs fails on innerHTML).
func TestAttachmentsRender(t *testing.T) {
	node := nodePath(t)
	in := `{"thumbs":[
		{"type":"file","data":"iVBORw0KGgo=","mimeType":"image/png","fileName":"dot.png"},
		{"type":"file","data":"iVBORw0KGgo=","mimeType":"image/jpeg; q=1","fileName":"a.jpg"},
		{"type":"file","data":"PHN2Zz4=","mimeType":"image/svg+xml","fileName":"x.svg"},
		{"type":"file","data":"AA\"><img src=x>","mimeType":"image/png","fileName":"bad"},
		{"type":"file","data":"JVBERi0=","mimeType":"application/pdf","fileName":"r.pdf"},
		{"type":"file","data":"","kind":"image","url":"https://example.com/a.png","mimeType":""},
		{"type":"file","data":"","kind":"image","url":"javascript:alert(1)","mimeType":""},
		{"type":"file","data":"iVBORw0KGgo=","kind":"document","mimeType":"image/png","fileName":"as-document.png"}],
	"parts":[{"type":"text","text":"see "},{"type":"text","text":"<b>this</b>"},
		{"type":"image","source":{"type":"data","value":"iVBORw0KGgo=","mimeType":"image/png"},"metadata":{"filename":"<i>dot</i>.png"}},
		{"type":"document","source":{"type":"file","value":"file-1","mimeType":"application/pdf"}}]}`
	cmd := exec.Command(node, "testdata/render-attachments.mjs", "static")
	cmd.Stdin = bytes.NewReader([]byte(in))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("render-attachments.mjs: %v\n%s", err, stderr.String())
	}
	var got struct {
		Thumbs []*string       `json:"thumbs"`
		Parts  json.RawMessage `json:"parts"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("output %s: %v", out, err)
	}
	wantThumbs := []string{"data:image/png;base64,iVBORw0KGgo=", "data:image/jpeg;base64,iVBORw0KGgo=", "", "", "", "https://example.com/a.png", "", ""}
	if len(got.Thumbs) != len(wantThumbs) {
		t.Fatalf("%d thumbs", len(got.Thumbs))
	}
	for i, w := range wantThumbs {
		g := ""
		if got.Thumbs[i] != nil {
			g = *got.Thumbs[i]
		}
		if g != w {
			t.Errorf("thumb %d = %q, want %q", i, g, w)
		}
	}
	want := `[{"tag":"div","attrs":{"class":"text"},"text":"see <b>this</b>","children":[]},` +
		`{"tag":"div","attrs":{"class":"attachments","data-testid":"attachments"},"children":[` +
		`{"tag":"figure","attrs":{"class":"attachment image","data-testid":"attachment"},"children":[` +
		`{"tag":"img","attrs":{"class":"thumb","src":"data:image/png;base64,iVBORw0KGgo=","alt":"<i>dot</i>.png","loading":"lazy","referrerpolicy":"no-referrer"},"children":[]},` +
		`{"tag":"figcaption","attrs":{},"text":"<i>dot</i>.png","children":[]}]},` +
		`{"tag":"div","attrs":{"class":"attachment file","data-testid":"attachment"},"children":[` +
		`{"tag":"span","attrs":{"class":"file-name"},"text":"file-1","children":[]},` +
		`{"tag":"span","attrs":{"class":"muted"},"text":" application/pdf","children":[]}]}]}]`
	if string(got.Parts) != want {
		t.Errorf("renderParts built\n%s\nwant\n%s", got.Parts, want)
	}
}
