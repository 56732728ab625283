package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/agui/aguiproto"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/instanceai/agenttree"
	"github.com/threadline/threadline/server/servertest"
)

// protoScenarios are the reference scenarios of the AG-UI interop tests,
// as /run-agent bodies' message and extra fields.
var protoScenarios = []struct {
	name, message string
	extra         map[string]any
}{
	{"simple", "hello proto", nil},
	{"tools", "tools", nil},
	{"tasks", "tasks", map[string]any{"state": map[string]any{"from": "client"}}},
	{"error", "error", nil},
	{"confirm", "confirm", nil},
	{"frontend-tool", "frontend-tool", map[string]any{"tools": []any{map[string]any{
		"name": "pickColor", "description": "Asks the user for a color", "parameters": map[string]any{"type": "object", "properties": map[string]any{}}}}}},
}

// readAll reads a response that must be a stream of the given
// Content-Type (exactly, for the protobuf binding; by prefix for SSE).
func readStream(t *testing.T, res *http.Response, contentType string) []byte {
	t.Helper()
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", res.StatusCode, raw)
	}
	ct := res.Header.Get("Content-Type")
	if contentType == aguiproto.MediaType && ct != contentType || !strings.HasPrefix(ct, contentType) {
		t.Fatalf("Content-Type %q, want %q", ct, contentType)
	}
	return raw
}

// sseEvents parses an SSE AG-UI stream into its events (as JSON objects)
// and the id of each frame (0 for none).
func sseEvents(t *testing.T, raw []byte) (events []map[string]any, ids []int64) {
	t.Helper()
	parsed, err := parseAGUIStream(raw)
	if err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	for _, ev := range parsed {
		events = append(events, ev.body)
		ids = append(ids, ev.id)
	}
	return events, ids
}

// protoEvents decodes protobuf AG-UI streams with the pinned @ag-ui/proto
// and reads each frame's cursor (Threadline's FrameCursor beside the event).
func protoEvents(t *testing.T, node string, streams ...[]byte) (events [][]map[string]any, ids [][]int64) {
	t.Helper()
	dir := t.TempDir()
	var files []string
	for i, s := range streams {
		f := filepath.Join(dir, fmt.Sprintf("stream-%d.bin", i))
		if err := os.WriteFile(f, s, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	cmd := exec.Command(node, append([]string{"proto-decode.js"}, files...)...)
	cmd.Dir = interopDir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("proto-decode.js: %v\n%s", err, stderr.String())
	}
	var rep struct {
		Streams [][]struct {
			Event  map[string]any `json:"event"`
			Cursor int64          `json:"cursor"`
		} `json:"streams"`
	}
	if err := json.Unmarshal(out, &rep); err != nil || len(rep.Streams) != len(streams) {
		t.Fatalf("decoder report (%v):\n%s", err, out)
	}
	for _, s := range rep.Streams {
		var evs []map[string]any
		var cursors []int64
		for _, f := range s {
			evs = append(evs, f.Event)
			cursors = append(cursors, f.Cursor)
		}
		events = append(events, evs)
		ids = append(ids, cursors)
	}
	return events, ids
}

// protoNode is node with the pinned @ag-ui/proto.
func protoNode(t *testing.T) string {
	t.Helper()
	return nodeWith(t, interopDir, filepath.Join("@ag-ui", "proto"))
}

// canonical rewrites what differs between two runs of one scenario on
// two threads: every id (the values of id, *Id and *Ids members, and
// those ids wherever else a string holds them) becomes its order of first
// appearance, and timestamps go. What is left is the content.
func canonical(events []map[string]any) []any {
	names := map[string]string{}
	var ids []string
	name := func(s string) string {
		if n, ok := names[s]; ok {
			return n
		}
		n := fmt.Sprintf("<id%d>", len(names))
		names[s] = n
		ids = append(ids, s)
		return n
	}
	var collect func(key string, v any)
	collect = func(key string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for _, k := range sortedKeys(x) {
				collect(k, x[k])
			}
		case []any:
			for _, e := range x {
				collect(key, e)
			}
		case string:
			if key == "id" || strings.HasSuffix(key, "Id") || strings.HasSuffix(key, "Ids") {
				name(x)
			}
		}
	}
	for _, ev := range events {
		collect("", ev)
	}
	var rewrite func(key string, v any) any
	rewrite = func(key string, v any) any {
		switch x := v.(type) {
		case map[string]any:
			out := map[string]any{}
			for k, e := range x {
				if k == "timestamp" {
					continue
				}
				out[k] = rewrite(k, e)
			}
			return out
		case []any:
			out := make([]any, len(x))
			for i, e := range x {
				out[i] = rewrite(key, e)
			}
			return out
		case string:
			if n, ok := names[x]; ok {
				return n
			}
			for _, id := range ids {
				if len(id) >= 8 { // short ones (a seq) would match inside anything
					x = strings.ReplaceAll(x, id, names[id])
				}
			}
			return x
		}
		return v
	}
	out := make([]any, len(events))
	for i, ev := range events {
		out[i] = rewrite("", ev)
	}
	return out
}

// coalesced joins the deltas of consecutive streamed contents of one
// message or tool call: how a run's text is cut into deltas depends on
// timing (deltas stored before a stream catches up arrive as one), so two
// runs of a scenario agree on the text, not on the cuts.
func coalesced(events []map[string]any) []map[string]any {
	key := map[string]string{"TEXT_MESSAGE_CONTENT": "messageId", "REASONING_MESSAGE_CONTENT": "messageId", "TOOL_CALL_ARGS": "toolCallId"}
	var out []map[string]any
	for _, ev := range events {
		typ, _ := ev["type"].(string)
		if k, ok := key[typ]; ok && len(out) > 0 {
			prev := out[len(out)-1]
			if prev["type"] == typ && prev[k] == ev[k] && prev["metadata"] == nil && ev["metadata"] == nil {
				merged := map[string]any{}
				for kk, v := range prev {
					merged[kk] = v
				}
				merged["delta"] = fmt.Sprint(prev["delta"]) + fmt.Sprint(ev["delta"])
				out[len(out)-1] = merged
				continue
			}
		}
		out = append(out, ev)
	}
	return out
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

// TestAGUIProtoNegotiation: which binding each Accept header gets on
// /run-agent and on the rejoin endpoint, and that refusals stay JSON.
func TestAGUIProtoNegotiation(t *testing.T) {
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	cases := []struct {
		accept string
		want   string // Content-Type, or "" for 406
	}{
		{"", "text/event-stream"},
		{"*/*", "text/event-stream"},
		{"text/event-stream", "text/event-stream"},
		{aguiproto.MediaType, aguiproto.MediaType},
		{"text/event-stream, " + aguiproto.MediaType, aguiproto.MediaType},
		{aguiproto.MediaType + ";q=0, */*", "text/event-stream"},
		{"application/*", aguiproto.MediaType},
		{"application/json", ""},
		{aguiproto.MediaType + ";q=0", ""},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i, c := range cases {
		t.Run("run-agent "+c.accept, func(t *testing.T) {
			res := h.PostRunAgent(ctx, servertest.RunAgentInput(fmt.Sprintf("neg-%d", i), "r1", "hello", nil), c.accept)
			checkNegotiated(t, res, c.want)
		})
	}
	h.runAgent("neg-rejoin", "r1", "hello", nil)
	for _, c := range cases {
		t.Run("rejoin "+c.accept, func(t *testing.T) {
			checkNegotiated(t, h.rejoinRequest(ctx, "neg-rejoin", "", "", c.accept), c.want)
		})
	}
	t.Run("errors before the stream stay JSON", func(t *testing.T) {
		res := h.PostRunAgent(ctx, `{"threadId":"bad thread!","messages":[]}`, aguiproto.MediaType)
		if res.StatusCode != http.StatusBadRequest || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
			t.Fatalf("%d %q", res.StatusCode, res.Header.Get("Content-Type"))
		}
		if code, field := readJSONError(t, res); code != "invalid_field" || field != "threadId" {
			t.Fatalf("error %s on %q", code, field)
		}
		res = h.rejoinRequest(ctx, "no-such-thread", "", "", aguiproto.MediaType)
		if res.StatusCode != http.StatusNotFound || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
			t.Fatalf("rejoin of an unknown thread: %d %q", res.StatusCode, res.Header.Get("Content-Type"))
		}
		res.Body.Close()
	})
}

func checkNegotiated(t *testing.T, res *http.Response, want string) {
	t.Helper()
	if want == "" {
		if res.StatusCode != http.StatusNotAcceptable {
			raw, _ := io.ReadAll(res.Body)
			res.Body.Close()
			t.Fatalf("status %d, want 406: %s", res.StatusCode, raw)
		}
		if code, field := readJSONError(t, res); code != "not_acceptable" || field != "Accept" {
			t.Fatalf("406 error %s on %q", code, field)
		}
		return
	}
	body := readStream(t, res, want)
	if want == aguiproto.MediaType && (len(body) < 4 || strings.HasPrefix(string(body), ":") || strings.HasPrefix(string(body), "data:")) {
		t.Fatalf("protobuf body starts %q", body[:min(len(body), 16)])
	}
}

// TestAGUIProtoRunAgentParity runs every reference scenario twice, as SSE
// and as protobuf, and checks that @ag-ui/proto's decode of the protobuf
// stream gives the SSE stream's events (ids and timestamps aside, which
// two runs do not share) with the cursors on the same frames.
func TestAGUIProtoRunAgentParity(t *testing.T) {
	node := protoNode(t)
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for _, sc := range protoScenarios {
		t.Run(sc.name, func(t *testing.T) {
			sse := readStream(t, h.PostRunAgent(ctx, servertest.RunAgentInput("sse-"+sc.name, "run-"+sc.name, sc.message, sc.extra), "text/event-stream"), "text/event-stream")
			pb := readStream(t, h.PostRunAgent(ctx, servertest.RunAgentInput("pb-"+sc.name, "run-"+sc.name, sc.message, sc.extra), aguiproto.MediaType), aguiproto.MediaType)
			want, wantIDs := sseEvents(t, sse)
			got, gotIDs := protoEvents(t, node, pb)
			if len(want) < 3 {
				t.Fatalf("SSE stream of %d events", len(want))
			}
			if !reflect.DeepEqual(canonical(coalesced(got[0])), canonical(coalesced(want))) {
				g, _ := json.MarshalIndent(canonical(coalesced(got[0])), "", " ")
				w, _ := json.MarshalIndent(canonical(coalesced(want)), "", " ")
				t.Fatalf("protobuf events differ from SSE:\nprotobuf %s\nSSE %s", g, w)
			}
			if !reflect.DeepEqual(gotIDs[0], wantIDs) {
				t.Fatalf("cursors: protobuf %v, SSE %v", gotIDs[0], wantIDs)
			}
		})
	}
}

// TestAGUIProtoRejoinParity rejoins the reference scenarios' threads as
// SSE and as protobuf, from the start and from a cursor mid-run: the same
// stored run, so the decoded events must equal the SSE ones exactly, and
// each frame's cursor its SSE id.
func TestAGUIProtoRejoinParity(t *testing.T) {
	node := protoNode(t)
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for _, sc := range protoScenarios {
		t.Run(sc.name, func(t *testing.T) {
			thread := "rj-" + sc.name
			run := readStream(t, h.PostRunAgent(ctx, servertest.RunAgentInput(thread, "run-1", sc.message, sc.extra), "text/event-stream"), "text/event-stream")
			_, runIDs := sseEvents(t, run)
			mid := int64(0)
			for _, id := range runIDs[:len(runIDs)/2] {
				if id > 0 {
					mid = id
				}
			}
			for _, cursor := range []string{"", strconv.FormatInt(mid, 10)} {
				sse := readStream(t, h.rejoinRequest(ctx, thread, cursor, "", "text/event-stream"), "text/event-stream")
				pb := readStream(t, h.rejoinRequest(ctx, thread, "", cursor, aguiproto.MediaType), aguiproto.MediaType)
				want, wantIDs := sseEvents(t, sse)
				got, gotIDs := protoEvents(t, node, pb)
				if len(want) < 2 {
					t.Fatalf("cursor %q: SSE rejoin of %d events", cursor, len(want))
				}
				if !reflect.DeepEqual(got[0], want) {
					g, _ := json.Marshal(got[0])
					w, _ := json.Marshal(want)
					t.Fatalf("cursor %q: protobuf events differ from SSE:\nprotobuf %s\nSSE      %s", cursor, g, w)
				}
				if !reflect.DeepEqual(gotIDs[0], wantIDs) {
					t.Fatalf("cursor %q: cursors: protobuf %v, SSE %v", cursor, gotIDs[0], wantIDs)
				}
			}
		})
	}
}

// TestAGUIProtoHttpAgent runs the real @ag-ui/client HttpAgent over the
// protobuf binding (a subclass asking for it in Accept; the client then
// parses with its own protobuf reader, as the Content-Type is exactly
// AGUI_MEDIA_TYPE) through every reference scenario, follow-up runs and
// a rejoin included, and checks that it sees what the same client sees
// over SSE: the same events, outcome, messages and state, and no warning.
func TestAGUIProtoHttpAgent(t *testing.T) {
	node := nodeWith(t, interopDir, filepath.Join("@ag-ui", "client"))
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	scenarios := func(protobuf bool) string {
		b, _ := json.Marshal([]map[string]any{
			{"name": "simple", "message": "hello protobuf"},
			{"name": "tools", "message": "tools"},
			{"name": "tasks", "message": "tasks", "state": map[string]any{"from": "client"}},
			{"name": "error", "message": "error"},
			{"name": "confirm-approve", "message": "confirm", "resume": map[string]any{"status": "resolved", "payload": map[string]any{"approved": true}}},
			{"name": "confirm-deny", "message": "confirm", "resume": map[string]any{"status": "cancelled"}},
			{"name": "frontend-tool", "message": "frontend-tool", "toolResult": "teal", "tools": []any{map[string]any{
				"name": "pickColor", "description": "Asks the user for a color", "parameters": map[string]any{"type": "object", "properties": map[string]any{}}}}},
		})
		var list []map[string]any
		_ = json.Unmarshal(b, &list)
		for _, sc := range list {
			sc["protobuf"], sc["full"], sc["rejoin"] = protobuf, true, true
		}
		b, _ = json.Marshal(list)
		return string(b)
	}
	sse := runInteropRaw(t, node, h.URL+"/run-agent", scenarios(false))
	pb := runInteropRaw(t, node, h.URL+"/run-agent", scenarios(true))
	if len(sse) != 7 || len(pb) != 7 {
		t.Fatalf("%d SSE results, %d protobuf results", len(sse), len(pb))
	}
	for i := range pb {
		got, want := pb[i], sse[i]
		t.Run(fmt.Sprint(want["name"]), func(t *testing.T) {
			if got["contentType"] != aguiproto.MediaType {
				t.Fatalf("the protobuf run was answered as %v", got["contentType"])
			}
			if ct, _ := want["contentType"].(string); !strings.HasPrefix(ct, "text/event-stream") {
				t.Fatalf("the SSE run was answered as %v", want["contentType"])
			}
			for _, r := range []map[string]any{got, want} {
				if r["error"] != nil {
					t.Fatalf("runAgent failed: %v", r["error"])
				}
				if f, _ := r["followUp"].(map[string]any); f != nil && f["error"] != nil {
					t.Fatalf("second runAgent failed: %v", f["error"])
				}
				if w, _ := r["warnings"].([]any); len(w) > 0 {
					t.Fatalf("client warnings: %v", w)
				}
				if rj, _ := r["rejoin"].(map[string]any); rj == nil || rj["error"] != nil {
					t.Fatalf("rejoin: %v", r["rejoin"])
				}
			}
			if evs, _ := got["eventObjects"].([]any); len(evs) < 3 {
				t.Fatalf("the protobuf run saw %d events", len(evs))
			}
			// What the client saw of a run: its events (their cuts aside,
			// see coalesced) and what it made of them.
			var seen func(r map[string]any) map[string]any
			seen = func(r map[string]any) map[string]any {
				out := map[string]any{}
				for _, k := range []string{"outcome", "pendingToolCallIds", "interrupts", "runError", "messages", "state", "rejoin", "threadId"} {
					out[k] = r[k]
				}
				var evs []map[string]any
				list, _ := r["eventObjects"].([]any)
				for _, ev := range list {
					evs = append(evs, ev.(map[string]any))
				}
				var joined []any // canonical walks []any
				for _, ev := range coalesced(evs) {
					joined = append(joined, ev)
				}
				out["eventObjects"] = joined
				if f, ok := r["followUp"].(map[string]any); ok {
					out["followUp"] = seen(f)
				}
				return out
			}
			g := canonical([]map[string]any{seen(got)})
			w := canonical([]map[string]any{seen(want)})
			if !reflect.DeepEqual(g, w) {
				gj, _ := json.MarshalIndent(g, "", " ")
				wj, _ := json.MarshalIndent(w, "", " ")
				t.Fatalf("the client saw different things:\nprotobuf %s\nSSE %s", gj, wj)
			}
		})
	}
}

// runInteropRaw runs run.js and returns its results as JSON objects.
func runInteropRaw(t *testing.T, node, url, scenarios string) []map[string]any {
	t.Helper()
	out := runJS(t, node, url, scenarios)
	var rep struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	return rep.Results
}

// TestAGUIProtoRejoinLive rejoins a `long` run under way as protobuf and
// as SSE side by side: each stream is one valid AG-UI run (decoded, for
// protobuf, by @ag-ui/proto) whose text, snapshot plus streamed, is the
// whole run's, whose cursors only grow, and whose RUN_FINISHED carries
// the log's last seq.
func TestAGUIProtoRejoinLive(t *testing.T) {
	node := protoNode(t)
	store := servertest.OpenStore(t, "memory")
	h := start(t, store, servertest.Options{AgentDelay: time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	runID := h.Chat("live", "long 2000")
	waitRow(t, store, "live", runID, rowType(instanceai.TypeRunStart))
	time.Sleep(50 * time.Millisecond) // let text stream before the rejoin
	type result struct {
		body []byte
		err  error
	}
	read := func(accept string, done chan<- result) {
		res := h.rejoinRequest(ctx, "live", "", "", accept)
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err == nil && res.StatusCode != http.StatusOK {
			err = fmt.Errorf("status %d: %s", res.StatusCode, body)
		}
		done <- result{body, err}
	}
	pbDone, sseDone := make(chan result, 1), make(chan result, 1)
	go read(aguiproto.MediaType, pbDone)
	go read("text/event-stream", sseDone)
	pb, sse := <-pbDone, <-sseDone
	if pb.err != nil || sse.err != nil {
		t.Fatalf("protobuf: %v; SSE: %v", pb.err, sse.err)
	}

	runEvents, last := storedRun(t, store, "live", runID)
	full := agenttree.Fold(runEvents).TextContent
	decoded, cursors := protoEvents(t, node, pb.body)
	var pbEvents []aguiEvent
	for i, body := range decoded[0] {
		raw, _ := json.Marshal(body)
		typ, _ := body["type"].(string)
		pbEvents = append(pbEvents, aguiEvent{id: cursors[0][i], typ: typ, raw: string(raw), body: body})
	}
	sseEventsList, err := parseAGUIStream(sse.body)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		events []aguiEvent
	}{{"protobuf", pbEvents}, {"SSE", sseEventsList}} {
		msgs := checkRejoined(t, c.events, "live", runID, 0)
		if text := runText(msgs, c.events, runID); text != full {
			t.Errorf("%s: client text (%d bytes) differs from the run's (%d bytes)", c.name, len(text), len(full))
		}
		end := c.events[len(c.events)-1]
		if end.typ != "RUN_FINISHED" || end.id != last {
			t.Errorf("%s: last event %s id %d, want RUN_FINISHED with id %d", c.name, end.raw, end.id, last)
		}
		// The text so far comes as one content, then the rest live.
		if n := countType(c.events, "TEXT_MESSAGE_CONTENT"); n < 10 {
			t.Errorf("%s: %d TEXT_MESSAGE_CONTENT: the stream did not follow the run live", c.name, n)
		}
	}
}

// TestAGUIProtoRefusedResume: a resume the interrupt contract refuses is
// answered in the binding the request asked for, as a stream whose one
// event is RUN_ERROR.
func TestAGUIProtoRefusedResume(t *testing.T) {
	node := protoNode(t)
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h.runAgent("pb-refused", "r1", "confirm", nil)
	body := servertest.RunAgentInput("pb-refused", "r2", "", map[string]any{
		"resume": []any{map[string]any{"interruptId": "no-such-interrupt", "status": "resolved"}}})
	pb := readStream(t, h.PostRunAgent(ctx, body, aguiproto.MediaType), aguiproto.MediaType)
	got, _ := protoEvents(t, node, pb)
	if len(got[0]) != 1 || got[0][0]["type"] != "RUN_ERROR" || got[0][0]["code"] != "interrupt_not_open" {
		t.Fatalf("refused resume over protobuf: %v", got[0])
	}
}
