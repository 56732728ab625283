package conformance

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// ScenarioResult is what one scenario's streams gave.
type ScenarioResult struct {
	Name     string        `json:"name"`
	Protocol string        `json:"protocol"`
	Findings []Finding     `json:"findings"`
	Duration time.Duration `json:"durationNs"`
	// Error is set when the scenario could not be driven at all (the
	// server refused the request, say); its rules are then not judged.
	Error string `json:"error,omitempty"`
}

// Counts tallies findings by status.
func Counts(fs []Finding) (pass, fail, skip int) {
	for _, f := range fs {
		switch f.Status {
		case Pass:
			pass++
		case Fail:
			fail++
		default:
			skip++
		}
	}
	return
}

// RuleVerdict is a rule's verdict over every scenario.
type RuleVerdict struct {
	Rule
	Status   Status    `json:"status"`
	Passed   int       `json:"passed"`
	Failures []Finding `json:"failures,omitempty"`
	// SkipReason is the first skip's detail, for a rule no scenario
	// judged.
	SkipReason string `json:"skipReason,omitempty"`
}

// Report is a whole run of the suite.
type Report struct {
	Target    string           `json:"target"`
	Protocols []string         `json:"protocols"`
	Scenarios []ScenarioResult `json:"scenarios"`
	Rules     []RuleVerdict    `json:"rules"`
	Passed    bool             `json:"passed"`
}

// Summarize folds the scenarios' findings into one verdict per rule of the
// catalog whose protocol is among protocols ("sse" rules go with any).
func Summarize(target string, protocols []string, catalog *Catalog, scenarios []ScenarioResult) *Report {
	r := &Report{Target: target, Protocols: protocols, Scenarios: scenarios, Passed: true}
	byRule := map[string]*RuleVerdict{}
	for _, rule := range catalog.Rules() {
		p := Protocol(rule.ID)
		if p != "sse" && !contains(protocols, p) {
			continue
		}
		r.Rules = append(r.Rules, RuleVerdict{Rule: rule, Status: Skip})
	}
	for i := range r.Rules {
		byRule[r.Rules[i].ID] = &r.Rules[i]
	}
	for _, sc := range scenarios {
		if sc.Error != "" {
			r.Passed = false
		}
		for _, f := range sc.Findings {
			v := byRule[f.Rule]
			if v == nil {
				continue
			}
			f.Scenario = sc.Protocol + "/" + sc.Name
			switch f.Status {
			case Fail:
				v.Status = Fail
				v.Failures = append(v.Failures, f)
				r.Passed = false
			case Pass:
				v.Passed++
				if v.Status == Skip {
					v.Status = Pass
				}
			default:
				if v.SkipReason == "" {
					v.SkipReason = f.Detail
				}
			}
		}
	}
	return r
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// WriteProgress writes the one line a scenario gets while the suite runs.
func WriteProgress(w io.Writer, sc ScenarioResult) {
	if sc.Error != "" {
		fmt.Fprintf(w, "ERROR %s/%s: %s\n", sc.Protocol, sc.Name, sc.Error)
		return
	}
	pass, fail, skip := Counts(sc.Findings)
	mark := "ok  "
	if fail > 0 {
		mark = "FAIL"
	}
	fmt.Fprintf(w, "%s  %s/%s: %d pass, %d fail, %d skip (%s)\n", mark, sc.Protocol, sc.Name, pass, fail, skip,
		sc.Duration.Round(time.Millisecond))
}

// WriteTable writes the rule table: one line per rule with its verdict,
// then the failures in detail.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tVERDICT\tSCENARIOS\tTITLE")
	for _, v := range r.Rules {
		n := fmt.Sprintf("%d passed", v.Passed)
		if len(v.Failures) > 0 {
			n = fmt.Sprintf("%d failed", len(v.Failures))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.ID, strings.ToUpper(string(v.Status)), n, v.Title)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var failed []RuleVerdict
	pass, fail, skip := 0, 0, 0
	for _, v := range r.Rules {
		switch v.Status {
		case Pass:
			pass++
		case Fail:
			fail++
			failed = append(failed, v)
		default:
			skip++
		}
	}
	for _, v := range failed {
		fmt.Fprintf(w, "\n%s — %s\n  source: %s\n", v.ID, v.Title, v.Source)
		for _, f := range v.Failures {
			fmt.Fprintf(w, "  %s: %s\n", f.Scenario, f.Detail)
		}
	}
	for _, sc := range r.Scenarios {
		if sc.Error != "" {
			fmt.Fprintf(w, "\nscenario %s/%s could not run: %s\n", sc.Protocol, sc.Name, sc.Error)
		}
	}
	verdict := "PASS"
	if !r.Passed {
		verdict = "FAIL"
	}
	_, err := fmt.Fprintf(w, "\n%s: %d rules passed, %d failed, %d skipped, over %d scenarios against %s\n",
		verdict, pass, fail, skip, len(r.Scenarios), r.Target)
	return err
}

// WriteJSON writes the report as JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// JUnit XML, as CI systems (Jenkins, GitLab, GitHub actions reporters)
// read it: one test suite per protocol, one test case per rule.
type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Name    string       `xml:"name,attr"`
	Tests   int          `xml:"tests,attr"`
	Fails   int          `xml:"failures,attr"`
	Skips   int          `xml:"skipped,attr"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name  string      `xml:"name,attr"`
	Tests int         `xml:"tests,attr"`
	Fails int         `xml:"failures,attr"`
	Skips int         `xml:"skipped,attr"`
	Cases []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	ClassName string        `xml:"classname,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
	Skipped   *junitSkipped `xml:"skipped,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

type junitSkipped struct {
	Message string `xml:"message,attr,omitempty"`
}

// WriteJUnit writes the report as JUnit XML.
func (r *Report) WriteJUnit(w io.Writer) error {
	out := junitSuites{Name: "threadline conformance " + r.Target}
	suites := map[string]*junitSuite{}
	var order []string
	for _, v := range r.Rules {
		p := Protocol(v.ID)
		s := suites[p]
		if s == nil {
			s = &junitSuite{Name: p}
			suites[p] = s
			order = append(order, p)
		}
		c := junitCase{Name: v.ID + " — " + v.Title, ClassName: "conformance." + p}
		switch v.Status {
		case Fail:
			var b strings.Builder
			for _, f := range v.Failures {
				fmt.Fprintf(&b, "%s: %s\n", f.Scenario, f.Detail)
			}
			c.Failure = &junitFailure{Message: v.Failures[0].Detail, Text: b.String() + "source: " + v.Source}
			s.Fails++
		case Skip:
			c.Skipped = &junitSkipped{Message: v.SkipReason}
			s.Skips++
		}
		s.Tests++
		s.Cases = append(s.Cases, c)
	}
	for _, p := range order {
		s := suites[p]
		out.Tests += s.Tests
		out.Fails += s.Fails
		out.Skips += s.Skips
		out.Suites = append(out.Suites, *s)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(out); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
