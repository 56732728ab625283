package builder

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Rule is what a name broke.
type Rule string

// The rules of names. Project names, workflow file names and version file
// names become paths and URL segments elsewhere, so they are kept to a
// plain alphabet with no way to climb out of a directory.
const (
	RuleLength  Rule = "must be 1 to 100 characters long"
	RuleCharset Rule = "may contain only letters, digits, '.', '_' and '-'"
	RuleLeading Rule = "must not start with '.' or '-'"
	RuleDotDot  Rule = "must not contain '..'"
	RuleJSON    Rule = "must end in .json"
)

// MaxNameLength is the longest name allowed.
const MaxNameLength = 100

// The fields a NameError names.
const (
	FieldProject  = "project name"
	FieldFilename = "filename"
	FieldVersion  = "version filename"
)

// NameError is a name that breaks a Rule.
type NameError struct {
	Field string // FieldProject, FieldFilename or FieldVersion
	Value string
	Rule  Rule
}

func (e *NameError) Error() string {
	return fmt.Sprintf("%s %q %s", e.Field, e.Value, e.Rule)
}

// ValueError is any other input a Store refuses: settings out of range,
// workflow data that is not a JSON object, a negative keep count.
type ValueError struct {
	Field string // the JSON name, settings.version_limit say
	Rule  string
}

func (e *ValueError) Error() string { return e.Field + " " + e.Rule }

// CheckName checks a project name.
func CheckName(name string) error { return checkName(FieldProject, name) }

// CheckFilename checks a workflow file name: a name ending in .json.
func CheckFilename(name string) error { return checkFile(FieldFilename, name) }

// CheckVersionName checks a version file name.
func CheckVersionName(name string) error { return checkFile(FieldVersion, name) }

func checkFile(field, name string) error {
	if err := checkName(field, name); err != nil {
		return err
	}
	if !strings.HasSuffix(name, ".json") {
		return &NameError{Field: field, Value: name, Rule: RuleJSON}
	}
	return nil
}

func checkName(field, name string) error {
	fail := func(r Rule) error { return &NameError{Field: field, Value: name, Rule: r} }
	if name == "" || len(name) > MaxNameLength {
		return fail(RuleLength)
	}
	for i := range len(name) {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fail(RuleCharset)
		}
	}
	if name[0] == '.' || name[0] == '-' {
		return fail(RuleLeading)
	}
	if strings.Contains(name, "..") {
		return fail(RuleDotDot)
	}
	return nil
}

// Settings are a project's options: the two the builder acts on and any
// other keys a client stored, kept as given.
type Settings struct {
	// AutoBackup makes every replacing save keep the previous content.
	AutoBackup bool
	// VersionLimit is how many versions of a file are kept (1..1000).
	VersionLimit int
	// Extra holds the other keys, each a JSON value.
	Extra map[string]json.RawMessage
}

// Limits of Settings.VersionLimit.
const (
	DefaultVersionLimit = 10
	MaxVersionLimit     = 1000
)

// DefaultSettings are a new project's settings.
func DefaultSettings() Settings {
	return Settings{AutoBackup: true, VersionLimit: DefaultVersionLimit}
}

const (
	keyAutoBackup   = "auto_backup"
	keyVersionLimit = "version_limit"
)

// MarshalJSON writes one object: the extra keys and the two known ones, in
// key order.
func (s Settings) MarshalJSON() ([]byte, error) {
	m := make(map[string]json.RawMessage, len(s.Extra)+2)
	for k, v := range s.Extra {
		m[k] = v
	}
	m[keyAutoBackup] = json.RawMessage(strconv.FormatBool(s.AutoBackup))
	m[keyVersionLimit] = json.RawMessage(strconv.Itoa(s.VersionLimit))
	return json.Marshal(m)
}

// UnmarshalJSON reads an object; a known key that is missing keeps its
// default, one of the wrong type is a *ValueError.
func (s *Settings) UnmarshalJSON(data []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return &ValueError{Field: "settings", Rule: "must be a JSON object"}
	}
	out := DefaultSettings()
	if v, ok := m[keyAutoBackup]; ok {
		if err := json.Unmarshal(v, &out.AutoBackup); err != nil {
			return &ValueError{Field: "settings." + keyAutoBackup, Rule: "must be true or false"}
		}
		delete(m, keyAutoBackup)
	}
	if v, ok := m[keyVersionLimit]; ok {
		if err := json.Unmarshal(v, &out.VersionLimit); err != nil {
			return &ValueError{Field: "settings." + keyVersionLimit, Rule: "must be an integer"}
		}
		delete(m, keyVersionLimit)
	}
	if len(m) > 0 {
		out.Extra = m
	}
	*s = out
	return nil
}

// Check reports settings a Store refuses.
func (s Settings) Check() error {
	if s.VersionLimit < 1 || s.VersionLimit > MaxVersionLimit {
		return &ValueError{Field: "settings." + keyVersionLimit, Rule: fmt.Sprintf("must be between 1 and %d, got %d", MaxVersionLimit, s.VersionLimit)}
	}
	for k, v := range s.Extra {
		if !json.Valid(v) {
			return &ValueError{Field: "settings." + k, Rule: "must be a JSON value"}
		}
	}
	return nil
}

// CheckNewProject checks p and returns it with its settings filled in.
func CheckNewProject(p NewProject) (NewProject, error) {
	if err := CheckName(p.Name); err != nil {
		return p, err
	}
	if p.Settings == nil {
		d := DefaultSettings()
		p.Settings = &d
	}
	if err := p.Settings.Check(); err != nil {
		return p, err
	}
	seen := map[string]bool{}
	for _, f := range p.InitialWorkflows {
		if err := CheckFilename(f); err != nil {
			return p, err
		}
		if seen[f] {
			return p, &ValueError{Field: "initial_workflows", Rule: fmt.Sprintf("lists %q twice", f)}
		}
		seen[f] = true
	}
	return p, nil
}

// EmptyWorkflow is the content of an initial workflow: named after the
// file, without nodes.
func EmptyWorkflow(filename string) json.RawMessage {
	name, _ := json.Marshal(strings.TrimSuffix(filename, ".json"))
	return json.RawMessage(`{"name":` + string(name) + `,"nodes":[],"connections":{}}`)
}

// CheckWorkflowData refuses what is not a JSON object.
func CheckWorkflowData(data json.RawMessage) error {
	if !isObject(data) {
		return &ValueError{Field: "workflow_data", Rule: "must be a JSON object"}
	}
	return nil
}

func isObject(data []byte) bool {
	return json.Valid(data) && bytes.HasPrefix(bytes.TrimLeft(data, " \t\r\n"), []byte("{"))
}

// CheckKeep checks CleanupVersions' count.
func CheckKeep(keep int) error {
	if keep < 0 {
		return &ValueError{Field: "keep_versions", Rule: fmt.Sprintf("must not be negative, got %d", keep)}
	}
	return nil
}

// ShouldBackup says whether a save keeps the previous content: only when it
// replaces a file, and then when the caller asked or the project backs up
// automatically.
func ShouldBackup(replacing, requested bool, s Settings) bool {
	return replacing && (requested || s.AutoBackup)
}

// backupStamp is the time in a backup's name.
const backupStamp = "20060102_150405"

// BackupName is the n-th candidate name (n from 1) of a backup of filename
// made at t: <base>_backup_<YYYYMMDD_HHMMSS>.json, and from the second on
// <base>_backup_<YYYYMMDD_HHMMSS>_<n>.json, so that backups made within one
// second get names of their own. A Store takes the first that is free.
func BackupName(filename string, t time.Time, n int) string {
	base := strings.TrimSuffix(filename, ".json") + "_backup_" + t.UTC().Format(backupStamp)
	if n > 1 {
		base += "_" + strconv.Itoa(n)
	}
	return base + ".json"
}

// IsBackupName tells the names BackupName makes.
func IsBackupName(name string) bool {
	return strings.Contains(name, "_backup_") && strings.HasSuffix(name, ".json")
}

// Description is what Describe reads from a workflow document.
type Description struct {
	Name      string
	NodeCount int
	Tags      []string // never nil
}

// Describe reads a workflow's name, number of nodes and tag names. n8n
// writes tags as objects with a name or as plain strings; both are read.
// What is missing or of another shape is left zero: a version of any
// content can be described. NUL characters are dropped from the name and
// tags, which stores keep as text (PostgreSQL's TEXT cannot hold them).
func Describe(data []byte) Description {
	var doc struct {
		Name  json.RawMessage   `json:"name"`
		Nodes []json.RawMessage `json:"nodes"`
		Tags  []json.RawMessage `json:"tags"`
	}
	d := Description{Tags: []string{}}
	if json.Unmarshal(data, &doc) != nil {
		// One field of the wrong type fails the whole decode; read them
		// one by one.
		var m map[string]json.RawMessage
		if json.Unmarshal(data, &m) != nil {
			return d
		}
		doc.Name = m["name"]
		_ = json.Unmarshal(m["nodes"], &doc.Nodes)
		_ = json.Unmarshal(m["tags"], &doc.Tags)
	}
	_ = json.Unmarshal(doc.Name, &d.Name)
	d.Name = strings.ReplaceAll(d.Name, "\x00", "")
	d.NodeCount = len(doc.Nodes)
	for _, raw := range doc.Tags {
		var name string
		if json.Unmarshal(raw, &name) != nil {
			var tag struct {
				Name string `json:"name"`
			}
			if json.Unmarshal(raw, &tag) != nil {
				continue
			}
			name = tag.Name
		}
		if name = strings.ReplaceAll(name, "\x00", ""); name != "" {
			d.Tags = append(d.Tags, name)
		}
	}
	return d
}

// SizeMB is a byte count in megabytes (2^20 bytes), to three decimals.
func SizeMB(size int64) float64 {
	return math.Round(float64(size)/(1<<20)*1000) / 1000
}

// NewVersion describes a version from its stored parts.
func NewVersion(filename string, made, modified time.Time, content []byte) Version {
	return DescribedVersion(filename, made, modified, int64(len(content)), Describe(content))
}

// DescribedVersion is NewVersion for a store that described the content
// when it kept it.
func DescribedVersion(filename string, made, modified time.Time, size int64, d Description) Version {
	return Version{Filename: filename, Timestamp: made, CreatedDate: made, ModifiedDate: modified,
		FileSize: size, FileSizeMB: SizeMB(size),
		WorkflowName: d.Name, NodeCount: d.NodeCount, Tags: d.Tags, IsBackup: IsBackupName(filename)}
}

// ComputeStats summarises projects (one user's).
func ComputeStats(projects []Project) Stats {
	st := Stats{TotalProjects: len(projects), ProjectNames: []string{}}
	sorted := slices.Clone(projects)
	slices.SortFunc(sorted, func(a, b Project) int { return cmp.Compare(a.Name, b.Name) })
	var largest, recent *Project
	for i := range sorted {
		p := &sorted[i]
		st.ProjectNames = append(st.ProjectNames, p.Name)
		st.TotalWorkflows += p.WorkflowCount
		if largest == nil || p.WorkflowCount > largest.WorkflowCount {
			largest = p
		}
		if recent == nil || p.LastModified.After(recent.LastModified) {
			recent = p
		}
	}
	if len(sorted) > 0 {
		st.AverageWorkflowsPerProject = math.Round(float64(st.TotalWorkflows)/float64(len(sorted))*100) / 100
		st.LargestProject, st.MostRecentProject = largest.Name, recent.Name
	}
	return st
}

// Hash is the hash of a workflow document an Iteration records: 64-bit
// FNV-1a of the document's bytes exactly as given, so it is stable across
// processes and versions (unlike a language's built-in hash) and any two
// byte-identical documents agree, cut to its low 53 bits (HashOf) so that
// a JavaScript client, whose numbers are doubles, reads the JSON number
// exactly.
func Hash(doc []byte) uint64 {
	h := fnv.New64a()
	h.Write(doc)
	return HashOf(h.Sum64())
}

// HashOf cuts a 64-bit hash to the 53 bits an Iteration reports: what
// Hash returns, and what a store reads of a hash an older version kept
// whole.
func HashOf(h uint64) uint64 { return h & (1<<53 - 1) }

// NewIteration records a step from original to modified.
func NewIteration(workflowID, description string, original, modified []byte, changes json.RawMessage) Iteration {
	return Iteration{WorkflowID: workflowID, Description: description,
		OriginalHash: Hash(original), ModifiedHash: Hash(modified), ChangesSummary: changes,
		OriginalSize: int64(len(original)), ModifiedSize: int64(len(modified))}
}

// CheckIteration checks a step for AddIteration. An empty changes summary
// is stored as {}.
func CheckIteration(it Iteration) (Iteration, error) {
	if it.WorkflowID == "" {
		return it, &ValueError{Field: "workflow_id", Rule: "must not be empty"}
	}
	if len(it.ChangesSummary) == 0 {
		it.ChangesSummary = json.RawMessage(`{}`)
	}
	if !isObject(it.ChangesSummary) {
		return it, &ValueError{Field: "changes_summary", Rule: "must be a JSON object"}
	}
	if it.OriginalSize < 0 {
		return it, &ValueError{Field: "original_size", Rule: "must not be negative"}
	}
	if it.ModifiedSize < 0 {
		return it, &ValueError{Field: "modified_size", Rule: "must not be negative"}
	}
	return it, nil
}

// CheckFeedback checks feedback for AddFeedback.
func CheckFeedback(f Feedback) error {
	if f.WorkflowID == "" {
		return &ValueError{Field: "workflow_id", Rule: "must not be empty"}
	}
	return nil
}

// Stamp is t as Stores return it, UTC to the microsecond (PostgreSQL's
// resolution), or now for a zero t.
func Stamp(t time.Time) time.Time {
	if t.IsZero() {
		t = time.Now()
	}
	return t.UTC().Truncate(time.Microsecond)
}
