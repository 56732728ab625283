package openai_test

import (
	"slices"
	"testing"

	"github.com/threadline/threadline/agent/openai"
	"github.com/threadline/threadline/instanceai"
)

// The attachments of every kind Chat Completions takes, and the exact
// content parts they must become (OpenAI's API reference,
// ChatCompletionRequestUserMessageContentPart: image_url {url},
// input_audio {data, format}, file {file_data | file_id, filename}). The
// model's answer is the recorded-shape fixture openai_text_usage.sse (see
// testdata/README.md).
var (
	sentAttachments = []instanceai.Attachment{
		{Type: "file", Data: "iVBORw0KGgo=", MimeType: "image/png", FileName: "dot.png"},
		{Type: "file", Kind: instanceai.KindImage, URL: "https://example.com/cat.jpg", MimeType: "image/jpeg"},
		{Type: "file", Data: "UklGRg==", MimeType: "audio/wav", FileName: "hi.wav"},
		{Type: "file", Data: "SUQz", MimeType: "audio/mpeg", FileName: "hi.mp3"},
		{Type: "file", Data: "JVBERi0=", MimeType: "application/pdf", FileName: "report.pdf"},
		{Type: "file", Data: "JVBERi0=", MimeType: "application/pdf"},
		{Type: "file", Kind: instanceai.KindDocument, FileID: "file-abc123", Provider: "openai", MimeType: "application/pdf", FileName: "spec.pdf"},
	}
	wantParts = `[{"type":"text","text":"What is in these?"},` +
		`{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}},` +
		`{"type":"image_url","image_url":{"url":"https://example.com/cat.jpg"}},` +
		`{"type":"input_audio","input_audio":{"data":"UklGRg==","format":"wav"}},` +
		`{"type":"input_audio","input_audio":{"data":"SUQz","format":"mp3"}},` +
		`{"type":"file","file":{"file_data":"data:application/pdf;base64,JVBERi0=","filename":"report.pdf"}},` +
		`{"type":"file","file":{"file_data":"data:application/pdf;base64,JVBERi0=","filename":"attachment.pdf"}},` +
		`{"type":"file","file":{"file_id":"file-abc123","filename":"spec.pdf"}}]`
)

func TestAttachmentsAreSentAsContentParts(t *testing.T) {
	f := newFake(t, replay(fixture(t, "openai_text_usage.sse")))
	h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "gpt-4o"})
	evs := h.play(t, instanceai.StartRequest{Message: "What is in these?", Attachments: sentAttachments})
	if fin := finishOf(t, evs); fin.Status != instanceai.RunCompleted {
		t.Fatalf("status %q: %s", fin.Status, shape(evs))
	}
	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	if got, want := reqs[0].summary(), []string{"user:" + wantParts}; !slices.Equal(got, want) {
		t.Errorf("messages =\n%q\nwant\n%q", got, want)
	}
}

// A later run that reads the thread's stored conversation sends the earlier
// message's attachments again, and a message of files alone has no text
// part.
func TestStoredAttachmentsReachLaterRuns(t *testing.T) {
	f := newFake(t, replay(fixture(t, "openai_text_usage.sse")))
	h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "gpt-4o"})
	h.play(t, instanceai.StartRequest{Message: "What is in these?", Attachments: sentAttachments})
	h.play(t, instanceai.StartRequest{Attachments: sentAttachments[:1]})
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	want := []string{"user:" + wantParts, "assistant:Hello! How can I help?",
		`user:[{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]`}
	if got := reqs[1].summary(); !slices.Equal(got, want) {
		t.Errorf("second request's messages =\n%q\nwant\n%q", got, want)
	}
}

// A client's own history (AG-UI input.messages) carries its user messages'
// attachments as the stored conversation does.
func TestClientHistoryAttachmentsAreSent(t *testing.T) {
	f := newFake(t, replay(fixture(t, "openai_text_usage.sse")))
	h := newHarness(t, openai.Config{BaseURL: f.url(), Model: "gpt-4o"})
	h.play(t, instanceai.StartRequest{Message: "and this?", History: []instanceai.HistoryMessage{
		{Role: instanceai.RoleUser, Content: "look", Attachments: sentAttachments[2:3]},
		{Role: instanceai.RoleAssistant, Content: "a sound"},
	}})
	want := []string{`user:[{"type":"text","text":"look"},{"type":"input_audio","input_audio":{"data":"UklGRg==","format":"wav"}}]`,
		"assistant:a sound", "user:and this?"}
	if got := f.requests()[0].summary(); !slices.Equal(got, want) {
		t.Errorf("messages =\n%q\nwant\n%q", got, want)
	}
}
