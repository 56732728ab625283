package generate

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/threadline/threadline/workflow"
)

// A change description is read in this order, each part masking what it
// used: removals ("remove the Slack message"), a rename ("rename Send
// Email to Notify"), validation ("handle invalid emails": an If checking
// the recipient before the email step, invalid ones flagged on its false
// output), error handling (an Error Trigger branch), and finally steps to
// add, after "after <node>" when it names one, else at the end of the main
// chain. Steps of a kind the workflow already has are not added again
// unless the text says "another" (feedback such as "the email sending
// works" names the email step, it does not ask for a second one).

var (
	removePattern  = regexp.MustCompile(`\b(remove|delete|drop)\s+(the\s+)?(.+?)(\s+(node|step))?(\s*([,;.]|$)|\s+(and|then)\b)`)
	renamePattern  = regexp.MustCompile(`(?i)\brename\s+(the\s+)?(node\s+)?["“']?(.+?)["”']?\s+(node\s+)?to\s+["“']?(.+?)["”']?\s*([.;]|$)`)
	anchorPattern  = regexp.MustCompile(`\b(after|following|before)\s+(.+?)(\s*([,;.]|$)|\s+(and|then)\b)`)
	againPattern   = regexp.MustCompile(`\b(another|second|additional|extra)\b`)
	logWordPattern = regexp.MustCompile(`\blog(s|ging)?\b`)
)

// nodeKeywords maps words naming a node to node types, in preference
// order: "email" is the sending step before it is the IMAP trigger.
var nodeKeywords = []struct {
	re    *regexp.Regexp
	types []string
}{
	{regexp.MustCompile(`\berror (handling|trigger|branch|workflow)\b`), []string{typeErrorTrigger}},
	{regexp.MustCompile(`\bmy ?sql\b`), []string{typeMySQL}},
	{regexp.MustCompile(`\b(database|db|postgres(ql)?|sql)\b`), []string{typePostgres, typeMySQL}},
	{regexp.MustCompile(`\be-?mails?\b|\bmail\b|\brecipients?\b`), []string{typeEmailSend, typeIMAP}},
	{regexp.MustCompile(`\bslack\b`), []string{typeSlack}},
	{regexp.MustCompile(`\bhttp\b|\bapis?\b|\brequests?\b`), []string{typeHTTPRequest}},
	{regexp.MustCompile(`\b(google )?sheets?\b|\bspreadsheets?\b`), []string{typeSheets}},
	{regexp.MustCompile(`\b(if|conditions?|validation|check)\b`), []string{typeIf}},
	{regexp.MustCompile(`\bmodel\b|\bopenai\b|\bllm\b`), []string{typeOpenAIModel}},
	{regexp.MustCompile(`\bmemory\b`), []string{typeMemory}},
	{regexp.MustCompile(`\bagents?\b|\bai\b`), []string{typeAgent}},
	{regexp.MustCompile(`\bwebhook\b`), []string{typeWebhook}},
	{regexp.MustCompile(`\bschedule\b`), []string{typeSchedule}},
	{regexp.MustCompile(`\bform\b`), []string{typeFormTrigger}},
	{regexp.MustCompile(`\bchat\b`), []string{typeChatTrigger}},
}

// kindTypes are the node types that already provide a step kind.
var kindTypes = map[actionKind][]string{
	actionEmail: {typeEmailSend}, actionSlack: {typeSlack}, actionHTTP: {typeHTTPRequest},
	actionDatabase: {typePostgres, typeMySQL}, actionSheets: {typeSheets}, actionAgent: {typeAgent}, actionIf: {typeIf},
}

// Modify applies a change description to a copy of w. When the
// description names nothing it can apply, or names a node that does not
// exist, the error is a *NotUnderstoodError saying which.
func Modify(w *workflow.Workflow, description string) (*workflow.Workflow, error) {
	if w == nil {
		return nil, ErrNoWorkflow
	}
	text := normalise(description)
	if text == "" {
		return nil, &NotUnderstoodError{description, "the change description is empty"}
	}
	out, err := clone(w)
	if err != nil {
		return nil, err
	}
	m := &modification{
		g:           &graph{w: out, seed: "modify\x00" + w.Name + "\x00" + text},
		description: description,
		text:        text,
	}
	for _, step := range []func() error{m.removals, m.rename, m.validation, m.errorHandling, m.additions} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	if !m.changed {
		reason := "it names no step to add, remove or rename, and no validation or error handling"
		if len(m.skipped) > 0 {
			reason = strings.Join(m.skipped, "; ")
		}
		return nil, &NotUnderstoodError{description, reason}
	}
	return out, nil
}

// Iterate applies test feedback, then additional requirements, to a copy
// of w. Either may name nothing to change ("the email sending works"); at
// least one must.
func Iterate(w *workflow.Workflow, feedback, additional string) (*workflow.Workflow, error) {
	if w == nil {
		return nil, ErrNoWorkflow
	}
	cur, applied := w, false
	var reasons []string
	for _, text := range []string{feedback, additional} {
		if strings.TrimSpace(text) == "" {
			continue
		}
		next, err := Modify(cur, text)
		var nu *NotUnderstoodError
		if errors.As(err, &nu) {
			reasons = append(reasons, nu.Error())
			continue
		}
		if err != nil {
			return nil, err
		}
		cur, applied = next, true
	}
	if !applied {
		reason := "both the feedback and the additional requirements are empty"
		if len(reasons) > 0 {
			reason = strings.Join(reasons, "; ")
		}
		return nil, &NotUnderstoodError{strings.TrimSpace(feedback + " " + additional), reason}
	}
	return cur, nil
}

// modification is one Modify call's progress: text loses each part once
// it has been applied.
type modification struct {
	g           *graph
	description string
	text        string
	changed     bool
	skipped     []string // parts understood but with nothing to do
}

func (m *modification) consume(loc []int) {
	m.text = mask(m.text, span{loc[0], loc[1]})
}

func (m *modification) notUnderstood(format string, args ...any) error {
	return &NotUnderstoodError{m.description, fmt.Sprintf(format, args...)}
}

// resolve finds the nodes a phrase names: by name when it contains one
// (the longest wins), else by the keywords of a node type.
func (m *modification) resolve(phrase string) []string {
	phrase = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(phrase), "the "))
	names := make([]string, 0, len(m.g.w.Nodes))
	for _, n := range m.g.w.Nodes {
		names = append(names, n.Name)
	}
	sort.SliceStable(names, func(i, j int) bool { return len(names[i]) > len(names[j]) })
	for _, name := range names {
		if strings.Contains(phrase, strings.ToLower(name)) {
			return []string{name}
		}
	}
	for _, k := range nodeKeywords {
		if !k.re.MatchString(phrase) {
			continue
		}
		for _, typ := range k.types {
			if found := m.nodesOfType(typ); len(found) > 0 {
				return found
			}
		}
	}
	if logWordPattern.MatchString(phrase) {
		return m.logNodes()
	}
	return nil
}

func (m *modification) nodesOfType(typ string) []string {
	var found []string
	for _, n := range m.g.w.Nodes {
		if n.Type == typ {
			found = append(found, n.Name)
		}
	}
	return found
}

// logNodes are the Edit Fields nodes named as logs.
func (m *modification) logNodes() []string {
	var found []string
	for _, n := range m.g.w.Nodes {
		if n.Type == typeSet && strings.Contains(strings.ToLower(n.Name), "log") {
			found = append(found, n.Name)
		}
	}
	return found
}

func (m *modification) removals() error {
	for {
		loc := removePattern.FindStringSubmatchIndex(m.text)
		if loc == nil {
			return nil
		}
		phrase := m.text[loc[6]:loc[7]]
		found := m.resolve(phrase)
		switch {
		case len(found) == 0:
			return m.notUnderstood("no node matches %q", phrase)
		case len(found) > 1:
			return m.notUnderstood("%q matches several nodes (%s); name one", phrase, strings.Join(found, ", "))
		}
		if err := m.remove(found[0]); err != nil {
			return err
		}
		m.consume(loc[:2])
		m.changed = true
	}
}

// remove deletes a node, feeds what fed it into what it fed (its first
// output), and deletes the nodes only it kept connected: the false branch
// of a removed If, the model and memory of a removed agent.
func (m *modification) remove(name string) error {
	g := m.g
	if name == g.firstTrigger() {
		return m.notUnderstood("%q is the workflow's trigger; a workflow needs one", name)
	}
	before := g.reachable()
	next := append([]workflow.Target(nil), g.mainTargets(name, 0)...)
	for src, outs := range g.w.Connections {
		for i, targets := range outs[workflow.Main] {
			var rewired []workflow.Target
			for _, t := range targets {
				if t.Node != name {
					rewired = appendTarget(rewired, t)
					continue
				}
				for _, n := range next {
					if n.Node != src {
						rewired = appendTarget(rewired, n)
					}
				}
			}
			if rewired == nil {
				rewired = []workflow.Target{}
			}
			outs[workflow.Main][i] = rewired
		}
	}
	g.delete(map[string]bool{name: true})
	after := g.reachable()
	lost := map[string]bool{}
	for n := range before {
		if !after[n] {
			lost[n] = true
		}
	}
	g.delete(lost)
	return nil
}

func appendTarget(list []workflow.Target, t workflow.Target) []workflow.Target {
	for _, have := range list {
		if have == t {
			return list
		}
	}
	return append(list, t)
}

func (m *modification) rename() error {
	orig := strings.Join(strings.Fields(m.description), " ")
	sub := renamePattern.FindStringSubmatch(orig)
	if sub == nil {
		return nil
	}
	oldPhrase, newName := strings.ToLower(sub[3]), strings.TrimSpace(sub[5])
	found := m.resolve(oldPhrase)
	switch {
	case len(found) == 0:
		return m.notUnderstood("no node matches %q", sub[3])
	case len(found) > 1:
		return m.notUnderstood("%q matches several nodes (%s); name one", sub[3], strings.Join(found, ", "))
	case newName == "":
		return m.notUnderstood("the new name is empty")
	case newName == found[0]:
		m.skipped = append(m.skipped, fmt.Sprintf("%q already has that name", newName))
	case m.g.node(newName) != nil:
		return m.notUnderstood("a node named %q already exists", newName)
	default:
		m.g.renameNode(found[0], newName)
		m.changed = true
	}
	if loc := renamePattern.FindStringIndex(m.text); loc != nil {
		m.consume(loc)
	}
	return nil
}

// renameNode renames a node everywhere connections name it.
func (g *graph) renameNode(from, to string) {
	g.node(from).Name = to
	if outs, ok := g.w.Connections[from]; ok {
		delete(g.w.Connections, from)
		g.w.Connections[to] = outs
	}
	for _, outs := range g.w.Connections {
		for _, byIndex := range outs {
			for _, targets := range byIndex {
				for j := range targets {
					if targets[j].Node == from {
						targets[j].Node = to
					}
				}
			}
		}
	}
}

// validation puts an If checking the recipient's address before the
// email step; invalid addresses leave by its false output to a step that
// flags them. Without an email step, the If checks the trigger's item is
// not empty before the first step.
func (m *modification) validation() error {
	loc := validationPattern.FindStringIndex(m.text)
	if loc == nil {
		return nil
	}
	m.consume(loc)
	// The validation is the error handling these requests ask for
	// ("add error handling for invalid emails").
	if l := errorHandlingPattern.FindStringIndex(m.text); l != nil {
		m.consume(l)
	}
	g := m.g
	if emails := m.nodesOfType(typeEmailSend); len(emails) > 0 {
		target := emails[0]
		if m.guarded(target) {
			m.skipped = append(m.skipped, fmt.Sprintf("%q is already validated", target))
			return nil
		}
		address := stringParam(g.node(target), "toEmail")
		if address == "" {
			address = "={{ $json.email }}"
		}
		pos := g.node(target).Position
		g.shift(g.downstream([]string{target}), stepX)
		check := g.addEmailCheck(address, pos)
		g.retarget(target, check)
		g.connect(check, 0, target, workflow.Main)
		flag := g.addInvalidEmailFlag(address, [2]float64{pos[0] + stepX, pos[1] + stepY})
		g.connect(check, 1, flag, workflow.Main)
		m.changed = true
		return nil
	}
	trigger := g.firstTrigger()
	if trigger == "" {
		return m.notUnderstood("the workflow has no trigger to validate the data of")
	}
	pos := g.node(trigger).Position
	pos[0] += stepX
	next := g.takeMainTargets(trigger, 0)
	g.shift(g.downstream(targetNames(next)), stepX)
	check := g.addCondition(pos)
	g.connect(trigger, 0, check, workflow.Main)
	for _, t := range next {
		g.connect(check, 0, t.Node, workflow.Main)
	}
	m.changed = true
	return nil
}

// guarded reports whether an If's true output already feeds name.
func (m *modification) guarded(name string) bool {
	for _, n := range m.g.w.Nodes {
		if n.Type != typeIf {
			continue
		}
		for _, t := range m.g.mainTargets(n.Name, 0) {
			if t.Node == name {
				return true
			}
		}
	}
	return false
}

func (m *modification) errorHandling() error {
	loc := errorHandlingPattern.FindStringIndex(m.text)
	if loc == nil {
		return nil
	}
	m.consume(loc)
	if len(m.nodesOfType(typeErrorTrigger)) > 0 {
		m.skipped = append(m.skipped, "the workflow already has an Error Trigger")
		return nil
	}
	m.g.addErrorBranch()
	m.changed = true
	return nil
}

// additions adds the steps the text names, chained after the anchor.
func (m *modification) additions() error {
	g := m.g
	var anchor string
	if loc := anchorPattern.FindStringSubmatchIndex(m.text); loc != nil {
		phrase := m.text[loc[4]:loc[5]]
		before := m.text[loc[2]:loc[3]] == "before"
		m.consume(loc[:2])
		if found := m.resolve(phrase); len(found) > 0 {
			anchor = found[len(found)-1]
			if before {
				anchor = m.predecessor(found[0])
			}
		}
	}
	var steps []actionKind
	again := againPattern.MatchString(m.text)
	for _, f := range orderSteps(findActions(m.text)) {
		if !again && m.has(f) {
			m.skipped = append(m.skipped, fmt.Sprintf("the workflow already has a %s step", f))
			continue
		}
		steps = append(steps, f)
	}
	if len(steps) == 0 {
		return nil
	}
	if anchor == "" {
		chain := g.chain()
		if len(chain) == 0 {
			return m.notUnderstood("the workflow has no trigger to add steps after")
		}
		anchor = chain[len(chain)-1]
	}
	next := g.takeMainTargets(anchor, 0)
	g.shift(g.downstream(targetNames(next)), float64(len(steps))*stepX)
	c := stepContext{text: normalise(m.description), original: m.description, name: g.w.Name, trigger: m.triggerKind()}
	prev, pos := anchor, g.node(anchor).Position
	for _, step := range steps {
		c.previous = g.node(prev).Type
		pos[0] += stepX
		cur := g.addAction(step, c, pos)
		g.connect(prev, 0, cur, workflow.Main)
		prev = cur
	}
	for _, t := range next {
		g.connect(prev, 0, t.Node, workflow.Main)
	}
	m.changed = true
	return nil
}

// has reports whether the workflow already has a step of kind.
func (m *modification) has(kind actionKind) bool {
	if kind == actionLog {
		return len(m.logNodes()) > 0
	}
	for _, typ := range kindTypes[kind] {
		if len(m.nodesOfType(typ)) > 0 {
			return true
		}
	}
	return false
}

// predecessor is the node whose first output feeds name, so inserting
// after it inserts before name.
func (m *modification) predecessor(name string) string {
	for _, n := range m.g.w.Nodes {
		for _, t := range m.g.mainTargets(n.Name, 0) {
			if t.Node == name {
				return n.Name
			}
		}
	}
	return ""
}

// triggerKind tells new steps where the data comes from.
func (m *modification) triggerKind() triggerKind {
	start := m.g.node(m.g.firstTrigger())
	if start == nil {
		return triggerManual
	}
	for kind, typ := range map[triggerKind]string{
		triggerWebhook: typeWebhook, triggerSchedule: typeSchedule, triggerFile: typeFileTrigger,
		triggerEmail: typeIMAP, triggerForm: typeFormTrigger, triggerChat: typeChatTrigger,
	} {
		if start.Type == typ {
			return kind
		}
	}
	return triggerManual
}

func targetNames(targets []workflow.Target) []string {
	names := make([]string, len(targets))
	for i, t := range targets {
		names[i] = t.Node
	}
	return names
}

// stringParam reads a string parameter of a node, or "".
func stringParam(n *workflow.Node, key string) string {
	var params map[string]json.RawMessage
	if json.Unmarshal(n.Parameters, &params) != nil {
		return ""
	}
	var s string
	if json.Unmarshal(params[key], &s) != nil {
		return ""
	}
	return s
}
