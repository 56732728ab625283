package generate

import (
	"regexp"
	"sort"
	"strings"
)

// The builder reads descriptions by keywords: each trigger and action kind
// has a pattern, matched against the lower-cased description. A matched
// span is masked (blanked) before the next kind is tried, so one phrase
// feeds one node: "database logging" is a database write, not also a log.

// triggerKind is how a workflow starts.
type triggerKind string

const (
	triggerManual   triggerKind = "manual"
	triggerWebhook  triggerKind = "webhook"
	triggerSchedule triggerKind = "schedule"
	triggerFile     triggerKind = "file"
	triggerEmail    triggerKind = "email"
	triggerForm     triggerKind = "form"
	triggerChat     triggerKind = "chat"
)

// actionKind is one step of the main chain.
type actionKind string

const (
	actionDatabase actionKind = "database"
	actionSheets   actionKind = "sheets"
	actionSlack    actionKind = "slack"
	actionEmail    actionKind = "email"
	actionHTTP     actionKind = "http"
	actionAgent    actionKind = "agent"
	actionLog      actionKind = "log"
	actionIf       actionKind = "if"
)

type pattern[K any] struct {
	kind K
	re   *regexp.Regexp
}

// triggerPatterns: when several match, the one written first wins.
var triggerPatterns = []pattern[triggerKind]{
	{triggerWebhook, regexp.MustCompile(`\bwebhooks?\b|\bhttp requests? (comes? in|arrives?|is received)\b|\bapi calls?\b|\bincoming (http )?requests?\b`)},
	{triggerSchedule, regexp.MustCompile(`\bevery (\d+ )?(day|hour|minute|week|month|morning|evening|night|monday|tuesday|wednesday|thursday|friday|saturday|sunday)s?\b|\bschedul\w*\b|\bcron\b|\b(daily|weekly|hourly|monthly|nightly)\b`)},
	{triggerEmail, regexp.MustCompile(`\bnew e-?mails?\b|\binbox\b|\bincoming e-?mails?\b|\be-?mails? (arrives?|comes? in|(is|are) received)\b|\breceiv\w* (an? |new )?e-?mails?\b`)},
	{triggerFile, regexp.MustCompile(`\bnew files?\b|\bfiles?\b|\bfolders?\b|\bdirector(y|ies)\b`)},
	{triggerForm, regexp.MustCompile(`\bforms?\b`)},
	{triggerChat, regexp.MustCompile(`\bchat(bot)?s?\b|\bchat messages?\b`)},
}

// actionPatterns are tried in this order; each masks what it matched.
// Error handling and memory are not chain steps but are read the same way.
var actionPatterns = []pattern[actionKind]{
	{actionDatabase, regexp.MustCompile(`\blog(s|ging)? (to|in|into) (the |a )?(database|db|postgres(ql)?|mysql)\b|\b(database|db|postgres(ql)?|mysql|sql)( log(s|ging)?)?\b`)},
	{actionSheets, regexp.MustCompile(`\bgoogle sheets?\b|\bspreadsheets?\b|\bsheets?\b`)},
	{actionSlack, regexp.MustCompile(`\bslack\b`)},
	{actionEmail, regexp.MustCompile(`\be-?mails?\b|\bmail\b|\bsmtp\b|\bnewsletters?\b`)},
	{actionHTTP, regexp.MustCompile(`\bhttp\b|\bapis?\b|\brest\b|\bendpoints?\b|\burls?\b|\bwebhooks?\b`)},
	{actionAgent, regexp.MustCompile(`\bai agents?\b|\bagents?\b|\bai\b|\bllm\b|\bgpt[\w.-]*\b|\bopenai\b|\bchatgpt\b|\bsummari[sz]\w*\b|\bclassif\w*\b`)},
	{actionLog, regexp.MustCompile(`\blog(s|ging|ged)?\b|\baudit( log| trail)?\b`)},
	{actionIf, regexp.MustCompile(`\bif\b|\bconditions?\b|\bconditional\w*\b|\bonly when\b|\bvalidat\w*\b|\binvalid\b|\bverif(y|ies)\b`)},
}

var (
	errorHandlingPattern = regexp.MustCompile(`\berror[- ]handling\b|\bhandle (any )?(errors?|failures?)\b|\bon (errors?|failures?)\b|\b(if|when) (it|anything|something|a step|a node) fails\b|\bcatch errors?\b`)
	validationPattern    = regexp.MustCompile(`\bvalidat\w*\b|\binvalid\b|\bverif(y|ies)\b`)
	memoryPattern        = regexp.MustCompile(`\bmemory\b|\bremember\w*\b|\bconversation history\b|\bcontext of (the )?conversation\b`)
	emailWordPattern     = regexp.MustCompile(`\be-?mails?\b|\brecipients?\b|\baddress(es)?\b`)
	personPattern        = regexp.MustCompile(`\b(customers?|users?|subscribers?|recipients?|leads?|members?|clients?|sender|them)\b`)
	welcomePattern       = regexp.MustCompile(`\bwelcome\b|\bonboard\w*\b`)
	databaseLogPattern   = regexp.MustCompile(`\blog(s|ging)? (to|in|into) (the |a )?(database|db|postgres(ql)?|mysql)\b|\b(database|db|postgres(ql)?|mysql|sql) log(s|ging)?\b`)
	mysqlPattern         = regexp.MustCompile(`\bmy ?sql\b`)
	fetchPattern         = regexp.MustCompile(`\b(fetch|get|retrieve|download|read|pull|poll)\w*\b`)
	urlPattern           = regexp.MustCompile(`https?://[^\s"'<>]+[^\s"'<>.,;:!?)]`)
	channelPattern       = regexp.MustCompile(`#[a-z0-9][a-z0-9_-]*`)
	pathPattern          = regexp.MustCompile(`(^|\s)(/[\w.-]+)+/?`)
	cronPattern          = regexp.MustCompile(`(^|\s)([\d*/,-]+ ){4}[\d*/,-]+($|\s)`)
	everyNPattern        = regexp.MustCompile(`\bevery (\d+) (minute|hour|day|week|month)s?\b`)
	weekdayPattern       = regexp.MustCompile(`\b(mondays?|tuesdays?|wednesdays?|thursdays?|fridays?|saturdays?|sundays?)\b`)
)

// span is a matched byte range of the lower-cased description.
type span struct{ start, end int }

type foundAction struct {
	kind actionKind
	at   span
}

// normalise lower-cases a description and folds runs of white space, so
// patterns can use single spaces.
func normalise(description string) string {
	return strings.Join(strings.Fields(strings.ToLower(description)), " ")
}

// mask blanks a span so later patterns do not match it again. Blanking
// with spaces keeps every other offset valid.
func mask(text string, s span) string {
	return text[:s.start] + strings.Repeat(" ", s.end-s.start) + text[s.end:]
}

// outgoingPattern is what the workflow does rather than what starts it:
// "make an API call" is an HTTP step, "send a new email" an email step.
var outgoingPattern = regexp.MustCompile(`\b(make|makes|making|send|sends|sending|do|perform|performs|write|compose|draft)s? (an? |the )?(api calls?|new e-?mails?)\b`)

// findTrigger returns the trigger written first in text, or the manual
// trigger when none is.
func findTrigger(text string) (triggerKind, span, bool) {
	for _, loc := range outgoingPattern.FindAllStringIndex(text, -1) {
		text = mask(text, span{loc[0], loc[1]})
	}
	best, found := triggerManual, false
	var at span
	for _, p := range triggerPatterns {
		loc := p.re.FindStringIndex(text)
		if loc != nil && (!found || loc[0] < at.start) {
			best, at, found = p.kind, span{loc[0], loc[1]}, true
		}
	}
	return best, at, found
}

// findActions returns each action kind text names, once, in the order the
// description first names them.
func findActions(text string) []foundAction {
	var found []foundAction
	for _, p := range actionPatterns {
		locs := p.re.FindAllStringIndex(text, -1)
		if locs == nil {
			continue
		}
		found = append(found, foundAction{p.kind, span{locs[0][0], locs[0][1]}})
		for _, loc := range locs {
			text = mask(text, span{loc[0], loc[1]})
		}
	}
	sort.SliceStable(found, func(i, j int) bool { return found[i].at.start < found[j].at.start })
	return found
}

// orderSteps turns the actions in written order into chain order. A
// condition guards the step written after it ("if it is valid, send…"),
// or, written last, the step just before it ("send a Slack message if the
// total is over 100").
func orderSteps(found []foundAction) []actionKind {
	kinds := make([]actionKind, len(found))
	for i, f := range found {
		kinds[i] = f.kind
	}
	for i, k := range kinds {
		if k == actionIf && i == len(kinds)-1 && i > 0 {
			kinds[i-1], kinds[i] = kinds[i], kinds[i-1]
			break
		}
	}
	return kinds
}
