package openai

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/threadline/threadline/agent/openai/chunk"
	"github.com/threadline/threadline/instanceai"
)

func readAll(t testing.TB, r io.Reader) ([]string, error) {
	t.Helper()
	s := newSSEReader(r)
	var out []string
	for {
		data, err := s.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, string(data))
	}
}

func TestSSEReader(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"LF", "data: a\n\ndata: b\n\n", []string{"a", "b"}},
		{"CRLF", "data: a\r\n\r\ndata: b\r\n\r\n", []string{"a", "b"}},
		{"CR", "data: a\r\rdata: b\r\r", []string{"a", "b"}},
		{"comments and other fields", ": keep-alive\n\nevent: message\nid: 7\nretry: 10\ndata: a\n\n", []string{"a"}},
		{"multi-line data", "data: a\ndata: b\ndata\n\n", []string{"a\nb\n"}},
		{"no space after colon", "data:a\n\n", []string{"a"}},
		{"only the first space goes", "data:  a\n\n", []string{" a"}},
		{"pending at EOF is dispatched", "data: a\n\ndata: [DONE]", []string{"a", "[DONE]"}},
		{"blank lines alone dispatch nothing", "\n\n\r\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range []io.Reader{strings.NewReader(tc.in), iotest.OneByteReader(strings.NewReader(tc.in))} {
				got, err := readAll(t, r)
				if err != nil || !slices.Equal(got, tc.want) {
					t.Errorf("got %q, %v; want %q", got, err, tc.want)
				}
			}
		})
	}
	got, err := readAll(t, io.MultiReader(strings.NewReader("data: a\n\ndata: b"), iotest.ErrReader(io.ErrUnexpectedEOF)))
	if !errors.Is(err, io.ErrUnexpectedEOF) || !slices.Equal(got, []string{"a"}) {
		t.Errorf("read error: got %q, %v", got, err)
	}
}

// FuzzStream feeds arbitrary bytes as a response body through the SSE
// reader and the translator, as stream does: no panic, and every event the
// agent would emit is valid.
func FuzzStream(f *testing.F) {
	entries, _ := os.ReadDir(filepath.Join("testdata"))
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join("testdata", e.Name()))
		if err == nil {
			f.Add(raw)
		}
	}
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"<think>x\"}}]}\r\ndata: {}\r\r"))
	f.Add([]byte(": c\n\ndata: {\"error\":{\"message\":\"x\"}}\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		tr := chunk.NewTranslator()
		s := newSSEReader(bytes.NewReader(body))
		var evs []instanceai.Event
		for {
			data, err := s.Next()
			if err != nil {
				break
			}
			out, perr := tr.Push(data)
			if perr != nil {
				continue
			}
			evs = append(evs, out...)
		}
		evs = append(evs, tr.Finish()...)
		for _, ev := range evs {
			ev.RunID, ev.AgentID = "run_1", "orchestrator-run_1"
			if err := ev.Validate(); err != nil {
				t.Fatalf("invalid event %+v: %v", ev, err)
			}
		}
	})
}
