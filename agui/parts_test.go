package agui

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/threadline/threadline/instanceai"
)

// input is a run request whose second message is a user message of the
// given content parts.
func input(parts string) []byte {
	return []byte(`{"threadId":"t","runId":"r","messages":[{"id":"m0","role":"user","content":"hi"},` +
		`{"id":"m1","role":"user","content":` + parts + `}]}`)
}

func b64(n int) string { return base64.StdEncoding.EncodeToString(make([]byte, n)) }

func TestContentPartsAccepted(t *testing.T) {
	in, err := DecodeRunAgentInput(input(`[{"type":"text","text":"see "},
		{"type":"image","source":{"type":"data","value":"iVBORw0KGgo=","mimeType":"image/png"},"metadata":{"filename":"dot.png"}},
		{"type":"image","source":{"type":"url","value":"https://example.com/a.jpg"}},
		{"type":"audio","source":{"type":"data","value":"UklGRg==","mimeType":"audio/wav"}},
		{"type":"document","source":{"type":"data","value":"JVBERi0=","mimeType":"application/pdf; name=x"},"id":"p4"},
		{"type":"document","source":{"type":"file","value":"file-1","provider":"openai"}},
		{"type":"text","text":"these"}]`))
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	m := in.Messages[1]
	if m.Text() != "see these" {
		t.Errorf("Text() = %q", m.Text())
	}
	want := []instanceai.Attachment{
		{Type: "file", Kind: "image", Data: "iVBORw0KGgo=", MimeType: "image/png", FileName: "dot.png"},
		{Type: "file", Kind: "image", URL: "https://example.com/a.jpg"},
		{Type: "file", Kind: "audio", Data: "UklGRg==", MimeType: "audio/wav"},
		{Type: "file", Kind: "document", Data: "JVBERi0=", MimeType: "application/pdf; name=x"},
		{Type: "file", Kind: "document", FileID: "file-1", Provider: "openai"},
	}
	if got := m.Attachments(); !reflect.DeepEqual(got, want) {
		t.Errorf("Attachments() =\n%+v\nwant\n%+v", got, want)
	}
	if in.Messages[0].Attachments() != nil {
		t.Error("a string message has attachments")
	}
	// As a stored message comes back in MESSAGES_SNAPSHOT: a text part,
	// then the attachments' parts, which read back the same.
	back := Message{ID: "x", Role: RoleUser, Content: PartsContent(m.Text(), m.Attachments())}
	if err := back.validate(); err != nil {
		t.Fatalf("PartsContent is not valid content: %v: %s", err, back.Content)
	}
	if !reflect.DeepEqual(back.Attachments(), want) || back.Text() != "see these" {
		t.Errorf("PartsContent read back as %q %+v", back.Text(), back.Attachments())
	}
	if got := string(PartsContent("plain", nil)); got != `"plain"` {
		t.Errorf("PartsContent without attachments = %s, want a string", got)
	}
}

func TestContentPartsRefused(t *testing.T) {
	img := func(src string) string { return `[{"type":"image","source":` + src + `}]` }
	for _, tc := range []struct {
		name, parts, field, reason string
		status                     int
	}{
		{"part not an object", `["x"]`, "messages[1].content[0]", "content part object", 0},
		{"no type", `[{"text":"x"}]`, "messages[1].content[0].type", "is required", 0},
		{"unknown type", `[{"type":"binary","data":"x"}]`, "messages[1].content[0].type", `"binary" is not one of`, 0},
		{"text part without text", `[{"type":"text"}]`, "messages[1].content[0].text", "is required", 0},
		{"text not a string", `[{"type":"text","text":3}]`, "messages[1].content[0].text", "must be a string", 0},
		{"no source", `[{"type":"image"}]`, "messages[1].content[0].source", "is required", 0},
		{"source not an object", img(`"x"`), "messages[1].content[0].source", "must be an object", 0},
		{"unknown source type", img(`{"type":"blob","value":"x"}`), "messages[1].content[0].source.type", `"blob" is not one of data, url, file`, 0},
		{"no source type", img(`{"value":"x"}`), "messages[1].content[0].source.type", "is required", 0},
		{"empty value", img(`{"type":"data","value":"","mimeType":"image/png"}`), "messages[1].content[0].source.value", "is required", 0},
		{"data without mimeType", img(`{"type":"data","value":"AAAA"}`), "messages[1].content[0].source.mimeType", "is required", 0},
		{"bad mimeType", img(`{"type":"data","value":"AAAA","mimeType":"png"}`), "messages[1].content[0].source.mimeType", "is not a MIME type", 0},
		{"mimeType too long", img(`{"type":"data","value":"AAAA","mimeType":"image/` + strings.Repeat("x", 100) + `"}`), "messages[1].content[0].source.mimeType", "at most 100", 0},
		{"image of another type", img(`{"type":"data","value":"AAAA","mimeType":"image/tiff"}`), "messages[1].content[0].source.mimeType", "image/png, image/jpeg", 0},
		{"url with a bad mimeType", img(`{"type":"url","value":"https://x/a.png","mimeType":"nope"}`), "messages[1].content[0].source.mimeType", "is not a MIME type", 0},
		{"bad base64", img(`{"type":"data","value":"AA!A","mimeType":"image/png"}`), "messages[1].content[0].source.value", "not base64", 0},
		{"base64 not padded", img(`{"type":"data","value":"AAA","mimeType":"image/png"}`), "messages[1].content[0].source.value", "not base64", 0},
		{"base64 with a line break", img(`{"type":"data","value":"AA\nAAA==","mimeType":"image/png"}`), "messages[1].content[0].source.value", "not base64", 0},
		{"image url of another scheme", img(`{"type":"url","value":"ftp://x/a.png"}`), "messages[1].content[0].source.value", "http(s)", 0},
		{"image by file id", img(`{"type":"file","value":"file-1"}`), "messages[1].content[0]", "image by provider file id", 0},
		{"video", `[{"type":"video","source":{"type":"url","value":"https://x/v.mp4"}}]`, "messages[1].content[0]", "video cannot be sent", 0},
		{"audio url", `[{"type":"audio","source":{"type":"url","value":"https://x/a.mp3"}}]`, "messages[1].content[0]", "only as inline data", 0},
		{"audio of another format", `[{"type":"audio","source":{"type":"data","value":"AAAA","mimeType":"audio/ogg"}}]`, "messages[1].content[0].source.mimeType", "WAV", 0},
		{"document url", `[{"type":"document","source":{"type":"url","value":"https://x/a.pdf"}}]`, "messages[1].content[0]", "document by URL", 0},
		{"too many parts", `[` + strings.Repeat(`{"type":"document","source":{"type":"file","value":"f"}},`, 10) +
			`{"type":"document","source":{"type":"file","value":"f"}}]`, "messages[1].content[10]", "at most 10", 0},
		{"file over the limit", img(`{"type":"data","value":"` + b64(instanceai.MaxAttachmentBytes+1) + `","mimeType":"image/png"}`),
			"messages[1].content[0].source.value", "at most 7864320", http.StatusRequestEntityTooLarge},
		{"data URL over the limit", img(`{"type":"url","value":"data:image/png;base64,` + b64(instanceai.MaxAttachmentBytes+3) + `"}`),
			"messages[1].content[0].source.value", "at most 7864320", http.StatusRequestEntityTooLarge},
		{"message over the limit", `[{"type":"text","text":"x"},` +
			`{"type":"image","source":{"type":"data","value":"` + b64(instanceai.MaxAttachmentBytes) + `","mimeType":"image/png"}},` +
			`{"type":"image","source":{"type":"data","value":"` + b64(instanceai.MaxMessageAttachmentBytes-instanceai.MaxAttachmentBytes+1) + `","mimeType":"image/png"}}]`,
			"messages[1].content[2].source.value", "at most 12582912", http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, err := DecodeRunAgentInput(input(tc.parts))
			if err == nil {
				err = in.Validate()
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v, want a *FieldError", err)
			}
			if fe.Field != tc.field || !strings.Contains(fe.Reason, tc.reason) || fe.Status != tc.status {
				t.Errorf("refused as %q: %q (status %d), want %q containing %q (status %d)", fe.Field, fe.Reason, fe.Status, tc.field, tc.reason, tc.status)
			}
		})
	}
}

// The limits are inclusive: a part of exactly MaxAttachmentBytes and a
// message of exactly MaxMessageAttachmentBytes are taken.
func TestContentPartsAtTheLimits(t *testing.T) {
	parts := `[{"type":"image","source":{"type":"data","value":"` + b64(instanceai.MaxAttachmentBytes) + `","mimeType":"image/png"}},` +
		`{"type":"document","source":{"type":"data","value":"` + b64(instanceai.MaxMessageAttachmentBytes-instanceai.MaxAttachmentBytes) + `","mimeType":"application/pdf"}}]`
	in, err := DecodeRunAgentInput(input(parts))
	if err == nil {
		err = in.Validate()
	}
	if err != nil {
		t.Fatalf("a message at the limits was refused: %v", err)
	}
	var raw []json.RawMessage
	_ = json.Unmarshal(in.Messages[1].Content, &raw)
	if len(in.Messages[1].Attachments()) != 2 || len(raw) != 2 {
		t.Errorf("attachments %d", len(in.Messages[1].Attachments()))
	}
}
