package builder

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCheckNames(t *testing.T) {
	for name, rule := range map[string]Rule{
		"":                         RuleLength,
		strings.Repeat("a", 101):   RuleLength,
		"a b":                      RuleCharset,
		"a/b":                      RuleCharset,
		"ä":                        RuleCharset,
		".env":                     RuleLeading,
		"-rf":                      RuleLeading,
		"a..b":                     RuleDotDot,
		"ok":                       "",
		strings.Repeat("a", 100):   "",
		"My_Project-2.0":           "",
		"ends.":                    "",
		"0leading-digit":           "",
		"_underscore":              "",
		"crm-automation.workflows": "",
	} {
		err := CheckName(name)
		if rule == "" {
			if err != nil {
				t.Errorf("CheckName(%q) = %v, want nil", name, err)
			}
			continue
		}
		var ne *NameError
		if !errors.As(err, &ne) || ne.Rule != rule || ne.Field != FieldProject || ne.Value != name {
			t.Errorf("CheckName(%q) = %v, want the rule %q", name, err, rule)
		}
	}
	if err := CheckFilename("flow.json"); err != nil {
		t.Errorf("CheckFilename(flow.json) = %v", err)
	}
	var ne *NameError
	if err := CheckFilename("flow.yaml"); !errors.As(err, &ne) || ne.Rule != RuleJSON || ne.Field != FieldFilename {
		t.Errorf("CheckFilename(flow.yaml) = %v", err)
	}
	if err := CheckVersionName("../x.json"); !errors.As(err, &ne) || ne.Field != FieldVersion {
		t.Errorf("CheckVersionName(../x.json) = %v", err)
	}
	if got := (&NameError{Field: FieldProject, Value: ".x", Rule: RuleLeading}).Error(); got != `project name ".x" must not start with '.' or '-'` {
		t.Errorf("NameError text = %s", got)
	}
}

func TestSettingsJSON(t *testing.T) {
	var s Settings
	if err := json.Unmarshal([]byte(`{}`), &s); err != nil || s.AutoBackup != true || s.VersionLimit != 10 || s.Extra != nil {
		t.Errorf("{} = %+v, %v; want the defaults", s, err)
	}
	if err := json.Unmarshal([]byte(`{"auto_backup":false,"x":[1, 2],"version_limit":5}`), &s); err != nil ||
		s.AutoBackup || s.VersionLimit != 5 || string(s.Extra["x"]) != `[1, 2]` || len(s.Extra) != 1 {
		t.Errorf("decoded %+v, %v", s, err)
	}
	enc, err := json.Marshal(s)
	if err != nil || string(enc) != `{"auto_backup":false,"version_limit":5,"x":[1,2]}` {
		t.Errorf("encoded %s, %v", enc, err)
	}
	// The known keys win over an extra of the same name.
	s.Extra["auto_backup"] = json.RawMessage(`"yes"`)
	if enc, _ := json.Marshal(s); !strings.Contains(string(enc), `"auto_backup":false`) {
		t.Errorf("encoded %s", enc)
	}
	for _, bad := range []string{`{"auto_backup":"yes"}`, `{"version_limit":1.5}`, `{"version_limit":"10"}`, `[]`} {
		var ve *ValueError
		if err := json.Unmarshal([]byte(bad), &s); !errors.As(err, &ve) {
			t.Errorf("%s: err = %v, want a ValueError", bad, err)
		}
	}
	for limit, ok := range map[int]bool{0: false, 1: true, 1000: true, 1001: false} {
		if err := (Settings{VersionLimit: limit}).Check(); (err == nil) != ok {
			t.Errorf("Check(version_limit %d) = %v", limit, err)
		}
	}
}

func TestBackupName(t *testing.T) {
	at := time.Date(2025, 1, 11, 14, 30, 22, 999, time.FixedZone("X", 3600))
	if got := BackupName("welcome-email.json", at, 1); got != "welcome-email_backup_20250111_133022.json" {
		t.Errorf("BackupName = %s", got)
	}
	if got := BackupName("welcome-email.json", at, 3); got != "welcome-email_backup_20250111_133022_3.json" {
		t.Errorf("third candidate = %s", got)
	}
	for _, n := range []int{1, 2} {
		name := BackupName("f.json", at, n)
		if !IsBackupName(name) || CheckVersionName(name) != nil {
			t.Errorf("%s is not a valid backup name", name)
		}
	}
	if IsBackupName("f.json") {
		t.Error("f.json taken for a backup")
	}
}

func TestShouldBackup(t *testing.T) {
	auto, manual := DefaultSettings(), Settings{VersionLimit: 10}
	for _, c := range []struct {
		replacing, requested bool
		s                    Settings
		want                 bool
	}{
		{false, true, auto, false}, {true, false, auto, true}, {true, false, manual, false}, {true, true, manual, true},
	} {
		if got := ShouldBackup(c.replacing, c.requested, c.s); got != c.want {
			t.Errorf("ShouldBackup(%v, %v, auto %v) = %v", c.replacing, c.requested, c.s.AutoBackup, got)
		}
	}
}

func TestDescribe(t *testing.T) {
	for doc, want := range map[string]Description{
		`{"name":"Welcome","nodes":[{},{},{}],"tags":[{"id":"1","name":"email"},"automation",{"id":"2"},7]}`: {"Welcome", 3, []string{"email", "automation"}},
		`{"name":42,"nodes":[{}],"tags":"x"}`: {"", 1, []string{}},
		`{"nodes":"not a list","name":"n"}`:   {"n", 0, []string{}},
		`not json`:                            {"", 0, []string{}},
	} {
		got := Describe([]byte(doc))
		if got.Name != want.Name || got.NodeCount != want.NodeCount || !slices.Equal(got.Tags, want.Tags) || got.Tags == nil {
			t.Errorf("Describe(%s) = %+v, want %+v", doc, got, want)
		}
	}
	// A workflow recorded from a real n8n.
	paths, _ := filepath.Glob("../agent/n8n/testdata/real/workflow-*.create-body.json")
	if len(paths) == 0 {
		t.Fatal("the recorded n8n workflows are missing from agent/n8n/testdata/real")
	}
	data, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Name  string            `json:"name"`
		Nodes []json.RawMessage `json:"nodes"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if got := Describe(data); got.Name != doc.Name || got.NodeCount != len(doc.Nodes) || got.NodeCount == 0 {
		t.Errorf("Describe(%s) = %+v, want %q with %d nodes", paths[0], got, doc.Name, len(doc.Nodes))
	}
}

func TestSizeMB(t *testing.T) {
	for size, want := range map[int64]float64{0: 0, 2048: 0.002, 1 << 20: 1, 1536 << 10: 1.5, 400: 0} {
		if got := SizeMB(size); got != want {
			t.Errorf("SizeMB(%d) = %v, want %v", size, got, want)
		}
	}
}

func TestComputeStats(t *testing.T) {
	at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	ps := []Project{
		{Name: "data-processing", WorkflowCount: 5, LastModified: at.Add(time.Hour)},
		{Name: "crm-automation", WorkflowCount: 5, LastModified: at.Add(time.Hour)},
		{Name: "ecommerce-workflows", WorkflowCount: 6, LastModified: at},
	}
	got := ComputeStats(ps)
	if got.TotalProjects != 3 || got.TotalWorkflows != 16 || got.AverageWorkflowsPerProject != 5.33 ||
		!slices.Equal(got.ProjectNames, []string{"crm-automation", "data-processing", "ecommerce-workflows"}) ||
		got.LargestProject != "ecommerce-workflows" || got.MostRecentProject != "crm-automation" {
		t.Errorf("ComputeStats = %+v", got)
	}
	if ps[0].Name != "data-processing" {
		t.Error("ComputeStats reordered its argument")
	}
	empty := ComputeStats(nil)
	if enc, _ := json.Marshal(empty); string(enc) != `{"total_projects":0,"total_workflows":0,"average_workflows_per_project":0,"project_names":[],"largest_project":"","most_recent_project":""}` {
		t.Errorf("ComputeStats(nil) = %s", enc)
	}
}

func TestHash(t *testing.T) {
	// FNV-1a 64's published values (the offset basis for no bytes), cut
	// to 53 bits: a JSON number JavaScript reads exactly.
	const low53 = 1<<53 - 1
	if Hash(nil) != 0xcbf29ce484222325&low53 || Hash([]byte("a")) != 0xaf63dc4c8601ec8c&low53 {
		t.Errorf("Hash is not FNV-1a 64 cut to 53 bits: %x %x", Hash(nil), Hash([]byte("a")))
	}
	for _, doc := range []string{"", "a", `{"name":"x"}`, strings.Repeat("n8n", 1000)} {
		if h := Hash([]byte(doc)); h > 1<<53 || float64(h) != float64(int64(h)) || uint64(float64(h)) != h {
			t.Errorf("Hash(%.10q) = %d is not exact as a double", doc, h)
		}
	}
	it := NewIteration("wf", "d", []byte(`{"a":1}`), []byte(`{"a":2}`), nil)
	if it.OriginalHash == it.ModifiedHash || it.OriginalSize != 7 || it.ModifiedSize != 7 {
		t.Errorf("NewIteration = %+v", it)
	}
	checked, err := CheckIteration(it)
	if err != nil || string(checked.ChangesSummary) != `{}` {
		t.Errorf("CheckIteration = %+v, %v; want an empty summary as {}", checked, err)
	}
}

func TestCheckWorkflowData(t *testing.T) {
	for doc, ok := range map[string]bool{`{}`: true, ` {"a":1}`: true, `[]`: false, `null`: false, `{`: false, ``: false} {
		if err := CheckWorkflowData(json.RawMessage(doc)); (err == nil) != ok {
			t.Errorf("CheckWorkflowData(%q) = %v", doc, err)
		}
	}
}

// A NUL in a workflow's name or tags never reaches a store's text columns.
func TestDescribeDropsNUL(t *testing.T) {
	d := Describe([]byte(`{"name":"a\u0000b","nodes":[],"tags":["x\u0000",{"name":"\u0000"}]}`))
	if d.Name != "ab" || len(d.Tags) != 1 || d.Tags[0] != "x" {
		t.Fatalf("Describe = %+v", d)
	}
}
