// Package ssecheck judges the SSE layer of a recorded response, whatever
// protocol it carries: status and headers, LF framing, blank-line frame
// ends, a prompt first frame and heartbeats while idle.
package ssecheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/threadline/threadline/conformance"
)

// Rule ids.
const (
	RuleStatus        = "sse.status"
	RuleContentType   = "sse.content-type"
	RuleCacheControl  = "sse.cache-control"
	RuleNoBuffering   = "sse.no-buffering"
	RuleNoCompression = "sse.no-compression"
	RuleLF            = "sse.lf-only"
	RuleFrameEnd      = "sse.frame-end"
	RuleFirstFrame    = "sse.first-frame"
	RuleHeartbeat     = "sse.heartbeat"
	srcHeaders        = "PROTOCOLS.md §1 SSE frames (headers)"
	srcFrames         = "PROTOCOLS.md §1 SSE frames; §2 Rules of the wire (LF line ends)"
	srcFirst          = "docs/native-protocol.md Event stream and replay (`: connected` at once)"
	srcHeartbeat      = "PROTOCOLS.md §1 SSE frames (heartbeat); docs/native-protocol.md Event stream and replay"
)

// FirstFrameDeadline bounds the wait for the first frame: the server writes
// a comment at once, so anything slower means it buffers or blocks on work
// before answering.
const FirstFrameDeadline = time.Second

// Rules are the rules of this checker.
var Rules = []conformance.Rule{
	{ID: RuleStatus, Title: "the response status is 200", Source: srcHeaders},
	{ID: RuleContentType, Title: "Content-Type is text/event-stream (parameters such as charset allowed)", Source: srcHeaders},
	{ID: RuleCacheControl, Title: "Cache-Control includes no-cache", Source: srcHeaders},
	{ID: RuleNoBuffering, Title: "X-Accel-Buffering is no, so proxies pass frames at once", Source: srcHeaders},
	{ID: RuleNoCompression, Title: "the stream is not compressed (no Content-Encoding)", Source: srcHeaders},
	{ID: RuleLF, Title: "lines end in LF only: no CR anywhere in the body", Source: srcFrames},
	{ID: RuleFrameEnd, Title: "every frame ends with a blank line (no two frames run together)", Source: srcFrames},
	{ID: RuleFirstFrame, Title: "a first frame (comment or event) arrives within 1 s of the headers", Source: srcFirst},
	{ID: RuleHeartbeat, Title: "while idle, no silence longer than the heartbeat interval (plus slack)", Source: srcHeartbeat},
}

// Options tune the checks that depend on the server's configuration.
type Options struct {
	// Heartbeat, if > 0, is the longest allowed silence while idle; the
	// recording must be at least that long for the rule to be judged.
	Heartbeat time.Duration
}

// Slack is what a heartbeat may be late by: the server resets its ticker
// after each write, and the client reads through scheduling and the race
// detector.
func Slack(heartbeat time.Duration) time.Duration {
	return max(heartbeat/2, 250*time.Millisecond)
}

// Check judges one SSE response as received.
func Check(rec *conformance.Recording, opts Options) []conformance.Finding {
	t := conformance.NewTally(Rules)
	checkHeaders(t, rec)
	if rec.Status != http.StatusOK {
		for _, r := range Rules[5:] {
			t.Skip(r.ID, "no stream: status %d", rec.Status)
		}
		return t.Findings()
	}
	if i := bytes.IndexByte(rec.Body, '\r'); i >= 0 {
		t.Fail(RuleLF, "CR at byte %d of the body: …%q…", i, around(rec.Body, i))
	} else if len(rec.Body) > 0 {
		t.Pass(RuleLF)
	}
	checkFrameEnds(t, rec.Body)
	checkTiming(t, rec, opts)
	return t.Findings()
}

func checkHeaders(t *conformance.Tally, rec *conformance.Recording) {
	if rec.Status == http.StatusOK {
		t.Pass(RuleStatus)
	} else {
		t.Fail(RuleStatus, "status %d", rec.Status)
	}
	h := rec.Header
	if h == nil {
		h = http.Header{}
	}
	ct := h.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err == nil && mt == "text/event-stream" {
		t.Pass(RuleContentType)
	} else {
		t.Fail(RuleContentType, "Content-Type %q", ct)
	}
	if hasToken(h.Values("Cache-Control"), "no-cache") {
		t.Pass(RuleCacheControl)
	} else {
		t.Fail(RuleCacheControl, "Cache-Control %q has no no-cache", strings.Join(h.Values("Cache-Control"), ", "))
	}
	if v := h.Get("X-Accel-Buffering"); strings.EqualFold(strings.TrimSpace(v), "no") {
		t.Pass(RuleNoBuffering)
	} else {
		t.Fail(RuleNoBuffering, "X-Accel-Buffering %q, want no", v)
	}
	if v := h.Get("Content-Encoding"); v == "" || strings.EqualFold(v, "identity") {
		t.Pass(RuleNoCompression)
	} else {
		t.Fail(RuleNoCompression, "Content-Encoding %q", v)
	}
}

// hasToken reports whether a comma-separated header holds token.
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			name, _, _ := strings.Cut(strings.TrimSpace(part), "=")
			if strings.EqualFold(name, token) {
				return true
			}
		}
	}
	return false
}

// checkFrameEnds judges the complete frames of the body. A frame whose
// blank line is missing runs into the next one, and a client then sees one
// event where two were sent: the merged frame repeats the id or event
// field, or has several data lines that are each a whole JSON value (the
// JSON protocols this suite serves put each payload on one line). The tail
// after the last blank line is not judged: the client may have stopped
// reading mid-frame, and a frame cut by the client is no fault of the
// server.
func checkFrameEnds(t *conformance.Tally, body []byte) {
	// Framing is judged on LF lines; CR is RuleLF's concern.
	text := strings.ReplaceAll(strings.ReplaceAll(string(body), "\r\n", "\n"), "\r", "\n")
	end := strings.LastIndex(text, "\n\n")
	if end < 0 {
		return
	}
	offset := 0
	for _, frame := range strings.Split(text[:end], "\n\n") {
		start := offset
		offset += len(frame) + 2
		frame = strings.TrimLeft(frame, "\n")
		if frame == "" {
			continue
		}
		fields := map[string]int{}
		wholeData := 0
		for _, line := range strings.Split(frame, "\n") {
			if line == "" || line[0] == ':' {
				continue
			}
			name, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			fields[name]++
			if name == "data" && json.Valid([]byte(value)) && strings.TrimSpace(value) != "" {
				wholeData++
			}
		}
		switch {
		case fields["id"] > 1, fields["event"] > 1:
			t.Fail(RuleFrameEnd, "frame at byte %d repeats a field (id %d, event %d times): two frames without a blank line between them", start, fields["id"], fields["event"])
		case wholeData > 1 && wholeData == fields["data"]:
			t.Fail(RuleFrameEnd, "frame at byte %d has %d data lines that are each a whole JSON value: frames without a blank line between them", start, wholeData)
		default:
			t.Pass(RuleFrameEnd)
		}
	}
}

// checkTiming judges the first frame and the heartbeats. Frames parsed from
// a fixture have no times (At and Elapsed zero): both rules are skipped.
func checkTiming(t *conformance.Tally, rec *conformance.Recording, opts Options) {
	if rec.Elapsed == 0 {
		t.Skip(RuleFirstFrame, "the recording has no times")
		t.Skip(RuleHeartbeat, "the recording has no times")
		return
	}
	switch {
	case len(rec.Frames) > 0 && rec.Frames[0].At <= FirstFrameDeadline:
		t.Pass(RuleFirstFrame)
	case len(rec.Frames) > 0:
		t.Fail(RuleFirstFrame, "the first frame came after %v", rec.Frames[0].At)
	case rec.Elapsed > FirstFrameDeadline:
		t.Fail(RuleFirstFrame, "no frame in %v", rec.Elapsed)
	default:
		t.Skip(RuleFirstFrame, "no frame in the %v recorded", rec.Elapsed)
	}

	if opts.Heartbeat <= 0 {
		t.Skip(RuleHeartbeat, "no heartbeat interval given")
		return
	}
	if rec.Elapsed < opts.Heartbeat {
		t.Skip(RuleHeartbeat, "the recording (%v) is shorter than the heartbeat interval %v", rec.Elapsed, opts.Heartbeat)
		return
	}
	limit := opts.Heartbeat + Slack(opts.Heartbeat)
	// Silences: from the headers to the first frame, between frames, and
	// from the last frame to the end of the recording.
	prev := time.Duration(0)
	marks := make([]time.Duration, 0, len(rec.Frames)+1)
	for _, f := range rec.Frames {
		marks = append(marks, f.At)
	}
	marks = append(marks, rec.Elapsed)
	for i, at := range marks {
		if gap := at - prev; gap > limit {
			what := fmt.Sprintf("before frame %d", i)
			if i == len(marks)-1 {
				what = "at the end of the recording"
			}
			t.Fail(RuleHeartbeat, "silence of %v %s (heartbeat %v, allowed %v)", gap, what, opts.Heartbeat, limit)
		}
		prev = at
	}
	t.Pass(RuleHeartbeat)
}

func around(b []byte, i int) []byte {
	return b[max(0, i-20):min(len(b), i+20)]
}
