package storagetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/threadline/threadline/builder"
)

// BuilderStore is a backend's store as the builder suite uses it.
type BuilderStore interface {
	builder.Store
	Migrate(ctx context.Context) error
	Close() error
}

// BuilderOpener returns a fresh, empty store; the suite migrates and
// closes it.
type BuilderOpener func(t *testing.T) BuilderStore

// RunBuilder runs the contract of builder.Store. Subtests run in parallel,
// each on its own store.
func RunBuilder(t *testing.T, open BuilderOpener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s BuilderStore)
	}{
		{"Projects", testProjects},
		{"ProjectNamesAreChecked", testProjectNames},
		{"ProjectsBelongToTheirOwner", testProjectOwners},
		{"ProjectSettings", testProjectSettings},
		{"ProjectStats", testProjectStats},
		{"Workflows", testWorkflows},
		{"BackupsAndVersions", testVersions},
		{"VersionLimit", testVersionLimit},
		{"CleanupVersions", testCleanupVersions},
		{"RestoreVersion", testRestoreVersion},
		{"ConcurrentSavesOfOneFile", testConcurrentSaves},
		{"DeletesCascade", testBuilderDeletesCascade},
		{"IterationsAndFeedback", testIterationsAndFeedback},
		{"CallsAfterCloseFail", testBuilderCallsAfterClose},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, openMigrated(t, open))
		})
	}
}

// flowDoc is a workflow document with the spacing, key order and escapes a
// store must keep byte for byte, n8n's object tags and i as its version.
func flowDoc(name string, i int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{ "name": %q, "nodes": [{"name":"Trigger","type":"n8n-nodes-base.manualTrigger","typeVersion":1,"position":[0,0],"parameters":{}},
 {"name":"Set ☃","type":"n8n-nodes-base.set","typeVersion":3.4,"position":[220,0],"parameters":{"v":%d}}],
	"connections": {"Trigger":{"main":[[{"node":"Set ☃","type":"main","index":0}]]}},
	"tags": [{"id":"1","name":"email"}, "automation"], "z": "\u00e9" }`, name, i))
}

func mustCreate(t *testing.T, s builder.Store, owner string, p builder.NewProject) builder.Project {
	t.Helper()
	got, err := s.CreateProject(context.Background(), owner, p)
	if err != nil {
		t.Fatalf("CreateProject(%s, %s): %v", owner, p.Name, err)
	}
	return got
}

func mustSave(t *testing.T, s builder.Store, owner, project, file string, data json.RawMessage, backup bool) builder.SaveResult {
	t.Helper()
	res, err := s.SaveWorkflow(context.Background(), owner, project, file, data, backup)
	if err != nil {
		t.Fatalf("SaveWorkflow(%s/%s): %v", project, file, err)
	}
	return res
}

// noBackups are settings under which only create_backup makes a version.
func noBackups(limit int) *builder.Settings {
	return &builder.Settings{AutoBackup: false, VersionLimit: limit}
}

func checkRecent(t *testing.T, what string, at, before time.Time) {
	t.Helper()
	if at.Location() != time.UTC || at.Before(before.Add(-timeWindow)) || at.After(time.Now().Add(timeWindow)) {
		t.Errorf("%s = %v, want about now in UTC", what, at)
	}
}

func wantNotFound(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, builder.ErrNotFound) {
		t.Errorf("%s: err = %v, want builder.ErrNotFound", what, err)
	}
}

func testProjects(t *testing.T, s BuilderStore) {
	ctx := context.Background()
	before := time.Now()
	p := mustCreate(t, s, "u", builder.NewProject{Name: "ecommerce-workflows", Description: "E-commerce ☃",
		InitialWorkflows: []string{"order-processing.json", "inventory-sync.json"}})
	if p.Name != "ecommerce-workflows" || p.OwnerID != "u" || p.Description != "E-commerce ☃" ||
		p.WorkflowCount != 2 || !slices.Equal(p.Workflows, []string{"inventory-sync.json", "order-processing.json"}) {
		t.Errorf("CreateProject = %+v", p)
	}
	if !p.Settings.AutoBackup || p.Settings.VersionLimit != 10 || len(p.Settings.Extra) != 0 {
		t.Errorf("default settings = %+v, want auto_backup true and version_limit 10", p.Settings)
	}
	checkRecent(t, "created_date", p.CreatedDate, before)
	if !p.LastModified.Equal(p.CreatedDate) {
		t.Errorf("last_modified %v of a new project, want its created_date %v", p.LastModified, p.CreatedDate)
	}
	got, err := s.GetProject(ctx, "u", "ecommerce-workflows")
	if err != nil || got.Name != p.Name || !got.CreatedDate.Equal(p.CreatedDate) || !slices.Equal(got.Workflows, p.Workflows) {
		t.Errorf("GetProject = %+v, %v; want %+v", got, err, p)
	}
	// The initial workflows are empty workflows named after their files.
	wf, err := s.GetWorkflow(ctx, "u", "ecommerce-workflows", "order-processing.json")
	if err != nil || string(wf.WorkflowData) != `{"name":"order-processing","nodes":[],"connections":{}}` {
		t.Errorf("initial workflow = %s, %v", wf.WorkflowData, err)
	}

	if _, err := s.CreateProject(ctx, "u", builder.NewProject{Name: "ecommerce-workflows"}); !errors.Is(err, builder.ErrExists) {
		t.Errorf("CreateProject with a used name: err = %v, want builder.ErrExists", err)
	}
	// Refused initial workflows make nothing.
	for _, files := range [][]string{{"a.json", "a.json"}, {"ok.json", "no-suffix"}} {
		if _, err := s.CreateProject(ctx, "u", builder.NewProject{Name: "bad-initial", InitialWorkflows: files}); err == nil {
			t.Errorf("CreateProject with initial workflows %q succeeded", files)
		}
	}
	wantNotFound(t, "GetProject of a refused project", func() error { _, err := s.GetProject(ctx, "u", "bad-initial"); return err }())

	mustCreate(t, s, "u", builder.NewProject{Name: "a.first"})
	list, err := s.ListProjects(ctx, "u")
	if err != nil || len(list) != 2 || list[0].Name != "a.first" || list[1].Name != "ecommerce-workflows" {
		t.Fatalf("ListProjects = %+v, %v; want a.first, ecommerce-workflows", list, err)
	}
	if list[0].WorkflowCount != 0 || len(list[0].Workflows) != 0 || list[1].WorkflowCount != 2 {
		t.Errorf("ListProjects counts = %d %v, %d", list[0].WorkflowCount, list[0].Workflows, list[1].WorkflowCount)
	}
	wantNotFound(t, "GetProject of a missing project", func() error { _, err := s.GetProject(ctx, "u", "missing"); return err }())
	wantNotFound(t, "DeleteProject of a missing project", s.DeleteProject(ctx, "u", "missing"))
}

func testProjectNames(t *testing.T, s BuilderStore) {
	ctx := context.Background()
	long := ""
	for range 101 {
		long += "x"
	}
	bad := map[string]builder.Rule{
		"":                builder.RuleLength,
		long:              builder.RuleLength,
		"has space":       builder.RuleCharset,
		"a/b":             builder.RuleCharset,
		`a\b`:             builder.RuleCharset,
		"ünï":             builder.RuleCharset,
		".hidden":         builder.RuleLeading,
		"-flag":           builder.RuleLeading,
		"a..b":            builder.RuleDotDot,
		"p%2e%2e":         builder.RuleCharset,
		"name\x00.json":   builder.RuleCharset,
		"semi;colon":      builder.RuleCharset,
		"tab\tname":       builder.RuleCharset,
		"trailing.dots..": builder.RuleDotDot,
	}
	for name, rule := range bad {
		_, err := s.CreateProject(ctx, "u", builder.NewProject{Name: name})
		var ne *builder.NameError
		if !errors.As(err, &ne) || ne.Rule != rule || ne.Field != builder.FieldProject || ne.Value != name {
			t.Errorf("CreateProject(%q): err = %v, want a NameError for %q", name, err, rule)
		}
		// Every call checks the name first.
		if _, err := s.GetProject(ctx, "u", name); !errors.As(err, &ne) {
			t.Errorf("GetProject(%q): err = %v, want a NameError", name, err)
		}
	}
	for _, name := range []string{"a", long[:100], "My_Project-2.0", "x.json"} {
		mustCreate(t, s, "u", builder.NewProject{Name: name})
	}
	mustCreate(t, s, "u", builder.NewProject{Name: "p"})
	for name, rule := range map[string]builder.Rule{"flow": builder.RuleJSON, "flow.JSON": builder.RuleJSON,
		".json": builder.RuleLeading, "../x.json": builder.RuleCharset, "..x.json": builder.RuleLeading, "a..json": builder.RuleDotDot, "a/b.json": builder.RuleCharset} {
		_, err := s.SaveWorkflow(ctx, "u", "p", name, flowDoc("f", 0), false)
		var ne *builder.NameError
		if !errors.As(err, &ne) || ne.Rule != rule || ne.Field != builder.FieldFilename {
			t.Errorf("SaveWorkflow(%q): err = %v, want a filename NameError for %q", name, err, rule)
		}
	}
	mustSave(t, s, "u", "p", "f.json", flowDoc("f", 0), false)
	var ne *builder.NameError
	if _, err := s.GetVersion(ctx, "u", "p", "f.json", "../f.json"); !errors.As(err, &ne) || ne.Field != builder.FieldVersion {
		t.Errorf("GetVersion(../f.json): err = %v, want a version NameError", err)
	}
}

func testProjectOwners(t *testing.T, s BuilderStore) {
	ctx := context.Background()
	mustCreate(t, s, "alice", builder.NewProject{Name: "shared-name", Description: "alice's"})
	mustSave(t, s, "alice", "shared-name", "f.json", flowDoc("a", 1), false)
	mustSave(t, s, "alice", "shared-name", "f.json", flowDoc("a", 2), true)
	versions, err := s.ListVersions(ctx, "alice", "shared-name", "f.json")
	if err != nil || len(versions) != 1 {
		t.Fatalf("ListVersions = %+v, %v", versions, err)
	}
	v := versions[0].Filename

	// Bob sees none of it: every call on alice's project is not found.
	calls := map[string]func() error{
		"GetProject": func() error { _, err := s.GetProject(ctx, "bob", "shared-name"); return err },
		"UpdateProjectSettings": func() error {
			_, err := s.UpdateProjectSettings(ctx, "bob", "shared-name", builder.DefaultSettings())
			return err
		},
		"SaveWorkflow": func() error {
			_, err := s.SaveWorkflow(ctx, "bob", "shared-name", "f.json", flowDoc("b", 0), true)
			return err
		},
		"GetWorkflow":       func() error { _, err := s.GetWorkflow(ctx, "bob", "shared-name", "f.json"); return err },
		"ListWorkflows":     func() error { _, err := s.ListWorkflows(ctx, "bob", "shared-name"); return err },
		"DeleteWorkflow":    func() error { return s.DeleteWorkflow(ctx, "bob", "shared-name", "f.json") },
		"ListVersions":      func() error { _, err := s.ListVersions(ctx, "bob", "shared-name", "f.json"); return err },
		"GetVersion":        func() error { _, err := s.GetVersion(ctx, "bob", "shared-name", "f.json", v); return err },
		"GetVersionContent": func() error { _, err := s.GetVersionContent(ctx, "bob", "shared-name", "f.json", v); return err },
		"RestoreVersion":    func() error { _, err := s.RestoreVersion(ctx, "bob", "shared-name", "f.json", v, true); return err },
		"DeleteVersion":     func() error { return s.DeleteVersion(ctx, "bob", "shared-name", "f.json", v) },
		"CleanupVersions":   func() error { _, err := s.CleanupVersions(ctx, "bob", "shared-name", "f.json", 0); return err },
		"DeleteProject":     func() error { return s.DeleteProject(ctx, "bob", "shared-name") },
	}
	for name, call := range calls {
		wantNotFound(t, name+" of another owner's project", call())
	}
	if list, err := s.ListProjects(ctx, "bob"); err != nil || len(list) != 0 {
		t.Errorf("ListProjects(bob) = %+v, %v; want none", list, err)
	}
	if st, err := s.ProjectStats(ctx, "bob"); err != nil || st.TotalProjects != 0 || st.TotalWorkflows != 0 {
		t.Errorf("ProjectStats(bob) = %+v, %v; want zero", st, err)
	}
	// Bob may use the same name for a project of his own.
	bobs := mustCreate(t, s, "bob", builder.NewProject{Name: "shared-name", Description: "bob's"})
	if bobs.WorkflowCount != 0 || bobs.Description != "bob's" {
		t.Errorf("bob's project = %+v", bobs)
	}
	// Alice's is untouched.
	got, err := s.GetProject(ctx, "alice", "shared-name")
	if err != nil || got.Description != "alice's" || got.WorkflowCount != 1 {
		t.Errorf("alice's project after bob's calls = %+v, %v", got, err)
	}
	if vs, err := s.ListVersions(ctx, "alice", "shared-name", "f.json"); err != nil || len(vs) != 1 {
		t.Errorf("alice's versions after bob's calls = %+v, %v", vs, err)
	}
}

func testProjectSettings(t *testing.T, s BuilderStore) {
	ctx := context.Background()
	var custom builder.Settings
	if err := json.Unmarshal([]byte(`{"version_limit":3,"theme":{"dark":true},"owner_note":"☃"}`), &custom); err != nil {
		t.Fatal(err)
	}
	p := mustCreate(t, s, "u", builder.NewProject{Name: "p", Settings: &custom})
	enc, err := json.Marshal(p.Settings)
	if want := `{"auto_backup":true,"owner_note":"☃","theme":{"dark":true},"version_limit":3}`; err != nil || string(enc) != want {
		t.Errorf("settings = %s, %v; want %s", enc, err, want)
	}
	before := time.Now()
	next := builder.Settings{AutoBackup: false, VersionLimit: 1000, Extra: map[string]json.RawMessage{"k": json.RawMessage(`[1,2]`)}}
	up, err := s.UpdateProjectSettings(ctx, "u", "p", next)
	if err != nil {
		t.Fatalf("UpdateProjectSettings: %v", err)
	}
	got, err := s.GetProject(ctx, "u", "p")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []builder.Project{up, got} {
		enc, _ := json.Marshal(p.Settings)
		if string(enc) != `{"auto_backup":false,"k":[1,2],"version_limit":1000}` {
			t.Errorf("settings after update = %s", enc)
		}
		checkRecent(t, "last_modified after a settings update", p.LastModified, before)
	}
	for _, limit := range []int{0, -1, 1001} {
		var ve *builder.ValueError
		if _, err := s.UpdateProjectSettings(ctx, "u", "p", builder.Settings{AutoBackup: true, VersionLimit: limit}); !errors.As(err, &ve) {
			t.Errorf("UpdateProjectSettings(version_limit %d): err = %v, want a ValueError", limit, err)
		}
		if _, err := s.CreateProject(ctx, "u", builder.NewProject{Name: "q" + strconv.Itoa(limit+10), Settings: &builder.Settings{VersionLimit: limit}}); !errors.As(err, &ve) {
			t.Errorf("CreateProject(version_limit %d): err = %v, want a ValueError", limit, err)
		}
	}
	if got, _ := s.GetProject(ctx, "u", "p"); got.Settings.VersionLimit != 1000 {
		t.Errorf("a refused update changed the settings: %+v", got.Settings)
	}
	wantNotFound(t, "UpdateProjectSettings of a missing project",
		func() error { _, err := s.UpdateProjectSettings(ctx, "u", "missing", next); return err }())
}

func testProjectStats(t *testing.T, s BuilderStore) {
	ctx := context.Background()
	st, err := s.ProjectStats(ctx, "u")
	if err != nil || st.TotalProjects != 0 || len(st.ProjectNames) != 0 || st.LargestProject != "" || st.MostRecentProject != "" {
		t.Errorf("ProjectStats without projects = %+v, %v", st, err)
	}
	mustCreate(t, s, "u", builder.NewProject{Name: "crm", InitialWorkflows: []string{"a.json", "b.json", "c.json", "d.json"}})
	mustCreate(t, s, "u", builder.NewProject{Name: "big", InitialWorkflows: []string{"a.json", "b.json", "c.json", "d.json", "e.json"}})
	mustCreate(t, s, "u", builder.NewProject{Name: "data", InitialWorkflows: []string{"a.json"}})
	mustCreate(t, s, "other", builder.NewProject{Name: "huge", InitialWorkflows: []string{"a.json", "b.json", "c.json", "d.json", "e.json", "f.json"}})
	time.Sleep(2 * time.Millisecond)
	// Saving into crm makes it the most recently modified.
	mustSave(t, s, "u", "crm", "z.json", flowDoc("z", 0), false)
	st, err = s.ProjectStats(ctx, "u")
	want := builder.Stats{TotalProjects: 3, TotalWorkflows: 11, AverageWorkflowsPerProject: 3.67,
		ProjectNames: []string{"big", "crm", "data"}, LargestProject: "big", MostRecentProject: "crm"}
	if err != nil || st.TotalProjects != want.TotalProjects || st.TotalWorkflows != want.TotalWorkflows ||
		st.AverageWorkflowsPerProject != want.AverageWorkflowsPerProject || !slices.Equal(st.ProjectNames, want.ProjectNames) ||
		st.LargestProject != want.LargestProject || st.MostRecentProject != want.MostRecentProject {
		t.Errorf("ProjectStats = %+v, %v; want %+v", st, err, want)
	}
}

func testWorkflows(t *testing.T, s BuilderStore) {
	ctx := context.Background()
	p := mustCreate(t, s, "u", builder.NewProject{Name: "p", Settings: noBackups(10)})
	before := time.Now()
	doc := flowDoc("Welcome Email", 1)
	res := mustSave(t, s, "u", "p", "welcome-email.json", doc, true)
	if !res.Created || res.Backup != "" || res.Pruned != 0 || string(res.Workflow.WorkflowData) != string(doc) ||
		res.Workflow.Size != int64(len(doc)) || res.Workflow.Filename != "welcome-email.json" {
		t.Errorf("first SaveWorkflow = %+v", res)
	}
	checkRecent(t, "created_date", res.Workflow.CreatedDate, before)
	if !res.Workflow.ModifiedDate.Equal(res.Workflow.CreatedDate) {
		t.Errorf("a new file's modified_date %v differs from its created_date %v", res.Workflow.ModifiedDate, res.Workflow.CreatedDate)
	}
	got, err := s.GetWorkflow(ctx, "u", "p", "welcome-email.json")
	if err != nil || string(got.WorkflowData) != string(doc) || !got.CreatedDate.Equal(res.Workflow.CreatedDate) || got.Size != int64(len(doc)) {
		t.Errorf("GetWorkflow = %+v, %v; want the bytes saved", got, err)
	}
	// Caller's buffer changes do not reach the store.
	doc[3] = 'X'
	if got, _ := s.GetWorkflow(ctx, "u", "p", "welcome-email.json"); got.WorkflowData[3] == 'X' {
		t.Error("the store kept the caller's buffer")
	}

	time.Sleep(2 * time.Millisecond)
	// Neither create_backup nor auto_backup: replaced without a version.
	doc2 := flowDoc("Welcome Email", 2)
	res = mustSave(t, s, "u", "p", "welcome-email.json", doc2, false)
	if res.Created || res.Backup != "" || !res.Workflow.CreatedDate.Equal(got.CreatedDate) || !res.Workflow.ModifiedDate.After(got.ModifiedDate) {
		t.Errorf("replacing SaveWorkflow = %+v", res)
	}
	if vs, err := s.ListVersions(ctx, "u", "p", "welcome-email.json"); err != nil || len(vs) != 0 {
		t.Errorf("versions after a save without backup = %+v, %v", vs, err)
	}
	proj, err := s.GetProject(ctx, "u", "p")
	if err != nil || !proj.LastModified.After(p.LastModified) || proj.WorkflowCount != 1 {
		t.Errorf("project after saves = %+v, %v; want a later last_modified and 1 workflow", proj, err)
	}

	mustSave(t, s, "u", "p", "another.json", json.RawMessage(`{}`), false)
	list, err := s.ListWorkflows(ctx, "u", "p")
	if err != nil || len(list) != 2 || list[0].Filename != "another.json" || list[1].Filename != "welcome-email.json" ||
		list[1].Size != int64(len(doc2)) || list[0].WorkflowData != nil {
		t.Errorf("ListWorkflows = %+v, %v", list, err)
	}

	for _, bad := range []string{`[]`, `"x"`, `{"unclosed":`, ``, `null`} {
		var ve *builder.ValueError
		if _, err := s.SaveWorkflow(ctx, "u", "p", "bad.json", json.RawMessage(bad), false); !errors.As(err, &ve) {
			t.Errorf("SaveWorkflow(%q): err = %v, want a ValueError", bad, err)
		}
	}
	wantNotFound(t, "SaveWorkflow to a missing project",
		func() error { _, err := s.SaveWorkflow(ctx, "u", "missing", "f.json", doc2, false); return err }())
	wantNotFound(t, "GetWorkflow of a missing file",
		func() error { _, err := s.GetWorkflow(ctx, "u", "p", "missing.json"); return err }())
	wantNotFound(t, "ListWorkflows of a missing project",
		func() error { _, err := s.ListWorkflows(ctx, "u", "missing"); return err }())

	if err := s.DeleteWorkflow(ctx, "u", "p", "another.json"); err != nil {
		t.Fatalf("DeleteWorkflow: %v", err)
	}
	wantNotFound(t, "GetWorkflow after delete", func() error { _, err := s.GetWorkflow(ctx, "u", "p", "another.json"); return err }())
	wantNotFound(t, "DeleteWorkflow twice", s.DeleteWorkflow(ctx, "u", "p", "another.json"))
	if proj, _ := s.GetProject(ctx, "u", "p"); !slices.Equal(proj.Workflows, []string{"welcome-email.json"}) {
		t.Errorf("workflows after delete = %v", proj.Workflows)
	}
}

var backupName = regexp.MustCompile(`^welcome-email_backup_(\d{8}_\d{6})(_\d+)?\.json$`)

func testVersions(t *testing.T, s BuilderStore) {
	ctx := context.Background()
	mustCreate(t, s, "u", builder.NewProject{Name: "p"}) // auto_backup on
	docs := []json.RawMessage{flowDoc("Welcome Email Workflow", 0), flowDoc("Second", 1), flowDoc("Third", 2), flowDoc("Fourth", 3)}
	saved := []builder.SaveResult{mustSave(t, s, "u", "p", "welcome-email.json", docs[0], false)}
	before := time.Now()
	// Replacing saves in quick succession, so that several fall in one
	// second: every backup still gets a name of its own.
	for _, d := range docs[1:] {
		saved = append(saved, mustSave(t, s, "u", "p", "welcome-email.json", d, false))
	}
	seen := map[string]bool{}
	for i, res := range saved[1:] {
		m := backupName.FindStringSubmatch(res.Backup)
		if m == nil || seen[res.Backup] {
			t.Fatalf("save %d made backup %q, want a new welcome-email_backup_YYYYMMDD_HHMMSS[_n].json", i+1, res.Backup)
		}
		seen[res.Backup] = true
		stamp, err := time.Parse("20060102_150405", m[1])
		if err != nil || stamp.Before(before.Add(-timeWindow).Truncate(time.Second)) || stamp.After(time.Now().Add(timeWindow)) {
			t.Errorf("backup %q is stamped %v, want about now", res.Backup, stamp)
		}
	}

	versions, err := s.ListVersions(ctx, "u", "p", "welcome-email.json")
	if err != nil || len(versions) != 3 {
		t.Fatalf("ListVersions = %+v, %v; want 3", versions, err)
	}
	for i, v := range versions {
		// Newest first: the backup of save k holds docs[k-1].
		k := 3 - i
		if v.Filename != saved[k].Backup {
			t.Errorf("version %d is %s, want %s (newest first)", i, v.Filename, saved[k].Backup)
		}
		content, err := s.GetVersionContent(ctx, "u", "p", "welcome-email.json", v.Filename)
		if err != nil || string(content) != string(docs[k-1]) {
			t.Errorf("content of %s = %s, %v; want %s", v.Filename, content, err, docs[k-1])
		}
		if !v.ModifiedDate.Equal(saved[k-1].Workflow.ModifiedDate) {
			t.Errorf("%s modified_date = %v, want the backed-up content's %v", v.Filename, v.ModifiedDate, saved[k-1].Workflow.ModifiedDate)
		}
		if !v.CreatedDate.Equal(saved[k].Workflow.ModifiedDate) || !v.Timestamp.Equal(v.CreatedDate) {
			t.Errorf("%s created_date %v timestamp %v, want the time of save %d, %v", v.Filename, v.CreatedDate, v.Timestamp, k, saved[k].Workflow.ModifiedDate)
		}
	}
	oldest := versions[2]
	info, err := s.GetVersion(ctx, "u", "p", "welcome-email.json", oldest.Filename)
	size := int64(len(docs[0]))
	if err != nil || info.Filename != oldest.Filename || info.WorkflowName != "Welcome Email Workflow" || info.NodeCount != 2 ||
		!slices.Equal(info.Tags, []string{"email", "automation"}) || !info.IsBackup || info.FileSize != size ||
		info.FileSizeMB != math.Round(float64(size)/(1<<20)*1000)/1000 || info.Timestamp.Location() != time.UTC {
		t.Errorf("GetVersion = %+v, %v", info, err)
	}
	wantNotFound(t, "GetVersion of a missing version",
		func() error {
			_, err := s.GetVersion(ctx, "u", "p", "welcome-email.json", "welcome-email_backup_20000101_000000.json")
			return err
		}())
	wantNotFound(t, "GetVersionContent of a missing version",
		func() error {
			_, err := s.GetVersionContent(ctx, "u", "p", "welcome-email.json", "nope.json")
			return err
		}())
	wantNotFound(t, "ListVersions of a missing file",
		func() error { _, err := s.ListVersions(ctx, "u", "p", "missing.json"); return err }())

	// create_backup on a project without auto_backup makes a version too.
	mustCreate(t, s, "u", builder.NewProject{Name: "manual", Settings: noBackups(10)})
	mustSave(t, s, "u", "manual", "welcome-email.json", docs[0], false)
	if res := mustSave(t, s, "u", "manual", "welcome-email.json", docs[1], true); !backupName.MatchString(res.Backup) {
		t.Errorf("save with create_backup made backup %q", res.Backup)
	}

	if err := s.DeleteVersion(ctx, "u", "p", "welcome-email.json", versions[1].Filename); err != nil {
		t.Fatalf("DeleteVersion: %v", err)
	}
	wantNotFound(t, "DeleteVersion twice", s.DeleteVersion(ctx, "u", "p", "welcome-email.json", versions[1].Filename))
	left, err := s.ListVersions(ctx, "u", "p", "welcome-email.json")
	if err != nil || len(left) != 2 || left[0].Filename != versions[0].Filename || left[1].Filename != versions[2].Filename {
		t.Errorf("versions after a delete = %+v, %v", left, err)
	}
}

func versionNames(t *testing.T, s builder.Store, project, file string) []string {
	t.Helper()
	vs, err := s.ListVersions(context.Background(), "u", project, file)
	if err != nil {
		t.Fatalf("ListVersions: %v", err)
	}
	var out []string
	for _, v := range vs {
		out = append(out, v.Filename)
	}
	return out
}

func testVersionLimit(t *testing.T, s BuilderStore) {
	ctx := context.Background()
	mustCreate(t, s, "u", builder.NewProject{Name: "p", Settings: &builder.Settings{AutoBackup: true, VersionLimit: 3}})
	var backups []string
	mustSave(t, s, "u", "p", "f.json", flowDoc("f", 0), false)
	for i := 1; i <= 6; i++ {
		res := mustSave(t, s, "u", "p", "f.json", flowDoc("f", i), false)
		backups = append(backups, res.Backup)
		wantPruned := 0
		if i > 3 {
			wantPruned = 1
		}
		if res.Pruned != wantPruned {
			t.Errorf("save %d pruned %d versions, want %d", i, res.Pruned, wantPruned)
		}
	}
	// The three newest backups are left: those of saves 4..6, holding 3..5.
	got := versionNames(t, s, "p", "f.json")
	if want := []string{backups[5], backups[4], backups[3]}; !slices.Equal(got, want) {
		t.Fatalf("versions = %v, want %v", got, want)
	}
	for i, name := range got {
		content, err := s.GetVersionContent(ctx, "u", "p", "f.json", name)
		if err != nil || string(content) != string(flowDoc("f", 5-i)) {
			t.Errorf("version %s holds %s, %v; want content %d", name, content, err, 5-i)
		}
	}
	// Another file of the project has its own versions.
	mustSave(t, s, "u", "p", "g.json", flowDoc("g", 0), false)
	mustSave(t, s, "u", "p", "g.json", flowDoc("g", 1), false)
	if got := versionNames(t, s, "p", "f.json"); len(got) != 3 {
		t.Errorf("f.json has %d versions after saving g.json, want 3", len(got))
	}
	// A lower limit holds from the next save, backup or not.
	if _, err := s.UpdateProjectSettings(ctx, "u", "p", builder.Settings{AutoBackup: false, VersionLimit: 1}); err != nil {
		t.Fatal(err)
	}
	res := mustSave(t, s, "u", "p", "f.json", flowDoc("f", 7), false)
	if res.Backup != "" || res.Pruned != 2 {
		t.Errorf("save after lowering the limit = backup %q, pruned %d; want none and 2", res.Backup, res.Pruned)
	}
	if got := versionNames(t, s, "p", "f.json"); !slices.Equal(got, []string{backups[5]}) {
		t.Errorf("versions after lowering the limit = %v, want [%s]", got, backups[5])
	}
}

func testCleanupVersions(t *testing.T, s BuilderStore) {
	ctx := context.Background()
	mustCreate(t, s, "u", builder.NewProject{Name: "p"})
	var backups []string
	mustSave(t, s, "u", "p", "f.json", flowDoc("f", 0), false)
	for i := 1; i <= 5; i++ {
		backups = append(backups, mustSave(t, s, "u", "p", "f.json", flowDoc("f", i), false).Backup)
	}
	n, err := s.CleanupVersions(ctx, "u", "p", "f.json", 2)
	if err != nil || n != 3 {
		t.Fatalf("CleanupVersions(2) = %d, %v; want 3", n, err)
	}
	if got := versionNames(t, s, "p", "f.json"); !slices.Equal(got, []string{backups[4], backups[3]}) {
		t.Errorf("versions after cleanup = %v", got)
	}
	if n, err := s.CleanupVersions(ctx, "u", "p", "f.json", 10); err != nil || n != 0 {
		t.Errorf("CleanupVersions(10) = %d, %v; want 0", n, err)
	}
	var ve *builder.ValueError
	if _, err := s.CleanupVersions(ctx, "u", "p", "f.json", -1); !errors.As(err, &ve) {
		t.Errorf("CleanupVersions(-1): err = %v, want a ValueError", err)
	}
	if n, err := s.CleanupVersions(ctx, "u", "p", "f.json", 0); err != nil || n != 2 {
		t.Errorf("CleanupVersions(0) = %d, %v; want 2", n, err)
	}
	if got := versionNames(t, s, "p", "f.json"); len(got) != 0 {
		t.Errorf("versions after CleanupVersions(0) = %v", got)
	}
	if got, err := s.GetWorkflow(ctx, "u", "p", "f.json"); err != nil || string(got.WorkflowData) != string(flowDoc("f", 5)) {
		t.Errorf("the file after cleanup = %s, %v", got.WorkflowData, err)
	}
	wantNotFound(t, "CleanupVersions of a missing file",
		func() error { _, err := s.CleanupVersions(ctx, "u", "p", "missing.json", 1); return err }())
}

func testRestoreVersion(t *testing.T, s BuilderStore) {
	ctx := context.Background()
	mustCreate(t, s, "u", builder.NewProject{Name: "p", Settings: noBackups(10)})
	mustSave(t, s, "u", "p", "f.json", flowDoc("f", 0), false)
	first := mustSave(t, s, "u", "p", "f.json", flowDoc("f", 1), true).Backup

	// With a backup: the current content becomes a version, the old one the file.
	res, err := s.RestoreVersion(ctx, "u", "p", "f.json", first, true)
	if err != nil || res.Created || !regexp.MustCompile(`^f_backup_\d{8}_\d{6}(_\d+)?\.json$`).MatchString(res.Backup) ||
		string(res.Workflow.WorkflowData) != string(flowDoc("f", 0)) {
		t.Fatalf("RestoreVersion = %+v, %v", res, err)
	}
	if got, _ := s.GetWorkflow(ctx, "u", "p", "f.json"); string(got.WorkflowData) != string(flowDoc("f", 0)) {
		t.Errorf("file after restore = %s", got.WorkflowData)
	}
	if content, _ := s.GetVersionContent(ctx, "u", "p", "f.json", res.Backup); string(content) != string(flowDoc("f", 1)) {
		t.Errorf("backup made by restore holds %s, want the replaced content", content)
	}
	// The restored version stays.
	if got := versionNames(t, s, "p", "f.json"); !slices.Equal(got, []string{res.Backup, first}) {
		t.Errorf("versions after restore = %v", got)
	}
	// Without a backup (and no auto_backup) nothing is added.
	res, err = s.RestoreVersion(ctx, "u", "p", "f.json", versionNames(t, s, "p", "f.json")[0], false)
	if err != nil || res.Backup != "" || string(res.Workflow.WorkflowData) != string(flowDoc("f", 1)) {
		t.Errorf("RestoreVersion without backup = %+v, %v", res, err)
	}
	if got := versionNames(t, s, "p", "f.json"); len(got) != 2 {
		t.Errorf("versions after a restore without backup = %v", got)
	}
	wantNotFound(t, "RestoreVersion of a missing version",
		func() error { _, err := s.RestoreVersion(ctx, "u", "p", "f.json", "gone.json", true); return err }())
}

// testConcurrentSaves: saves racing on one file lose no version, and the
// limit still holds when they are done.
func testConcurrentSaves(t *testing.T, s BuilderStore) {
	ctx := context.Background()
	const workers, saves = 6, 5
	for _, limit := range []int{1000, 4} {
		project := "p" + strconv.Itoa(limit)
		mustCreate(t, s, "u", builder.NewProject{Name: project, Settings: &builder.Settings{AutoBackup: true, VersionLimit: limit}})
		mustSave(t, s, "u", project, "f.json", flowDoc("start", 0), false)
		var wg sync.WaitGroup
		errs := make([]error, workers)
		var mu sync.Mutex
		var backups []string
		for w := range workers {
			wg.Go(func() {
				for i := range saves {
					res, err := s.SaveWorkflow(ctx, "u", project, "f.json", flowDoc("w"+strconv.Itoa(w), i), w%2 == 0)
					if err != nil {
						errs[w] = err
						return
					}
					mu.Lock()
					backups = append(backups, res.Backup)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		got := versionNames(t, s, project, "f.json")
		if want := min(limit, workers*saves); len(got) != want {
			t.Fatalf("limit %d: %d versions after %d saves, want %d", limit, len(got), workers*saves, want)
		}
		if limit < workers*saves {
			continue
		}
		// Every replaced content is kept exactly once: the start and every
		// save but the last one.
		slices.Sort(backups)
		if distinct := slices.Compact(backups); len(distinct) != workers*saves {
			t.Errorf("concurrent saves reported %d distinct backups, want %d", len(distinct), workers*saves)
		}
		kept := map[string]bool{}
		for _, name := range got {
			content, err := s.GetVersionContent(ctx, "u", project, "f.json", name)
			if err != nil {
				t.Fatal(err)
			}
			kept[string(content)] = true
		}
		final, _ := s.GetWorkflow(ctx, "u", project, "f.json")
		kept[string(final.WorkflowData)] = true
		if !kept[string(flowDoc("start", 0))] || len(kept) != workers*saves+1 {
			t.Errorf("versions and file hold %d distinct contents, want all %d saved", len(kept), workers*saves+1)
		}
	}
}

func testBuilderDeletesCascade(t *testing.T, s BuilderStore) {
	ctx := context.Background()
	mustCreate(t, s, "u", builder.NewProject{Name: "p", InitialWorkflows: []string{"a.json"}})
	mustSave(t, s, "u", "p", "f.json", flowDoc("f", 0), false)
	v := mustSave(t, s, "u", "p", "f.json", flowDoc("f", 1), true).Backup
	mustSave(t, s, "u", "p", "g.json", flowDoc("g", 0), false)
	vg := mustSave(t, s, "u", "p", "g.json", flowDoc("g", 1), true).Backup

	// Deleting a file takes its versions; a new file of the name starts bare.
	if err := s.DeleteWorkflow(ctx, "u", "p", "g.json"); err != nil {
		t.Fatal(err)
	}
	wantNotFound(t, "ListVersions of a deleted file", func() error { _, err := s.ListVersions(ctx, "u", "p", "g.json"); return err }())
	mustSave(t, s, "u", "p", "g.json", flowDoc("g", 2), false)
	wantNotFound(t, "GetVersion of a deleted file's version",
		func() error { _, err := s.GetVersion(ctx, "u", "p", "g.json", vg); return err }())

	if err := s.DeleteProject(ctx, "u", "p"); err != nil {
		t.Fatalf("DeleteProject: %v", err)
	}
	wantNotFound(t, "GetProject after delete", func() error { _, err := s.GetProject(ctx, "u", "p"); return err }())
	wantNotFound(t, "GetWorkflow after delete", func() error { _, err := s.GetWorkflow(ctx, "u", "p", "f.json"); return err }())
	wantNotFound(t, "GetVersion after delete", func() error { _, err := s.GetVersion(ctx, "u", "p", "f.json", v); return err }())
	wantNotFound(t, "DeleteProject twice", s.DeleteProject(ctx, "u", "p"))
	// A project made again under the name holds nothing of the old one.
	again := mustCreate(t, s, "u", builder.NewProject{Name: "p"})
	if again.WorkflowCount != 0 {
		t.Errorf("recreated project = %+v", again)
	}
	mustSave(t, s, "u", "p", "f.json", flowDoc("new", 0), false)
	if got := versionNames(t, s, "p", "f.json"); len(got) != 0 {
		t.Errorf("recreated file has versions %v", got)
	}
}

func testIterationsAndFeedback(t *testing.T, s BuilderStore) {
	ctx := context.Background()
	if got, err := s.ListIterations(ctx, "u", "wf"); err != nil || len(got) != 0 {
		t.Errorf("ListIterations without history = %+v, %v", got, err)
	}
	if got, err := s.ListFeedback(ctx, "u", "wf"); err != nil || len(got) != 0 {
		t.Errorf("ListFeedback without history = %+v, %v", got, err)
	}
	base := time.Date(2025, 1, 11, 0, 58, 26, 0, time.UTC)
	changes := json.RawMessage(`{ "nodes_added": 1, "connections_changed": true,"parameters_modified":true }`)
	its := []builder.Iteration{
		builder.NewIteration("wf", "second", flowDoc("a", 1), flowDoc("a", 2), changes),
		builder.NewIteration("wf", "first ☃", flowDoc("a", 0), flowDoc("a", 1), nil),
		// A 64-bit hash (as an older version kept it) comes back as its
		// low 53 bits, the part JavaScript reads exactly.
		{WorkflowID: "wf", Description: "tie, added last", OriginalHash: math.MaxUint64, ModifiedHash: 1 << 63,
			ChangesSummary: json.RawMessage(`{}`), OriginalSize: 1024, ModifiedSize: 1280},
	}
	its[0].Timestamp = base.Add(time.Second)
	its[1].Timestamp = base.In(time.FixedZone("X", 3600))
	its[2].Timestamp = base.Add(time.Second)
	for _, it := range its {
		if _, err := s.AddIteration(ctx, "u", it); err != nil {
			t.Fatalf("AddIteration(%s): %v", it.Description, err)
		}
	}
	if _, err := s.AddIteration(ctx, "other", builder.NewIteration("wf", "another user's", nil, nil, nil)); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	now, err := s.AddIteration(ctx, "u", builder.NewIteration("wf", "now", nil, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	checkRecent(t, "timestamp of an iteration added now", now.Timestamp, before)
	got, err := s.ListIterations(ctx, "u", "wf")
	if err != nil || len(got) != 4 {
		t.Fatalf("ListIterations = %+v, %v; want 4", got, err)
	}
	want := []builder.Iteration{its[1], its[0], its[2], now}
	want[0].ChangesSummary = json.RawMessage(`{}`)
	want[2].OriginalHash, want[2].ModifiedHash = 1<<53-1, 0
	for i, w := range want {
		g := got[i]
		if g.Description != w.Description || !g.Timestamp.Equal(w.Timestamp) || g.Timestamp.Location() != time.UTC ||
			g.OriginalHash != w.OriginalHash || g.ModifiedHash != w.ModifiedHash || string(g.ChangesSummary) != string(w.ChangesSummary) ||
			g.OriginalSize != w.OriginalSize || g.ModifiedSize != w.ModifiedSize || g.WorkflowID != "wf" {
			t.Errorf("iteration %d = %+v, want %+v", i, g, w)
		}
	}
	if its[0].OriginalHash != builder.Hash(flowDoc("a", 1)) || its[0].OriginalSize != int64(len(flowDoc("a", 1))) {
		t.Errorf("NewIteration = %+v", its[0])
	}
	if other, err := s.ListIterations(ctx, "other", "wf"); err != nil || len(other) != 1 || other[0].Description != "another user's" {
		t.Errorf("ListIterations(other) = %+v, %v", other, err)
	}
	var ve *builder.ValueError
	for _, bad := range []builder.Iteration{{Description: "no id"}, {WorkflowID: "wf", ChangesSummary: json.RawMessage(`[1]`)}} {
		if _, err := s.AddIteration(ctx, "u", bad); !errors.As(err, &ve) {
			t.Errorf("AddIteration(%+v): err = %v, want a ValueError", bad, err)
		}
	}

	fbs := []builder.Feedback{
		{WorkflowID: "wf", Feedback: "later", Timestamp: base.Add(time.Minute), FeedbackType: "testing_results"},
		{WorkflowID: "wf", Feedback: "Email sending works but needs error handling", Timestamp: base, FeedbackType: "testing_results"},
		{WorkflowID: "wf2", Feedback: "elsewhere", Timestamp: base},
	}
	for _, f := range fbs {
		if _, err := s.AddFeedback(ctx, "u", f); err != nil {
			t.Fatalf("AddFeedback: %v", err)
		}
	}
	fb, err := s.ListFeedback(ctx, "u", "wf")
	if err != nil || len(fb) != 2 || fb[0].Feedback != fbs[1].Feedback || fb[1].Feedback != "later" ||
		!fb[0].Timestamp.Equal(base) || fb[0].FeedbackType != "testing_results" || fb[0].WorkflowID != "wf" {
		t.Errorf("ListFeedback = %+v, %v", fb, err)
	}
	if fb, err := s.ListFeedback(ctx, "other", "wf"); err != nil || len(fb) != 0 {
		t.Errorf("ListFeedback of another user = %+v, %v", fb, err)
	}
	if _, err := s.AddFeedback(ctx, "u", builder.Feedback{Feedback: "no id"}); !errors.As(err, &ve) {
		t.Errorf("AddFeedback without workflow id: err = %v, want a ValueError", err)
	}
}

func testBuilderCallsAfterClose(t *testing.T, s BuilderStore) {
	ctx := context.Background()
	mustCreate(t, s, "u", builder.NewProject{Name: "p"})
	mustSave(t, s, "u", "p", "f.json", flowDoc("f", 0), false)
	v := mustSave(t, s, "u", "p", "f.json", flowDoc("f", 1), false).Backup
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func() error{
		"CreateProject":         func() error { _, err := s.CreateProject(ctx, "u", builder.NewProject{Name: "q"}); return err },
		"GetProject":            func() error { _, err := s.GetProject(ctx, "u", "p"); return err },
		"ListProjects":          func() error { _, err := s.ListProjects(ctx, "u"); return err },
		"ProjectStats":          func() error { _, err := s.ProjectStats(ctx, "u"); return err },
		"UpdateProjectSettings": func() error { _, err := s.UpdateProjectSettings(ctx, "u", "p", builder.DefaultSettings()); return err },
		"DeleteProject":         func() error { return s.DeleteProject(ctx, "u", "p") },
		"SaveWorkflow":          func() error { _, err := s.SaveWorkflow(ctx, "u", "p", "f.json", flowDoc("f", 2), true); return err },
		"GetWorkflow":           func() error { _, err := s.GetWorkflow(ctx, "u", "p", "f.json"); return err },
		"ListWorkflows":         func() error { _, err := s.ListWorkflows(ctx, "u", "p"); return err },
		"DeleteWorkflow":        func() error { return s.DeleteWorkflow(ctx, "u", "p", "f.json") },
		"ListVersions":          func() error { _, err := s.ListVersions(ctx, "u", "p", "f.json"); return err },
		"GetVersion":            func() error { _, err := s.GetVersion(ctx, "u", "p", "f.json", v); return err },
		"GetVersionContent":     func() error { _, err := s.GetVersionContent(ctx, "u", "p", "f.json", v); return err },
		"RestoreVersion":        func() error { _, err := s.RestoreVersion(ctx, "u", "p", "f.json", v, true); return err },
		"DeleteVersion":         func() error { return s.DeleteVersion(ctx, "u", "p", "f.json", v) },
		"CleanupVersions":       func() error { _, err := s.CleanupVersions(ctx, "u", "p", "f.json", 1); return err },
		"AddIteration": func() error {
			_, err := s.AddIteration(ctx, "u", builder.NewIteration("wf", "x", nil, nil, nil))
			return err
		},
		"ListIterations": func() error { _, err := s.ListIterations(ctx, "u", "wf"); return err },
		"AddFeedback":    func() error { _, err := s.AddFeedback(ctx, "u", builder.Feedback{WorkflowID: "wf"}); return err },
		"ListFeedback":   func() error { _, err := s.ListFeedback(ctx, "u", "wf"); return err },
	}
	allFailAfterClose(t, calls)
}
