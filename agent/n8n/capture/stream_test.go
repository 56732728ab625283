package capture

import (
	"io"
	"os"
	"slices"
	"testing"
	"testing/iotest"

	"github.com/threadline/threadline/agent/n8n/ndjson"
)

// TestStreamThroughCapture reads the sample stream, feeds each item's
// text to its own Layer and checks what comes out per item.
func TestStreamThroughCapture(t *testing.T) {
	f, err := os.Open("../testdata/agent_stream.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := ndjson.NewReader(iotest.OneByteReader(f), 0)
	layers := map[ndjson.Key]*Layer{}
	outs := map[ndjson.Key][]Output{}
	var tools, errs []string
	for {
		c, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		k := c.Key()
		switch c.Type {
		case ndjson.ChunkBegin:
			layers[k] = New(0)
		case ndjson.ChunkItem:
			outs[k] = append(outs[k], layers[k].Feed([]byte(c.Content))...)
		case ndjson.ChunkEnd, ndjson.ChunkError:
			outs[k] = append(outs[k], layers[k].Flush()...)
			if c.Type == ndjson.ChunkError {
				errs = append(errs, k.NodeID)
			}
		case ndjson.ChunkToolCallStart:
			tools = append(tools, "start "+c.Metadata.ToolCallID+" "+c.Metadata.ToolName+" "+string(c.Metadata.ToolInput))
		case ndjson.ChunkToolCallEnd:
			tools = append(tools, "end "+c.Metadata.ToolCallID+" "+string(c.Metadata.ToolOutput))
		case ndjson.ChunkCustomFrame:
			tools = append(tools, "frame "+c.FrameType)
		}
	}
	item0 := normal(t, outs[ndjson.Key{NodeID: "agent-1", RunIndex: 0, ItemIndex: 0}])
	if want := []string{"text:Checking the diff… ", `tool:{"args":{"path":"src/{a}.go","opts":{"ctx":3}},"name":"show_diff"}`, "text: done."}; !slices.Equal(item0, want) {
		t.Errorf("item 0: %q, want %q", item0, want)
	}
	item1 := normal(t, outs[ndjson.Key{NodeID: "agent-1", RunIndex: 0, ItemIndex: 1}])
	if want := []string{"text:Second item ", "message:Ünïcode ✓"}; !slices.Equal(item1, want) {
		t.Errorf("item 1: %q, want %q", item1, want)
	}
	if want := []string{`start call_1 search {"query":"café"}`, "frame node-execute-before", `end call_1 "3 results"`}; !slices.Equal(tools, want) {
		t.Errorf("tools %q, want %q", tools, want)
	}
	if st := r.Stats(); !slices.Equal(errs, []string{"agent-1"}) || st.Keepalives != 1 || st.Unknown != 0 {
		t.Errorf("errors %q, stats %+v", errs, st)
	}
}
