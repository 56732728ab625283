package conformance

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"net/http"
	"strings"
	"testing"
)

var testRules = []Rule{
	{ID: "agui.a", Title: "A holds", Source: "PROTOCOLS.md §2"},
	{ID: "agui.b", Title: "B holds", Source: "PROTOCOLS.md §2"},
	{ID: "native.c", Title: "C holds", Source: "PROTOCOLS.md §1"},
	{ID: "sse.d", Title: "D holds", Source: "PROTOCOLS.md §1"},
}

func TestTally(t *testing.T) {
	ta := NewTally(testRules[:2])
	ta.Pass("agui.a")
	ta.Fail("agui.a", "event %d is wrong", 3)
	ta.Fail("agui.a", "event %d is wrong too", 4)
	ta.Pass("agui.a")
	ta.Expect("agui.a", true, "unused")
	ta.Skip("agui.b", "no tool calls")
	ta.Expect("agui.zz", false, "from a %s bug", "checker")
	got := ta.Findings()
	want := []Finding{
		{Rule: "agui.a", Status: Fail, Detail: "event 3 is wrong (and 1 more)"},
		{Rule: "agui.b", Status: Skip, Detail: "no tool calls"},
		{Rule: "agui.zz", Status: Fail, Detail: "from a checker bug"},
	}
	if len(got) != len(want) {
		t.Fatalf("findings %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("finding %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestCatalog(t *testing.T) {
	c, err := NewCatalog(testRules[2:], testRules[:2])
	if err != nil {
		t.Fatal(err)
	}
	if rs := c.Rules(); len(rs) != 4 || rs[0].ID != "agui.a" || rs[3].ID != "sse.d" {
		t.Fatalf("rules %+v", rs)
	}
	if _, err := NewCatalog(testRules, testRules[:1]); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("duplicate: %v", err)
	}
	if _, err := NewCatalog([]Rule{{ID: "x.y", Title: "t"}}); err == nil {
		t.Fatal("a rule without a source was accepted")
	}
}

func report(t *testing.T) *Report {
	t.Helper()
	c, err := NewCatalog(testRules)
	if err != nil {
		t.Fatal(err)
	}
	return Summarize("http://x", []string{"agui"}, c, []ScenarioResult{
		{Name: "hello", Protocol: "agui", Findings: []Finding{Passf("agui.a"), Skipf("agui.b", "no tools"), Passf("sse.d")}},
		{Name: "tools", Protocol: "agui", Findings: []Finding{Failf("agui.a", "TEXT_MESSAGE_END missing"), Passf("sse.d"), Passf("native.c")}},
	})
}

func TestSummarize(t *testing.T) {
	r := report(t)
	if r.Passed || len(r.Rules) != 3 {
		t.Fatalf("report %+v", r)
	}
	a, b, d := r.Rules[0], r.Rules[1], r.Rules[2]
	if a.Status != Fail || a.Passed != 1 || len(a.Failures) != 1 || a.Failures[0].Scenario != "agui/tools" {
		t.Errorf("agui.a %+v", a)
	}
	if b.Status != Skip || b.SkipReason != "no tools" {
		t.Errorf("agui.b %+v", b)
	}
	if d.Status != Pass || d.Passed != 2 {
		t.Errorf("sse.d %+v", d)
	}
	ok := Summarize("http://x", []string{"agui"}, mustCatalog(t), []ScenarioResult{{Name: "hello", Protocol: "agui", Findings: []Finding{Passf("agui.a")}}})
	if !ok.Passed {
		t.Error("a run without failures did not pass")
	}
	broken := Summarize("http://x", []string{"agui"}, mustCatalog(t), []ScenarioResult{{Name: "hello", Protocol: "agui", Error: "refused"}})
	if broken.Passed {
		t.Error("a scenario that could not run passed")
	}
}

func mustCatalog(t *testing.T) *Catalog {
	c, err := NewCatalog(testRules)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestOutputs(t *testing.T) {
	r := report(t)
	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"agui.a", "FAIL", "agui/tools: TEXT_MESSAGE_END missing", "FAIL: 1 rules passed, 1 failed, 1 skipped"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.Passed || len(back.Rules) != 3 || back.Rules[0].Failures[0].Detail != "TEXT_MESSAGE_END missing" {
		t.Fatalf("JSON: %v %s", err, js.String())
	}
	var junit bytes.Buffer
	if err := r.WriteJUnit(&junit); err != nil {
		t.Fatal(err)
	}
	var suites struct {
		Tests  int `xml:"tests,attr"`
		Fails  int `xml:"failures,attr"`
		Skips  int `xml:"skipped,attr"`
		Suites []struct {
			Name  string `xml:"name,attr"`
			Cases []struct {
				Name    string `xml:"name,attr"`
				Failure *struct {
					Message string `xml:"message,attr"`
				} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(junit.Bytes(), &suites); err != nil {
		t.Fatalf("JUnit: %v\n%s", err, junit.String())
	}
	if suites.Tests != 3 || suites.Fails != 1 || suites.Skips != 1 || len(suites.Suites) != 2 ||
		suites.Suites[0].Cases[0].Failure == nil || suites.Suites[0].Cases[0].Failure.Message != "TEXT_MESSAGE_END missing" {
		t.Fatalf("JUnit:\n%s", junit.String())
	}
	var progress bytes.Buffer
	WriteProgress(&progress, r.Scenarios[1])
	WriteProgress(&progress, ScenarioResult{Name: "x", Protocol: "native", Error: "refused"})
	if got := progress.String(); !strings.HasPrefix(got, "FAIL  agui/tools: 2 pass, 1 fail, 0 skip") || !strings.Contains(got, "ERROR native/x: refused") {
		t.Errorf("progress %q", got)
	}
}

func TestParseRecording(t *testing.T) {
	rec, err := ParseRecording(http.Header{"Content-Type": {"text/event-stream"}}, []byte(": connected\n\nid: 1\ndata: {\"a\":1}\n\nevent: run-sync\ndata: {}\n\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Frames) != 3 || len(rec.Data()) != 2 || rec.Data()[0].ID != "1" || rec.Data()[1].Event != "run-sync" {
		t.Fatalf("frames %+v", rec.Frames)
	}
}
