package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/servertest"
)

func TestConformanceCommand(t *testing.T) {
	good := servertest.Start(t, servertest.OpenStore(t, "memory"), servertest.Options{
		Config: server.Config{AgentName: "script", Heartbeat: time.Second}})

	var out bytes.Buffer
	if err := run(context.Background(), []string{"conformance", "-target", good.URL, "-scenarios", "hello,tools"}, &out, &out); err != nil {
		t.Fatalf("conformance against Threadline: %v\n%s", err, out.String())
	}
	for _, want := range []string{"ok    agui/tools", "ok    native/hello", "agui.run.finished-ids-match", "PASS:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	// A server that frames with CRLF and leaves a text message open.
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/run-agent" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range []string{`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`,
			`{"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}`, `{"type":"RUN_FINISHED","threadId":"t","runId":"r"}`} {
			fmt.Fprintf(w, "data: %s\r\n\r\n", ev)
		}
	}))
	defer broken.Close()
	junit := filepath.Join(t.TempDir(), "report.xml")
	out.Reset()
	err := run(context.Background(), []string{"conformance", "-target", broken.URL, "-protocol", "agui", "-json", "-junit", junit}, &out, &bytes.Buffer{})
	if exitCode(err) != 1 {
		t.Fatalf("a broken server: err %v (exit %d)", err, exitCode(err))
	}
	var rep struct {
		Passed bool `json:"passed"`
		Rules  []struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		} `json:"rules"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("-json output: %v\n%s", err, out.String())
	}
	failed := map[string]bool{}
	for _, r := range rep.Rules {
		failed[r.ID] = r.Status == "fail"
	}
	if rep.Passed || !failed["sse.lf-only"] || !failed["agui.text.closed-before-finish"] {
		t.Fatalf("report: %s", out.String())
	}
	xml, err := os.ReadFile(junit)
	if err != nil || !bytes.Contains(xml, []byte(`<failure message=`)) || !bytes.Contains(xml, []byte("sse.lf-only")) {
		t.Fatalf("junit: %v\n%s", err, xml)
	}

	if err := run(context.Background(), []string{"conformance", "-protocol", "grpc"}, &out, &out); exitCode(err) != 2 {
		t.Fatalf("bad protocol: %v", err)
	}
}
