package publishapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/agent/external"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/publishapi"
	"github.com/threadline/threadline/server/servertest"
)

// FuzzAppendBodies sends arbitrary bytes as an append (JSON and NDJSON)
// with an arbitrary Producer-Seq, and as a start's body: the answer is
// never a 5xx, and the run still takes a good append afterwards.
func FuzzAppendBodies(f *testing.F) {
	for _, seed := range []struct{ body, seq string }{
		{`{"type":"text-delta","payload":{"text":"hi"}}`, "0"},
		{`[{"type":"text-delta","payload":{"text":"a"}},{"type":"status","payload":{"message":"working"}}]`, "1"},
		{"{\"type\":\"text-delta\",\"payload\":{\"text\":\"x\"}}\n\n{\"type\":\"nope\"}\n", "0"},
		{`{"type":"run-finish","payload":{"status":"completed"}}`, "0"},
		{`{"type":"confirmation-request","payload":{}}`, "-1"},
		{`[]`, "x"}, {`{`, "99999999999999999999"}, {``, ""}, {`{"message":"hi","runId":"../x"}`, "0"},
	} {
		f.Add(seed.body, seed.seq)
	}
	s := servertest.Start(f, servertest.OpenStore(f, "memory"), servertest.Options{
		Config: server.Config{Producers: external.NewProducers(time.Hour)}})
	client := &http.Client{Timeout: 20 * time.Second}
	post := func(tb testing.TB, path, contentType, body string, header map[string]string) (int, string) {
		tb.Helper()
		req, _ := http.NewRequest(http.MethodPost, s.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		res, err := client.Do(req)
		if err != nil {
			tb.Fatalf("%s %q: %v", path, body, err)
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return res.StatusCode, string(raw)
	}
	code, raw := post(f, "/publish/threads/fuzz/runs", "application/json", `{"runId":"fuzz-run"}`, nil)
	if code != http.StatusCreated {
		f.Fatalf("start: %d %s", code, raw)
	}
	events := "/publish/threads/fuzz/runs/fuzz-run/events"
	f.Fuzz(func(t *testing.T, body, seq string) {
		if strings.ContainsFunc(seq, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			t.Skip("not a header value a client can send")
		}
		for _, ct := range []string{"application/json", publishapi.NDJSON} {
			h := map[string]string{publishapi.HeaderProducerID: "fuzzer", publishapi.HeaderProducerEpoch: "0", publishapi.HeaderProducerSeq: seq}
			if code, raw := post(t, events, ct, body, h); code >= 500 {
				t.Fatalf("append %q (%s, seq %q): %d %s", body, ct, seq, code, raw)
			}
		}
		if code, raw := post(t, "/publish/threads/fuzz/runs", "application/json", body, nil); code >= 500 {
			t.Fatalf("start %q: %d %s", body, code, raw)
		}
		// The run goes on: an append at the producer's next sequence
		// number is stored.
		_, raw := post(t, events, "application/json", `[]`, map[string]string{publishapi.HeaderProducerID: "fuzzer",
			publishapi.HeaderProducerEpoch: "0", publishapi.HeaderProducerSeq: "0"})
		var state struct {
			NextSeq int64 `json:"nextSeq"`
			Error   struct {
				Details struct {
					NextSeq int64 `json:"nextSeq"`
				} `json:"details"`
			} `json:"error"`
		}
		_ = json.Unmarshal([]byte(raw), &state)
		next := max(state.NextSeq, state.Error.Details.NextSeq)
		code, raw := post(t, events, "application/json", `{"type":"text-delta","payload":{"text":"."}}`,
			map[string]string{publishapi.HeaderProducerID: "fuzzer", publishapi.HeaderProducerEpoch: "0",
				publishapi.HeaderProducerSeq: strconv.FormatInt(next, 10)})
		if code != http.StatusOK {
			t.Fatalf("after %q (seq %q) a good append answers %d %s", body, seq, code, raw)
		}
	})
}
