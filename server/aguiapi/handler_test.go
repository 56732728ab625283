package aguiapi

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/threadline/threadline/agui/aguiproto"
)

// negotiation is the Accept table of /run-agent and the rejoin endpoint.
var negotiation = []struct {
	header []string
	want   binding
	ok     bool
}{
	{nil, bindingSSE, true},
	{[]string{"text/event-stream"}, bindingSSE, true},
	{[]string{"*/*"}, bindingSSE, true}, // curl, browsers: SSE, where @ag-ui/encoder would pick protobuf
	{[]string{"text/*"}, bindingSSE, true},
	{[]string{"application/json, text/event-stream;q=0.2"}, bindingSSE, true},
	{[]string{"application/json", "text/event-stream"}, bindingSSE, true},
	{[]string{"TEXT/EVENT-STREAM"}, bindingSSE, true},
	{[]string{aguiproto.MediaType}, bindingProtobuf, true},
	{[]string{"Application/VND.AG-UI.Event+Proto"}, bindingProtobuf, true},
	{[]string{aguiproto.MediaType + ", text/event-stream"}, bindingProtobuf, true},
	{[]string{"text/event-stream, " + aguiproto.MediaType}, bindingProtobuf, true}, // naming it asks for it: no ranking
	{[]string{"text/event-stream;q=1, " + aguiproto.MediaType + ";q=0.1"}, bindingProtobuf, true},
	{[]string{"text/event-stream", aguiproto.MediaType}, bindingProtobuf, true},
	{[]string{"*/*, " + aguiproto.MediaType}, bindingProtobuf, true},
	{[]string{aguiproto.MediaType + ";q=0, text/event-stream"}, bindingSSE, true},
	{[]string{aguiproto.MediaType + ";q=0, */*"}, bindingSSE, true},
	{[]string{"application/*"}, bindingProtobuf, true}, // admits protobuf only
	{[]string{"application/json"}, bindingSSE, false},
	{[]string{"text/html"}, bindingSSE, false},
	{[]string{"text/event-stream;q=0"}, bindingSSE, false},
	{[]string{"*/*;q=0, application/json"}, bindingSSE, false},
	{[]string{aguiproto.MediaType + ";q=0"}, bindingSSE, false},
	{[]string{"application/x-protobuf"}, bindingSSE, false},
	{[]string{"not a media type"}, bindingSSE, false},
}

func TestNegotiate(t *testing.T) {
	for _, c := range negotiation {
		got, ok := negotiate(c.header, true)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("Accept %q: got %v ok %v, want %v ok %v", c.header, got, ok, c.want, c.ok)
		}
	}
}

// TestNegotiateSSEOnly: a surface that serves SSE alone admits what
// admits text/event-stream, and nothing else.
func TestNegotiateSSEOnly(t *testing.T) {
	cases := []struct {
		header []string
		ok     bool
	}{
		{nil, true},
		{[]string{"*/*"}, true},
		{[]string{aguiproto.MediaType + ", text/event-stream"}, true},
		{[]string{aguiproto.MediaType}, false},
		{[]string{"application/*"}, false},
	}
	for _, c := range cases {
		got, ok := negotiate(c.header, false)
		if ok != c.ok || got != bindingSSE {
			t.Errorf("Accept %q: got %v ok %v, want SSE ok %v", c.header, got, ok, c.ok)
		}
	}
}

func TestNotAcceptableNamesAccept(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Accept", "application/json")
	for _, protobufOK := range []bool{true, false} {
		err := notAcceptable(r, protobufOK)
		msg := err.Error()
		if !strings.Contains(msg, "application/json") || !strings.Contains(msg, "text/event-stream") ||
			strings.Contains(msg, aguiproto.MediaType) != protobufOK {
			t.Errorf("protobufOK %v: %s", protobufOK, msg)
		}
	}
}

// FuzzNegotiate: any Accept header gets an answer without a panic, and
// the answer does not depend on how the header is split into lines.
func FuzzNegotiate(f *testing.F) {
	for _, c := range negotiation {
		f.Add(strings.Join(c.header, ", "))
	}
	f.Add(`text/event-stream;q="0.5,x", application/vnd.ag-ui.event+proto`)
	f.Fuzz(func(t *testing.T, header string) {
		joined, okJoined := negotiate([]string{header}, true)
		split, okSplit := negotiate(strings.Split(header, ","), true)
		if okJoined != okSplit || (okJoined && joined != split) {
			t.Fatalf("%q: one line gives %v %v, split lines %v %v", header, joined, okJoined, split, okSplit)
		}
		if sse, ok := negotiate([]string{header}, false); ok && sse != bindingSSE {
			t.Fatalf("%q: an SSE-only surface picked %v", header, sse)
		}
	})
}
