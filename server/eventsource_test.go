package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/threadline/threadline/server/servertest"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// eventSourceDir holds the pinned `eventsource` package (the WHATWG
// EventSource that browsers implement) and the script that drives it.
const eventSourceDir = "testdata/eventsource"

// TestBrowserEventSource follows a run with a spec-following EventSource,
// which cannot send headers: with --query-token the token rides in the
// URL, and a wrong one is refused.
func TestBrowserEventSource(t *testing.T) {
	node := nodeWith(t, eventSourceDir, "eventsource")
	const token = "tok-eventsource-0123456789"
	h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{Tokens: token + "=alice", QueryToken: true}).As(token)
	runID := h.Chat("es", "tools")

	follow := func(query string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, node, "follow.js", h.URL+"/instance-ai/events/es?"+query, runID)
		cmd.Dir = eventSourceDir
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return stderr.String(), err
		}
		return string(out), nil
	}

	out, err := follow("access_token=" + token)
	if err != nil {
		t.Fatalf("EventSource with a query token: %v: %s", err, out)
	}
	var last int64
	var types []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m struct{ ID, Type, RunID string }
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		id, err := strconv.ParseInt(m.ID, 10, 64)
		if err != nil || id <= last {
			t.Fatalf("lastEventId %q after %d", m.ID, last)
		}
		last = id
		types = append(types, m.Type)
	}
	if types[0] != "run-start" || types[len(types)-1] != "run-finish" || countOf(types, "tool-call") != 3 {
		t.Fatalf("events %v", types)
	}

	out, err = follow("access_token=tok-wrong")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 || !strings.Contains(out, "401") {
		t.Fatalf("a wrong token: %v %s", err, out)
	}
}
