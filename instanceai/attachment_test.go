package instanceai

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestDecodedLen(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 4, 3071, 3072, 3073, 10000} {
		s := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, n))
		if got, err := DecodedLen(s); err != nil || got != n {
			t.Errorf("DecodedLen of %d bytes = %d, %v", n, got, err)
		}
	}
	long := base64.StdEncoding.EncodeToString(make([]byte, 6000))
	for _, bad := range []string{"A", "AAA", "A===", "AA-_", "AA==AAAA", "AAAA\nAAAA", "AA AA==", "====",
		long[:4096] + "AA==" + long[4100:], base64.RawStdEncoding.EncodeToString([]byte("ab"))} {
		if n, err := DecodedLen(bad); err == nil || !strings.Contains(err.Error(), "not base64") {
			t.Errorf("DecodedLen(%.20q) = %d, %v; want a base64 error", bad, n, err)
		}
	}
}

func TestCheckMimeType(t *testing.T) {
	for _, ok := range []string{"image/png", "application/pdf; name=a.pdf", "Image/PNG", "audio/x-wav"} {
		if err := CheckMimeType(ok); err != nil {
			t.Errorf("CheckMimeType(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "png", "image/", "/png", "image png", strings.Repeat("a", 60) + "/" + strings.Repeat("b", 40)} {
		if err := CheckMimeType(bad); err == nil {
			t.Errorf("CheckMimeType(%q) accepted", bad)
		}
	}
}

func TestCheckDeliverable(t *testing.T) {
	for _, tc := range []struct {
		a     Attachment
		field string // "-" for deliverable
	}{
		{Attachment{Data: "AAAA", MimeType: "image/png"}, "-"},
		{Attachment{Data: "AAAA", MimeType: "image/heic"}, "mimeType"},
		{Attachment{Kind: KindImage, URL: "https://x/a.png"}, "-"},
		{Attachment{Kind: KindImage, URL: "file:///etc/passwd"}, "url"},
		{Attachment{Kind: KindImage, FileID: "f"}, ""},
		{Attachment{Data: "AAAA", MimeType: "audio/mpeg"}, "-"},
		{Attachment{Data: "AAAA", MimeType: "audio/flac"}, "mimeType"},
		{Attachment{Kind: KindAudio, URL: "https://x/a.wav", MimeType: "audio/wav"}, ""},
		{Attachment{Data: "AAAA", MimeType: "video/mp4"}, ""},
		{Attachment{Data: "AAAA", MimeType: "application/pdf"}, "-"},
		{Attachment{Kind: KindDocument, FileID: "file-1"}, "-"},
		{Attachment{Kind: KindDocument, URL: "https://x/a.pdf"}, ""},
		{Attachment{Kind: "spreadsheet", Data: "AAAA"}, "kind"},
	} {
		err := CheckDeliverable(tc.a)
		switch {
		case tc.field == "-" && err != nil:
			t.Errorf("%+v refused: %v", tc.a, err)
		case tc.field != "-" && (err == nil || err.Field != tc.field):
			t.Errorf("%+v: %v, want a refusal at %q", tc.a, err, tc.field)
		}
	}
}

// The limits and the stored attachment's shape are n8n's own: the pinned
// @n8n/api-types says so (testdata/n8n-schema/attachments.js).
func TestAttachmentsMatchN8N(t *testing.T) {
	node, err := exec.LookPath("node")
	if err == nil && !fileExists(filepath.Join(n8nSchemaDir, "node_modules", "@n8n", "api-types", "package.json")) {
		err = os.ErrNotExist
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("needs node and instanceai/%s installed: %v", n8nSchemaDir, err)
		}
		t.Skipf("skipping: node or the n8n schema packages are missing (make node-deps): %v", err)
	}
	atts := []Attachment{
		{Type: AttachmentFile, Data: "iVBORw0KGgo=", MimeType: "image/png", FileName: "dot.png"},
		{Type: AttachmentFile, Data: "JVBERi0=", MimeType: "application/pdf", FileName: ""},
	}
	body, _ := json.Marshal(atts)
	cmd := exec.Command(node, "attachments.js")
	cmd.Dir = n8nSchemaDir
	cmd.Stdin = bytes.NewReader(body)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("attachments.js: %v\n%s", err, stderr.String())
	}
	var rep struct {
		Limits struct {
			Base64, TotalBase64, Decoded, TotalDecoded int
		}
		Results []struct {
			Success, Exact bool
			Issues         []string
		}
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("report %s: %v", out, err)
	}
	if rep.Limits.Decoded != MaxAttachmentBytes || rep.Limits.TotalDecoded != MaxMessageAttachmentBytes ||
		rep.Limits.Base64 != MaxAttachmentBytes/3*4 || rep.Limits.TotalBase64 != MaxMessageAttachmentBytes/3*4 {
		t.Errorf("n8n's limits %+v; ours %d and %d decoded", rep.Limits, MaxAttachmentBytes, MaxMessageAttachmentBytes)
	}
	for i, r := range rep.Results {
		if !r.Success || !r.Exact {
			t.Errorf("attachment %d as stored does not pass n8n's instanceAiAttachmentSchema unchanged: %+v", i, r)
		}
	}
}
