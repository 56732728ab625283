// Package conformance is a server-side protocol conformance suite: rules
// with ids, the checkers that apply them to recorded streams (aguicheck for
// AG-UI 1.0, nativecheck for n8n's Instance AI protocol, ssecheck for SSE
// framing), a runner that drives any agent server over HTTP, and reports
// as a table, JSON or JUnit XML.
//
// A checker never stops at the first problem: it reports every rule it
// could judge, each as pass or fail with a detail naming the event at
// fault, so one run gives a verdict per rule.
package conformance

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Rule is one checkable requirement.
type Rule struct {
	// ID is stable and dotted: protocol.area.name, e.g.
	// "agui.run.finished-ids-match".
	ID string `json:"id"`
	// Title says in one line what the rule requires.
	Title string `json:"title"`
	// Source points to where the requirement comes from: a PROTOCOLS.md
	// section or a spec page.
	Source string `json:"source"`
}

// Status is a rule's verdict.
type Status string

// Verdicts. A rule is skipped when nothing in what was checked could break
// it (no tool calls, say), or when its check could not run.
const (
	Pass Status = "pass"
	Fail Status = "fail"
	Skip Status = "skip"
)

// Finding is one verdict of one rule on one stream.
type Finding struct {
	Rule   string `json:"rule"`
	Status Status `json:"status"`
	// Detail explains a failure (or a skip): which event, what was
	// expected, what came.
	Detail string `json:"detail,omitempty"`
	// Scenario names what was checked (set by the runner).
	Scenario string `json:"scenario,omitempty"`
}

// Passf, Failf and Skipf build findings.
func Passf(rule string) Finding { return Finding{Rule: rule, Status: Pass} }

// Failf is a failure of rule with a formatted detail.
func Failf(rule, format string, args ...any) Finding {
	return Finding{Rule: rule, Status: Fail, Detail: fmt.Sprintf(format, args...)}
}

// Skipf is a skip of rule with a formatted reason.
func Skipf(rule, format string, args ...any) Finding {
	return Finding{Rule: rule, Status: Skip, Detail: fmt.Sprintf(format, args...)}
}

// Tally collects findings rule by rule: a rule fails if any finding fails,
// passes if any passes and none fails, and is skipped otherwise. Checkers
// use it to report each of their rules once per stream, with the first
// failure's detail.
type Tally struct {
	rules []Rule
	byID  map[string]*Finding
	extra map[string]int // failures after the first, by rule
}

// NewTally starts a tally over rules; each starts as skipped ("not
// exercised").
func NewTally(rules []Rule) *Tally {
	t := &Tally{rules: slices.Clone(rules), byID: map[string]*Finding{}, extra: map[string]int{}}
	for _, r := range rules {
		t.byID[r.ID] = &Finding{Rule: r.ID, Status: Skip, Detail: "not exercised"}
	}
	return t
}

// Pass records that rule held at least once.
func (t *Tally) Pass(rule string) {
	f := t.get(rule)
	if f.Status == Skip {
		f.Status, f.Detail = Pass, ""
	}
}

// Fail records a violation of rule.
func (t *Tally) Fail(rule, format string, args ...any) {
	f := t.get(rule)
	if f.Status == Fail {
		t.extra[rule]++
		return
	}
	f.Status, f.Detail = Fail, fmt.Sprintf(format, args...)
}

// Expect records pass when ok, else a failure with the formatted detail.
func (t *Tally) Expect(rule string, ok bool, format string, args ...any) {
	if ok {
		t.Pass(rule)
	} else {
		t.Fail(rule, format, args...)
	}
}

// Check records pass when err is nil, else a failure with err's text.
func (t *Tally) Check(rule string, err error) {
	if err != nil {
		t.Fail(rule, "%v", err)
	} else {
		t.Pass(rule)
	}
}

// Skip sets why rule could not be judged, if it was not judged.
func (t *Tally) Skip(rule, format string, args ...any) {
	if f := t.get(rule); f.Status == Skip {
		f.Detail = fmt.Sprintf(format, args...)
	}
}

func (t *Tally) get(rule string) *Finding {
	f, ok := t.byID[rule]
	if !ok {
		// A checker naming a rule it did not declare is a bug in the
		// checker; report it rather than lose it.
		f = &Finding{Rule: rule, Status: Skip}
		t.byID[rule] = f
		t.rules = append(t.rules, Rule{ID: rule, Title: "(undeclared rule)"})
	}
	return f
}

// Findings returns one finding per rule, in the rules' order.
func (t *Tally) Findings() []Finding {
	out := make([]Finding, 0, len(t.rules))
	for _, r := range t.rules {
		f := *t.byID[r.ID]
		if n := t.extra[r.ID]; n > 0 {
			f.Detail += fmt.Sprintf(" (and %d more)", n)
		}
		out = append(out, f)
	}
	return out
}

// Catalog is a set of rules from several checkers, looked up by id.
type Catalog struct {
	rules []Rule
	byID  map[string]Rule
}

// NewCatalog joins rule lists; a duplicate id is an error (two checkers
// must not claim one rule).
func NewCatalog(lists ...[]Rule) (*Catalog, error) {
	c := &Catalog{byID: map[string]Rule{}}
	for _, list := range lists {
		for _, r := range list {
			if _, dup := c.byID[r.ID]; dup {
				return nil, fmt.Errorf("rule %q is declared twice", r.ID)
			}
			if r.ID == "" || r.Title == "" || r.Source == "" {
				return nil, fmt.Errorf("rule %+v needs an id, a title and a source", r)
			}
			c.byID[r.ID] = r
			c.rules = append(c.rules, r)
		}
	}
	return c, nil
}

// Rules returns every rule, sorted by id.
func (c *Catalog) Rules() []Rule {
	out := slices.Clone(c.rules)
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Get returns the rule with id.
func (c *Catalog) Get(id string) (Rule, bool) {
	r, ok := c.byID[id]
	return r, ok
}

// Protocol returns the protocol part of a rule id ("agui", "native", "sse").
func Protocol(ruleID string) string {
	p, _, _ := strings.Cut(ruleID, ".")
	return p
}
