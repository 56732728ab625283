package capture

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// runLayer feeds chunks then flushes, returning every output and the stats.
func runLayer(maxObject int, chunks ...[]byte) ([]Output, Stats) {
	l := New(maxObject)
	var out []Output
	for _, c := range chunks {
		out = append(out, l.Feed(c)...)
	}
	out = append(out, l.Flush()...)
	return out, l.Stats()
}

// normal renders outputs in a chunking-independent form: adjacent text
// outputs merged, tool calls re-serialised with compacted args.
func normal(t testing.TB, outs []Output) []string {
	t.Helper()
	var r []string
	text := ""
	flush := func() {
		if text != "" {
			r = append(r, "text:"+text)
			text = ""
		}
	}
	for _, o := range outs {
		switch o.Kind {
		case Text:
			if o.Text != o.Raw {
				t.Fatalf("text output with Raw %q != Text %q", o.Raw, o.Text)
			}
			text += o.Text
		case Message:
			flush()
			r = append(r, "message:"+o.Text)
		case ToolCall:
			flush()
			var args bytes.Buffer
			if err := json.Compact(&args, o.ToolCall.Args); err != nil {
				t.Fatalf("tool call args %q: %v", o.ToolCall.Args, err)
			}
			b, err := json.Marshal(map[string]any{"name": o.ToolCall.Name, "args": json.RawMessage(args.Bytes())})
			if err != nil {
				t.Fatal(err)
			}
			r = append(r, "tool:"+string(b))
		case ToolResult:
			flush()
			var result bytes.Buffer
			if o.ToolResult.Error == "" {
				if err := json.Compact(&result, o.ToolResult.Result); err != nil {
					t.Fatalf("tool result %q: %v", o.ToolResult.Result, err)
				}
			}
			r = append(r, "result:"+o.ToolResult.Name+":"+result.String()+":"+o.ToolResult.Error)
		default:
			t.Fatalf("unknown kind %d", o.Kind)
		}
	}
	flush()
	return r
}

// checkAccounted fails unless the outputs' Raw fields rebuild the input
// and, for valid UTF-8 input, no output carries half a character.
func checkAccounted(t testing.TB, input []byte, outs []Output) {
	t.Helper()
	var all strings.Builder
	for _, o := range outs {
		all.WriteString(o.Raw)
		if utf8.Valid(input) && (!utf8.ValidString(o.Raw) || !utf8.ValidString(o.Text)) {
			t.Fatalf("output %+v splits a UTF-8 character", o)
		}
	}
	if all.String() != string(input) {
		t.Fatalf("outputs rebuild %q, input was %q", all.String(), input)
	}
}

const n8nBigObject = `{"type":"tool_call","name":"big","args":{"a":{"b":"}}}{{"},"c":[1,2,3]}}`

var n8nCaptureCases = []struct {
	name      string
	in        string
	maxObject int
	want      []string
	stats     Stats
}{
	{
		name: "plain text",
		in:   "Hello, world.",
		want: []string{"text:Hello, world."},
	},
	{
		name: "tool call between text, nested args",
		in:   `Let me look. {"type":"tool_call","name":"show_diff","args":{"path":"a.go","opts":{"ctx":3,"list":[{"x":1}]}}} Done.`,
		want: []string{
			"text:Let me look. ",
			`tool:{"args":{"path":"a.go","opts":{"ctx":3,"list":[{"x":1}]}},"name":"show_diff"}`,
			"text: Done.",
		},
		stats: Stats{ToolCalls: 1},
	},
	{
		name:  "regular_message via messageType, braces and escaped quotes in strings",
		in:    `{"messageType":"regular_message","content":"say \"hi\" {not} } \\"}`,
		want:  []string{`message:say "hi" {not} } \`},
		stats: Stats{Messages: 1},
	},
	{
		name:  "escaped backslash before a closing quote",
		in:    `{"type":"tool_call","name":"w","args":{"p":"C:\\dir\\","q":"}"}}x`,
		want:  []string{`tool:{"args":{"p":"C:\\dir\\","q":"}"},"name":"w"}`, "text:x"},
		stats: Stats{ToolCalls: 1},
	},
	{
		name:  "tool call without args",
		in:    `{"type":"tool_call","name":"ping"}`,
		want:  []string{`tool:{"args":{},"name":"ping"}`},
		stats: Stats{ToolCalls: 1},
	},
	{
		name:  "type other than ours, messageType decides",
		in:    `{"type":"assistant","messageType":"tool_call","name":"n","args":{"k":"v"}}`,
		want:  []string{`tool:{"args":{"k":"v"},"name":"n"}`},
		stats: Stats{ToolCalls: 1},
	},
	{
		name:  "multi-byte UTF-8 in text and content",
		in:    `héllo 世界 {"type":"regular_message","content":"日本語 🎉"} ✓`,
		want:  []string{"text:héllo 世界 ", "message:日本語 🎉", "text: ✓"},
		stats: Stats{Messages: 1},
	},
	{
		name:  "invalid JSON released as text",
		in:    `a {"type":"tool_call", name} b`,
		want:  []string{`text:a {"type":"tool_call", name} b`},
		stats: Stats{Malformed: 1, Invalid: 1},
	},
	{
		name:  "JSON of another shape released as text",
		in:    `x {"a":{"b":1}} {"type":"tool_call","args":{}} {"type":"regular_message","content":3} y`,
		want:  []string{`text:x {"a":{"b":1}} {"type":"tool_call","args":{}} {"type":"regular_message","content":3} y`},
		stats: Stats{Malformed: 3, OtherShape: 3},
	},
	{
		name:  "never-closing object released at Flush",
		in:    `before {"type":"tool_call","name":"x","args":{"s":"}"`,
		want:  []string{`text:before {"type":"tool_call","name":"x","args":{"s":"}"`},
		stats: Stats{Malformed: 1, Unclosed: 1},
	},
	{
		name:      "oversize object released as text, next object still captured",
		in:        "pre " + n8nBigObject + ` mid {"type":"regular_message","content":"ok"} post`,
		maxObject: len(`{"type":"regular_message","content":"ok"}`),
		want:      []string{"text:pre " + n8nBigObject + " mid ", "message:ok", "text: post"},
		stats:     Stats{Messages: 1, Malformed: 1, Oversize: 1},
	},
	{
		name:      "object exactly at the cap is captured, one byte over is not",
		in:        `{"type":"tool_call","name":"a"}{"type":"tool_call","name":"ab"}`,
		maxObject: len(`{"type":"tool_call","name":"a"}`),
		want:      []string{`tool:{"args":{},"name":"a"}`, `text:{"type":"tool_call","name":"ab"}`},
		stats:     Stats{ToolCalls: 1, Malformed: 1, Oversize: 1},
	},
	{
		name: "stray closing brace and quotes outside objects",
		in:   `a } "b" \ c`,
		want: []string{`text:a } "b" \ c`},
	},
	{
		name:  "back-to-back objects",
		in:    `{"type":"regular_message","content":"1"}{"type":"regular_message","content":"2"}`,
		want:  []string{"message:1", "message:2"},
		stats: Stats{Messages: 2},
	},
}

// TestCaptureLayerSplits runs every case unsplit, split in two at every byte
// offset, and one byte at a time; all must give the expected outputs.
func TestCaptureLayerSplits(t *testing.T) {
	for _, tc := range n8nCaptureCases {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			check := func(how string, chunks ...[]byte) {
				t.Helper()
				outs, stats := runLayer(tc.maxObject, chunks...)
				checkAccounted(t, in, outs)
				if got := normal(t, outs); !slices.Equal(got, tc.want) {
					t.Fatalf("%s:\n got  %q\n want %q", how, got, tc.want)
				}
				if stats != tc.stats {
					t.Fatalf("%s: stats %+v, want %+v", how, stats, tc.stats)
				}
			}
			check("whole", in)
			for k := 0; k <= len(in); k++ {
				check("split at "+strconv.Itoa(k), in[:k], in[k:])
			}
			var bytewise [][]byte
			for i := range in {
				bytewise = append(bytewise, in[i:i+1])
			}
			check("bytewise", bytewise...)
		})
	}
}

// TestCaptureLayerHoldsSplitRune checks that a character split across chunks
// is released whole, by the Feed that completes it.
func TestCaptureLayerHoldsSplitRune(t *testing.T) {
	l := New(0)
	euro := []byte("€") // e2 82 ac
	if out := l.Feed(append([]byte("a"), euro[:1]...)); len(out) != 1 || out[0].Text != "a" {
		t.Fatalf("first feed: %+v", out)
	}
	if out := l.Feed(euro[1:2]); len(out) != 0 {
		t.Fatalf("second feed released %+v", out)
	}
	if out := l.Feed(append(euro[2:], 'b')); len(out) != 1 || out[0].Text != "€b" {
		t.Fatalf("third feed: %+v", out)
	}
	// At Flush a dangling partial character is still released, so no byte is
	// lost.
	l.Feed(euro[:2])
	if out := l.Flush(); len(out) != 1 || out[0].Raw != string(euro[:2]) {
		t.Fatalf("flush: %+v", out)
	}
}

// TestCaptureLayerTextIsImmediate checks that text outside objects is not
// delayed until an object or Flush.
func TestCaptureLayerTextIsImmediate(t *testing.T) {
	l := New(0)
	out := l.Feed([]byte(`x {"type":"tool_call","na`))
	if len(out) != 1 || out[0].Text != "x " {
		t.Fatalf("got %+v", out)
	}
	out = l.Feed([]byte(`me":"t"} y`))
	if got := normal(t, out); !slices.Equal(got, []string{`tool:{"args":{},"name":"t"}`, "text: y"}) {
		t.Fatalf("got %q", got)
	}
}

// genInput builds a random text mixing prose, multi-byte characters,
// captured objects and objects that must be released as text.
func genInput(r *rand.Rand) []byte {
	parts := []string{
		"plain words ", "ünïcödé ", "世界", "🎉", "} stray ", `"quoted" `, `\`, "\n",
		`{"type":"tool_call","name":"search","args":{"q":"a {b} \"c\"","n":{"deep":[1,{"x":"}"}]}}}`,
		`{"messageType":"regular_message","content":"héllo \"w\" {}"}`,
		`{"type":"regular_message","content":"🎉 done"}`,
		`{"type":"tool_call","name":"ping"}`,
		`{"foo":"bar"}`,
		`{"type":"tool_call" oops}`,
		`{"type":"regular_message","content":"` + strings.Repeat("long ", 30) + `"}`,
	}
	var b []byte
	for range r.IntN(12) {
		b = append(b, parts[r.IntN(len(parts))]...)
	}
	if r.IntN(4) == 0 {
		b = append(b, `{"type":"tool_call","name":"cut","args":{"s":"é`...) // left open
	}
	return b
}

// randomSplit cuts b at random offsets.
func randomSplit(r *rand.Rand, b []byte) [][]byte {
	var chunks [][]byte
	for len(b) > 0 {
		n := 1 + r.IntN(min(len(b), 1+r.IntN(40)))
		chunks = append(chunks, b[:n])
		b = b[n:]
	}
	return chunks
}

// TestCaptureLayerPropertySplitInvariant: for any split of an input into
// chunks, the merged text outputs and re-serialised captures equal those of
// the unsplit input, and the outputs account for every input byte.
func TestCaptureLayerPropertySplitInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 20499))
	for i := range 2000 {
		in := genInput(r)
		maxObject := 0
		if i%3 == 0 {
			maxObject = 60 // makes the long message and the search call oversize
		}
		wholeOuts, wholeStats := runLayer(maxObject, in)
		want := normal(t, wholeOuts)
		checkAccounted(t, in, wholeOuts)
		for range 5 {
			outs, stats := runLayer(maxObject, randomSplit(r, in)...)
			checkAccounted(t, in, outs)
			if got := normal(t, outs); !slices.Equal(got, want) {
				t.Fatalf("input %q (cap %d):\n split %q\n whole %q", in, maxObject, got, want)
			}
			if stats != wholeStats {
				t.Fatalf("input %q: stats %+v, unsplit %+v", in, stats, wholeStats)
			}
		}
	}
}

// FuzzCaptureLayer: no panic; outputs account for every byte; the result
// does not depend on how the input is split.
func FuzzCaptureLayer(f *testing.F) {
	for _, tc := range n8nCaptureCases {
		f.Add([]byte(tc.in), []byte{3, 1, 7})
	}
	f.Add([]byte("\xe2\x82"), []byte{1})
	f.Add([]byte(`{"type":"tool_call","name":"\u00e9"}`), []byte{})
	f.Add([]byte(`a {"type":"tool_result","name":"x","result":{"k":[1]}} {"type":"tool_result","error":"e"}`), []byte{5, 2, 9})
	f.Fuzz(func(t *testing.T, in, sizes []byte) {
		var chunks [][]byte
		rest := in
		for i := 0; len(rest) > 0; i++ {
			n := len(rest)
			if i < len(sizes) {
				n = min(n, int(sizes[i])%32)
			}
			chunks = append(chunks, rest[:n]) // may be empty
			rest = rest[n:]
		}
		for _, maxObject := range []int{0, 24} {
			outs, stats := runLayer(maxObject, chunks...)
			checkAccounted(t, in, outs)
			wholeOuts, wholeStats := runLayer(maxObject, in)
			if got, want := normal(t, outs), normal(t, wholeOuts); !slices.Equal(got, want) {
				t.Fatalf("split %q, whole %q", got, want)
			}
			if stats != wholeStats {
				t.Fatalf("stats %+v, unsplit %+v", stats, wholeStats)
			}
			if s := stats; s.Malformed != s.Invalid+s.OtherShape+s.Oversize+s.Unclosed {
				t.Fatalf("inconsistent stats %+v", s)
			}
		}
	})
}

// TestCaptureOnMalformed checks the hook sees every released object once,
// with the reason the stats count and the captured bytes.
func TestCaptureOnMalformed(t *testing.T) {
	type call struct{ reason, raw string }
	var got []call
	c := New(32)
	c.OnMalformed(func(reason string, raw []byte) { got = append(got, call{reason, string(raw)}) })
	c.Feed([]byte(`a {"x":1} b {not json} c {"type":"tool_call","name":"n","args":{"long":"0123456789abcdef"}} d {"open":`))
	c.Flush()
	want := []call{
		{MalformedOtherShape, `{"x":1}`},
		{MalformedInvalid, `{not json}`},
		{MalformedOversize, `{"type":"tool_call","name":"n","a`}, // up to the byte past the cap
		{MalformedUnclosed, `{"open":`},
	}
	if len(got) != len(want) {
		t.Fatalf("hook calls = %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("call %d = %q, want %q", i, got[i], want[i])
		}
	}
	s := c.Stats()
	if s.Malformed != 4 || s.OtherShape != 1 || s.Invalid != 1 || s.Oversize != 1 || s.Unclosed != 1 {
		t.Errorf("stats = %+v", s)
	}
}

func TestToolResultObjects(t *testing.T) {
	for _, c := range []struct {
		obj        string
		name, want string // want: the result JSON, or "error:" + the error
	}{
		{`{"type":"tool_result","name":"search","result":{"hits":2}}`, "search", `{"hits":2}`},
		{`{"messageType":"tool_result","output":"done"}`, "", `"done"`},
		{`{"type":"tool_result","name":"deploy","error":"refused"}`, "deploy", "error:refused"},
		// Neither result nor output: the object itself is the result.
		{`{"type":"tool_result","name":"ping","ms":12}`, "ping", `{"type":"tool_result","name":"ping","ms":12}`},
		{`{"type":"tool_result","result":null}`, "", `null`},
	} {
		// Cut the object in two inside its name, as n8n's chunks do.
		mid := len(c.obj) / 2
		outs, st := runLayer(0, []byte("a "+c.obj[:mid]), []byte(c.obj[mid:]+" b"))
		if len(outs) != 3 || outs[1].Kind != ToolResult || st.ToolResults != 1 || st.Malformed != 0 {
			t.Fatalf("%s: outputs %+v stats %+v", c.obj, outs, st)
		}
		r := outs[1].ToolResult
		got := string(r.Result)
		if r.Error != "" {
			got = "error:" + r.Error
		}
		if r.Name != c.name || got != c.want || outs[1].Raw != c.obj {
			t.Errorf("%s: name %q result %s raw %q", c.obj, r.Name, got, outs[1].Raw)
		}
	}
}
