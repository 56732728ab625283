package server_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/servertest"
)

// Attachments through both protocols, on every store: a native chat's
// files (n8n's InstanceAiFileAttachment) and an AG-UI message's content
// parts are stored with the user message, reach the model as Chat
// Completions content parts, and come back from /messages and in the
// AG-UI rejoin snapshot; refused ones store nothing.

const (
	pngB64 = "iVBORw0KGgo="
	pdfB64 = "JVBERi0xLjQK"
)

// sentContent is the JSON content of message j of the model's request i.
func (f *fakeLLM) sentContent(t *testing.T, i, j int) string {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if i >= len(f.requests) || j >= len(f.requests[i].Messages) {
		t.Fatalf("the model got no message %d in request %d: %d requests", j, i, len(f.requests))
	}
	return contentJSON(t, f.requests[i].Messages[j])
}

// contentJSON is a message's content as JSON.
func contentJSON(t *testing.T, m map[string]any) string {
	t.Helper()
	b, err := json.Marshal(m["content"])
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestNativeChatAttachments(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h, llm := startOpenAI(t, store)
		llm.script(answerStep("A dot and a PDF.", 30, 5))
		h.EnsureThread("files")
		live := h.Connect("files", "", false)
		atts := `[{"type":"file","data":"` + pngB64 + `","mimeType":"image/png","fileName":"dot.png"},` +
			`{"type":"file","data":"` + pdfB64 + `","mimeType":"application/pdf","fileName":"report.pdf"}]`
		code, out := h.Do(http.MethodPost, "/instance-ai/chat/files", `{"message":"What are these?","attachments":`+atts+`}`)
		if code != http.StatusOK {
			t.Fatalf("chat with attachments: %d %v", code, out)
		}
		runID, _ := out["runId"].(string)
		live.Until(wait, servertest.IsRunFinish(runID))

		want := `[{"text":"What are these?","type":"text"},` +
			`{"image_url":{"url":"data:image/png;base64,` + pngB64 + `"},"type":"image_url"},` +
			`{"file":{"file_data":"data:application/pdf;base64,` + pdfB64 + `","filename":"report.pdf"},"type":"file"}]`
		if got := llm.sentContent(t, 0, 0); got != want {
			t.Fatalf("the model got\n%s\nwant\n%s", got, want)
		}

		// /messages returns them where n8n's InstanceAiMessage has them.
		var page struct {
			Messages []struct {
				Role        string            `json:"role"`
				Content     string            `json:"content"`
				Attachments []json.RawMessage `json:"attachments"`
			} `json:"messages"`
		}
		if code := h.DoInto(http.MethodGet, "/instance-ai/threads/files/messages", "", &page); code != http.StatusOK {
			t.Fatalf("messages: %d", code)
		}
		if len(page.Messages) != 2 || page.Messages[0].Role != "user" || page.Messages[0].Content != "What are these?" {
			t.Fatalf("messages %+v", page.Messages)
		}
		got, _ := json.Marshal(page.Messages[0].Attachments)
		if string(got) != atts {
			t.Fatalf("/messages attachments\n%s\nwant\n%s", got, atts)
		}
		if page.Messages[1].Attachments != nil {
			t.Fatalf("the assistant message has attachments: %+v", page.Messages[1])
		}

		// The AG-UI rejoin shows them as the user message's content parts.
		msgs := h.rejoinedMessages("files")
		if len(msgs) < 1 || msgs[0]["role"] != "user" {
			t.Fatalf("rejoined %v", msgs)
		}
		wantParts := `[{"text":"What are these?","type":"text"},` +
			`{"metadata":{"filename":"dot.png"},"source":{"mimeType":"image/png","type":"data","value":"` + pngB64 + `"},"type":"image"},` +
			`{"metadata":{"filename":"report.pdf"},"source":{"mimeType":"application/pdf","type":"data","value":"` + pdfB64 + `"},"type":"document"}]`
		if got := contentJSON(t, msgs[0]); got != wantParts {
			t.Fatalf("rejoin user content\n%s\nwant\n%s", got, wantParts)
		}

		// A message of files alone is taken (n8n's message defaults to
		// ""), and titles a new thread after its first file.
		llm.script(answerStep("A dot.", 10, 2))
		h.EnsureThread("only-files")
		live = h.Connect("only-files", "", false)
		code, out = h.Do(http.MethodPost, "/instance-ai/chat/only-files", `{"attachments":[{"type":"file","data":"`+pngB64+`","mimeType":"image/png","fileName":"dot.png"}]}`)
		if code != http.StatusOK {
			t.Fatalf("chat of files alone: %d %v", code, out)
		}
		runID, _ = out["runId"].(string)
		live.Until(wait, servertest.IsRunFinish(runID))
		if got := llm.sentContent(t, 1, 0); got != `[{"image_url":{"url":"data:image/png;base64,`+pngB64+`"},"type":"image_url"}]` {
			t.Fatalf("files alone reached the model as %s", got)
		}
		titled := false
		for _, th := range h.ListThreads("").Threads {
			titled = titled || th.ID == "only-files" && th.Title == "dot.png"
		}
		if !titled {
			t.Fatalf("threads %+v: want only-files titled dot.png", h.ListThreads("").Threads)
		}
	})
}

func TestNativeChatAttachmentsRefused(t *testing.T) {
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	big := base64.StdEncoding.EncodeToString(make([]byte, instanceai.MaxAttachmentBytes+1))
	half := base64.StdEncoding.EncodeToString(make([]byte, instanceai.MaxMessageAttachmentBytes/2+1))
	file := func(fields string) string { return `{"message":"x","attachments":[` + fields + `]}` }
	for _, tc := range []struct {
		name, body, field string
		status            int
	}{
		{"not an object", file(`"x"`), "attachments[0]", 400},
		{"no type", file(`{"data":"AAAA","mimeType":"image/png","fileName":"a"}`), "attachments[0].type", 400},
		{"a workflow attachment", file(`{"type":"workflow","id":"w1"}`), "attachments[0].type", 400},
		{"no data", file(`{"type":"file","mimeType":"image/png","fileName":"a"}`), "attachments[0].data", 400},
		{"bad base64", file(`{"type":"file","data":"A-A=","mimeType":"image/png","fileName":"a"}`), "attachments[0].data", 400},
		{"no mimeType", file(`{"type":"file","data":"AAAA","fileName":"a"}`), "attachments[0].mimeType", 400},
		{"bad mimeType", file(`{"type":"file","data":"AAAA","mimeType":"png","fileName":"a"}`), "attachments[0].mimeType", 400},
		{"no fileName", file(`{"type":"file","data":"AAAA","mimeType":"image/png"}`), "attachments[0].fileName", 400},
		{"fileName too long", file(`{"type":"file","data":"AAAA","mimeType":"image/png","fileName":"` + strings.Repeat("a", 301) + `"}`), "attachments[0].fileName", 400},
		{"video", file(`{"type":"file","data":"AAAA","mimeType":"video/mp4","fileName":"a.mp4"}`), "attachments[0]", 400},
		{"audio of another format", file(`{"type":"file","data":"AAAA","mimeType":"audio/ogg","fileName":"a.ogg"}`), "attachments[0].mimeType", 400},
		{"too many", `{"message":"x","attachments":[` + strings.Repeat(`{"type":"file","data":"AAAA","mimeType":"text/plain","fileName":"a"},`, 10) +
			`{"type":"file","data":"AAAA","mimeType":"text/plain","fileName":"a"}]}`, "attachments", 400},
		{"file over the limit", file(`{"type":"file","data":"` + big + `","mimeType":"image/png","fileName":"a"}`), "attachments[0].data", 413},
		{"message over the limit", file(`{"type":"file","data":"` + half + `","mimeType":"application/pdf","fileName":"a"},` +
			`{"type":"file","data":"` + half + `","mimeType":"application/pdf","fileName":"b"}`), "attachments[1].data", 413},
	} {
		t.Run(tc.name, func(t *testing.T) {
			thread := "refused-" + strings.ReplaceAll(tc.name, " ", "-")
			code, out := h.Do(http.MethodPost, "/instance-ai/chat/"+thread, tc.body)
			e, _ := out["error"].(map[string]any)
			details, _ := e["details"].(map[string]any)
			if code != tc.status || details["field"] != tc.field {
				t.Fatalf("%d %v, want %d naming %s", code, out, tc.status, tc.field)
			}
			// Nothing was stored: not even the thread.
			if code, _ := h.Do(http.MethodGet, "/instance-ai/threads/"+thread+"/messages", ""); code != http.StatusNotFound {
				t.Fatalf("the refused chat left its thread behind (/messages %d)", code)
			}
		})
	}
}

// A real @ag-ui/client 1.0.0 HttpAgent sends a user message with an image
// part: the model gets it as image_url, the stored message keeps it, and
// the client's own rejoin folding shows it again.
func TestAGUIImagePartInterop(t *testing.T) {
	node := interopNode(t)
	h, llm := startOpenAI(t, servertest.OpenStore(t, "memory"))
	llm.script(answerStep("A dot.", 10, 2))
	parts := `[{"type":"text","text":"What is this?"},{"type":"image","source":{"type":"data","value":"` + pngB64 + `","mimeType":"image/png"}}]`
	rep := runInterop(t, node, h.URL+"/run-agent", `[{"name":"image","message":`+parts+`,"rejoin":true}]`, 1)
	r := rep.Results[0]
	r.succeeded(t, "image run")
	want := `[{"text":"What is this?","type":"text"},{"image_url":{"url":"data:image/png;base64,` + pngB64 + `"},"type":"image_url"}]`
	if got := llm.sentContent(t, 0, 0); got != want {
		t.Fatalf("the model got\n%s\nwant\n%s", got, want)
	}
	if r.Rejoin == nil || r.Rejoin.Error != nil || len(r.Rejoin.Messages) == 0 {
		t.Fatalf("rejoin %+v", r.Rejoin)
	}
	wantParts := `[{"text":"What is this?","type":"text"},{"source":{"mimeType":"image/png","type":"data","value":"` + pngB64 + `"},"type":"image"}]`
	if got := contentJSON(t, r.Rejoin.Messages[0]); got != wantParts {
		t.Fatalf("the client's rejoin folded the user message as\n%s\nwant\n%s", got, wantParts)
	}
	var page struct {
		Messages []struct {
			Attachments []instanceai.Attachment `json:"attachments"`
		} `json:"messages"`
	}
	h.DoInto(http.MethodGet, "/instance-ai/threads/"+r.ThreadID+"/messages", "", &page)
	if len(page.Messages) == 0 || len(page.Messages[0].Attachments) != 1 || page.Messages[0].Attachments[0].Data != pngB64 {
		t.Fatalf("/messages %+v", page.Messages)
	}
}

// /run-agent refuses a part with no Chat Completions form, or over the
// limits, before the run: a 400 or 413 naming the part, nothing stored. A
// message at n8n's 16 MiB of base64 fits the body limit.
func TestRunAgentPartsRefused(t *testing.T) {
	h, llm := startOpenAI(t, servertest.OpenStore(t, "memory"))
	body := func(thread, parts string) string {
		return `{"threadId":"` + thread + `","runId":"r1","messages":[{"id":"u1","role":"user","content":` + parts + `}],"tools":[],"context":[]}`
	}
	big := base64.StdEncoding.EncodeToString(make([]byte, instanceai.MaxAttachmentBytes+1))
	for _, tc := range []struct {
		name, parts, field string
		status             int
	}{
		{"video", `[{"type":"video","source":{"type":"url","value":"https://x/v.mp4"}}]`, "messages[0].content[0]", 400},
		{"audio url", `[{"type":"text","text":"hear"},{"type":"audio","source":{"type":"url","value":"https://x/a.mp3"}}]`, "messages[0].content[1]", 400},
		{"bad mimeType", `[{"type":"image","source":{"type":"data","value":"AAAA","mimeType":"png"}}]`, "messages[0].content[0].source.mimeType", 400},
		{"too large", `[{"type":"image","source":{"type":"data","value":"` + big + `","mimeType":"image/png"}}]`, "messages[0].content[0].source.value", 413},
	} {
		t.Run(tc.name, func(t *testing.T) {
			thread := "parts-" + strings.ReplaceAll(tc.name, " ", "-")
			status, _, field := h.runAgentRejected(body(thread, tc.parts))
			if status != tc.status || field != tc.field {
				t.Fatalf("%d naming %q, want %d naming %q", status, field, tc.status, tc.field)
			}
			if code, _ := h.Do(http.MethodGet, "/instance-ai/threads/"+thread+"/messages", ""); code != http.StatusNotFound {
				t.Fatalf("the refused run left its thread behind (/messages %d)", code)
			}
		})
	}
	llm.mu.Lock()
	n := len(llm.requests)
	llm.mu.Unlock()
	if n != 0 {
		t.Fatalf("a refused run reached the model: %d requests", n)
	}

	// Two parts at n8n's limits: 12 MiB decoded, 16 MiB of base64.
	llm.script(answerStep("Two files.", 10, 2))
	a := base64.StdEncoding.EncodeToString(make([]byte, instanceai.MaxAttachmentBytes))
	b := base64.StdEncoding.EncodeToString(make([]byte, instanceai.MaxMessageAttachmentBytes-instanceai.MaxAttachmentBytes))
	evs := h.runAgentBody(body("parts-at-limit", `[{"type":"document","source":{"type":"data","value":"`+a+`","mimeType":"application/pdf"}},`+
		`{"type":"document","source":{"type":"data","value":"`+b+`","mimeType":"application/pdf"}}]`))
	if evs[len(evs)-1].typ != "RUN_FINISHED" {
		t.Fatalf("run at the limits ended with %s", evs[len(evs)-1].typ)
	}
}

// The reference agent does not use attachments and does not fail on them.
func TestReferenceAgentTakesAttachments(t *testing.T) {
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	h.EnsureThread("ref")
	live := h.Connect("ref", "", false)
	code, out := h.Do(http.MethodPost, "/instance-ai/chat/ref",
		`{"message":"hello","attachments":[{"type":"file","data":"`+pngB64+`","mimeType":"image/png","fileName":"dot.png"}]}`)
	if code != http.StatusOK {
		t.Fatalf("chat: %d %v", code, out)
	}
	runID, _ := out["runId"].(string)
	frames := live.Until(wait, servertest.IsRunFinish(runID))
	if fin := frames[len(frames)-1].Decoded.Payload.(*instanceai.RunFinish); fin.Status != instanceai.RunCompleted {
		t.Fatalf("run-finish %+v", fin)
	}
	evs := h.runAgentBody(`{"threadId":"ref-agui","runId":"r1","messages":[{"id":"u1","role":"user","content":` +
		`[{"type":"text","text":"hello"},{"type":"image","source":{"type":"url","value":"https://example.com/a.png"}}]}],"tools":[],"context":[]}`)
	if evs[len(evs)-1].typ != "RUN_FINISHED" {
		t.Fatalf("AG-UI run ended with %s", evs[len(evs)-1].typ)
	}
}

// The upstream AG-UI agent passes a message's files on as content parts,
// the ones the stored message comes back as.
func TestUpstreamAgentGetsAttachments(t *testing.T) {
	h, fake := startUpstream(t, servertest.OpenStore(t, "memory"), 0)
	h.EnsureThread("up-files")
	live := h.Connect("up-files", "", false)
	code, out := h.Do(http.MethodPost, "/instance-ai/chat/up-files",
		`{"message":"echo look","attachments":[{"type":"file","data":"`+pngB64+`","mimeType":"image/png","fileName":"dot.png"}]}`)
	if code != http.StatusOK {
		t.Fatalf("chat: %d %v", code, out)
	}
	runID, _ := out["runId"].(string)
	live.Until(wait, servertest.IsRunFinish(runID))
	reqs := fake.Requests()
	if len(reqs) != 1 || len(reqs[0].Messages) == 0 {
		t.Fatalf("the upstream got %+v", reqs)
	}
	last := reqs[0].Messages[len(reqs[0].Messages)-1]
	want := `[{"type":"text","text":"echo look"},{"type":"image","source":{"type":"data","value":"` + pngB64 +
		`","mimeType":"image/png"},"metadata":{"filename":"dot.png"}}]`
	if last.Role != "user" || string(last.Content) != want {
		t.Fatalf("the upstream's user message: %s %s\nwant %s", last.Role, last.Content, want)
	}
}
