package builderapi_test

import (
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/servertest"
)

// projFixture makes alice's project "p" with the file w.json, one version
// of it (returned) and auto_backup on.
func projFixture(t *testing.T, s *servertest.Server) (version string) {
	t.Helper()
	projWant(t, s, http.MethodPost, "/projects/p", `{"description":"mine"}`, http.StatusCreated, nil)
	projWant(t, s, http.MethodPut, "/projects/p/workflows/w.json", projSaveBody(projRecorded(t), false), http.StatusCreated, nil)
	var sv projSaved
	projWant(t, s, http.MethodPut, "/projects/p/workflows/w.json", projSaveBody(projChanged(t), false), http.StatusOK, &sv)
	if sv.BackupFilename == nil {
		t.Fatalf("no backup: %+v", sv)
	}
	return *sv.BackupFilename
}

// projSnapshot is everything alice can read of "p".
func projSnapshot(t *testing.T, s *servertest.Server) (p projResp, files []projFile, data projFile, versions []projVersion) {
	t.Helper()
	projWant(t, s, http.MethodGet, "/projects/p", "", http.StatusOK, &p)
	projWant(t, s, http.MethodGet, "/projects/p/workflows", "", http.StatusOK, &files)
	projWant(t, s, http.MethodGet, "/projects/p/workflows/w.json", "", http.StatusOK, &data)
	projWant(t, s, http.MethodGet, "/projects/p/workflows/w.json/versions", "", http.StatusOK, &versions)
	return
}

// TestProjectsAreOwned checks on every store that another user's token
// finds none of alice's project, through any endpoint, and changes
// nothing of it; the same name is free for bob.
func TestProjectsAreOwned(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		alice, bob := projUsers(t, store)
		v := projFixture(t, alice)
		p0, files0, data0, versions0 := projSnapshot(t, alice)

		const file = "/projects/p/workflows/w.json"
		for _, c := range []struct{ method, path, body string }{
			{http.MethodGet, "/projects/p", ""},
			{http.MethodDelete, "/projects/p?confirm=true", ""},
			{http.MethodDelete, "/projects/p", ""},
			{http.MethodPut, "/projects/p/settings", `{"version_limit":1}`},
			{http.MethodGet, "/projects/p/workflows", ""},
			{http.MethodGet, file, ""},
			{http.MethodPut, file, projSaveBody([]byte(`{"name":"bob's"}`), true)},
			{http.MethodPut, "/projects/p/workflows/new.json", `{"workflow_data":{}}`},
			{http.MethodDelete, file + "?confirm=true", ""},
			{http.MethodGet, file + "/versions", ""},
			{http.MethodGet, file + "/versions/" + v, ""},
			{http.MethodGet, file + "/versions/" + v + "/content", ""},
			{http.MethodPost, file + "/versions/" + v + "/restore", `{"create_backup":true}`},
			{http.MethodDelete, file + "/versions/" + v + "?confirm=true", ""},
			{http.MethodPost, file + "/cleanup-versions", `{"keep_versions":0}`},
			{http.MethodPost, file + "/cleanup-versions", ""},
			{http.MethodGet, file + "/compare/" + v + "/current", ""},
		} {
			projWantError(t, bob, c.method, c.path, c.body, http.StatusNotFound, "project_not_found", "name")
		}
		if got := projNames(t, bob); len(got) != 0 {
			t.Fatalf("bob lists %v", got)
		}
		var stats map[string]any
		projWant(t, bob, http.MethodGet, "/projects/stats", "", http.StatusOK, &stats)
		if stats["total_projects"] != 0.0 || stats["total_workflows"] != 0.0 {
			t.Fatalf("bob's stats count alice's projects: %v", stats)
		}

		// Bob's own "p" is another project.
		var mine projResp
		projWant(t, bob, http.MethodPost, "/projects/p", `{"initial_workflows":["b.json"]}`, http.StatusCreated, &mine)
		projWantError(t, bob, http.MethodGet, file, "", http.StatusNotFound, "workflow_not_found", "filename")
		projWant(t, bob, http.MethodDelete, "/projects/p?confirm=true", "", http.StatusOK, nil)

		p1, files1, data1, versions1 := projSnapshot(t, alice)
		if !reflect.DeepEqual(p0, p1) || !reflect.DeepEqual(files0, files1) || !reflect.DeepEqual(data0, data1) || !reflect.DeepEqual(versions0, versions1) {
			t.Fatalf("bob's requests changed alice's project:\n%+v %+v %+v\n%+v %+v %+v", p0, files0, versions0, p1, files1, versions1)
		}
	})
}

// TestPathTricks sends names that try to leave their place on every
// store: each is refused and nothing is created or changed. A bad name is
// a 400 naming its path variable; a name with an encoded slash no longer
// matches a route (404). A dot segment, literal or encoded (%2e%2e,
// ..%2F), is not cleaned into another resource's path: it is refused as a
// name (400) or matches no route (404), and never redirects (a client that
// follows a 301 with its DELETE would act on the cleaned path).
func TestPathTricks(t *testing.T) {
	long := strings.Repeat("a", 101)
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		s, _ := projUsers(t, store)
		v := projFixture(t, s)
		p0, files0, data0, versions0 := projSnapshot(t, s)
		noFollow := *s.Client
		noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		save := `{"workflow_data":{"name":"evil"},"create_backup":true}`
		const file = "/projects/p/workflows/w.json"
		const cleaned = "cleaned"
		for _, c := range []struct {
			method, path, body string
			// field is the path variable a 400 names, cleaned a 400 or
			// a 404 for a path with dot segments, "" a 404.
			field string
		}{
			{http.MethodPost, "/projects/..", `{}`, cleaned},
			{http.MethodPost, "/projects/%2e%2e", `{}`, cleaned},
			{http.MethodPost, "/projects/p/..%2Fq", `{}`, cleaned},
			{http.MethodPost, "/projects/a%2Fb", `{}`, ""},
			{http.MethodPost, "/projects/a..b", `{}`, "name"},
			{http.MethodPost, "/projects/.hidden", `{}`, "name"},
			{http.MethodPost, "/projects/-rf", `{}`, "name"},
			{http.MethodPost, "/projects/a%20b", `{}`, "name"},
			{http.MethodPost, "/projects/a%5Cb", `{}`, "name"},
			{http.MethodPost, "/projects/a%00b", `{}`, "name"},
			{http.MethodPost, "/projects/" + long, `{}`, "name"},
			{http.MethodPost, "/projects/%C3%A9t%C3%A9", `{}`, "name"},
			{http.MethodPut, "/projects/p/workflows/..", save, cleaned},
			{http.MethodPut, "/projects/p/workflows/%2e%2e%2fetc.json", save, cleaned},
			{http.MethodPut, "/projects/p/workflows/..%2F..%2Fq.json", save, cleaned},
			{http.MethodPut, "/projects/p/workflows/sub%2Fx.json", save, ""},
			{http.MethodPut, "/projects/p/workflows/x.txt", save, "filename"},
			{http.MethodPut, "/projects/p/workflows/x", save, "filename"},
			{http.MethodPut, "/projects/p/workflows/x.json.bak", save, "filename"},
			{http.MethodPut, "/projects/p/workflows/.json", save, "filename"},
			{http.MethodPut, "/projects/p/workflows/a..json", save, "filename"},
			{http.MethodPut, "/projects/p/workflows/a%5Cb.json", save, "filename"},
			{http.MethodPut, "/projects/p/workflows/" + long[:96] + ".json", save, "filename"},
			{http.MethodPut, "/projects/..p/workflows/w.json", save, "name"},
			{http.MethodPost, file + "/versions/..%2Fw.json/restore", `{}`, cleaned},
			{http.MethodPost, file + "/versions/" + v + ".bak/restore", `{}`, "version_filename"},
			{http.MethodPost, file + "/versions/.." + v + "/restore", `{}`, "version_filename"},
			{http.MethodPost, "/projects/p/workflows/w.txt/versions/" + v + "/restore", `{}`, "filename"},
			{http.MethodDelete, file + "/versions/..%2F..%2Fw.json?confirm=true", "", cleaned},
			{http.MethodDelete, file + "/versions/a%2Fw.json?confirm=true", "", ""},
			{http.MethodDelete, file + "/versions/w?confirm=true", "", "version_filename"},
			{http.MethodDelete, "/projects/p/workflows/w?confirm=true", "", "filename"},
			{http.MethodDelete, "/projects/p/..?confirm=true", "", cleaned},
			{http.MethodPost, "/projects/p/workflows/w.json/../../../q", `{}`, cleaned},
			{http.MethodPost, "/projects/p/workflows/" + long + "/cleanup-versions", `{"keep_versions":0}`, "filename"},
			{http.MethodGet, file + "/compare/..%2Fx.json/current", "", cleaned},
			{http.MethodGet, file + "/compare/" + long + ".json/current", "", "version1"},
		} {
			switch c.field {
			case cleaned:
				req, err := http.NewRequest(c.method, s.URL+c.path, strings.NewReader(c.body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				res, err := noFollow.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				if res.StatusCode != http.StatusBadRequest && res.StatusCode != http.StatusNotFound {
					t.Errorf("%s %s: %d (Location %q), want 400 or 404 and no redirect", c.method, c.path, res.StatusCode, res.Header.Get("Location"))
				}
			case "":
				projWantError(t, s, c.method, c.path, c.body, http.StatusNotFound, "not_found", "")
			default:
				projWantError(t, s, c.method, c.path, c.body, http.StatusBadRequest, "invalid_field", c.field)
			}
		}
		if got := projNames(t, s); !slices.Equal(got, []string{"p"}) {
			t.Fatalf("projects after the tricks: %v", got)
		}
		p1, files1, data1, versions1 := projSnapshot(t, s)
		if !reflect.DeepEqual(p0, p1) || !reflect.DeepEqual(files0, files1) || !reflect.DeepEqual(data0, data1) || !reflect.DeepEqual(versions0, versions1) {
			t.Fatalf("the tricks changed the project:\n%+v %+v %+v\n%+v %+v %+v", p0, files0, versions0, p1, files1, versions1)
		}
	})
}

// TestBackupsAndVersionLimit checks through HTTP, on every store, that
// replacing saves keep the replaced content when asked or when
// auto_backup is on, that version_limit prunes the oldest at each save
// (and a lower limit at the next one), and that backups made within one
// second get names of their own.
func TestBackupsAndVersionLimit(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		s, _ := projUsers(t, store)
		projWant(t, s, http.MethodPost, "/projects/p", `{"settings":{"version_limit":3}}`, http.StatusCreated, nil)
		const file = "/projects/p/workflows/flow.json"
		doc := func(i int) []byte {
			return []byte(`{"name":"v` + string(rune('0'+i)) + `","nodes":[],"connections":{}}`)
		}
		var sv projSaved
		projWant(t, s, http.MethodPut, file, projSaveBody(doc(0), true), http.StatusCreated, &sv)
		if sv.BackupFilename != nil {
			t.Fatalf("a new file has no backup: %+v", sv)
		}
		for i := 1; i <= 5; i++ {
			projWant(t, s, http.MethodPut, file, projSaveBody(doc(i), false), http.StatusOK, &sv)
			wantPruned := 0
			if i > 3 {
				wantPruned = 1
			}
			if sv.BackupFilename == nil || !projBackupName.MatchString(*sv.BackupFilename) || sv.VersionsPruned != wantPruned {
				t.Fatalf("save %d: %+v, want a backup and %d pruned", i, sv, wantPruned)
			}
		}
		var vs []projVersion
		projWant(t, s, http.MethodGet, file+"/versions", "", http.StatusOK, &vs)
		var names []string
		files := map[string]bool{}
		for _, v := range vs {
			names = append(names, v.WorkflowName)
			files[v.Filename] = true
		}
		if !slices.Equal(names, []string{"v4", "v3", "v2"}) || len(files) != 3 {
			t.Fatalf("kept versions %+v, want the three newest, newest first, each named apart", vs)
		}

		// auto_backup off: only create_backup makes one.
		projWant(t, s, http.MethodPut, "/projects/p/settings", `{"auto_backup":false,"version_limit":3}`, http.StatusOK, nil)
		projWant(t, s, http.MethodPut, file, projSaveBody(doc(6), false), http.StatusOK, &sv)
		if sv.BackupFilename != nil || sv.VersionsPruned != 0 {
			t.Fatalf("a save without backup: %+v", sv)
		}
		projWant(t, s, http.MethodPut, file, projSaveBody(doc(7), true), http.StatusOK, &sv)
		if sv.BackupFilename == nil || sv.VersionsPruned != 1 {
			t.Fatalf("a save asking for a backup: %+v", sv)
		}
		// A lower limit takes effect at the next save.
		projWant(t, s, http.MethodPut, "/projects/p/settings", `{"auto_backup":false,"version_limit":1}`, http.StatusOK, nil)
		projWant(t, s, http.MethodGet, file+"/versions", "", http.StatusOK, &vs)
		if len(vs) != 3 {
			t.Fatalf("lowering the limit removed versions at once: %d left", len(vs))
		}
		projWant(t, s, http.MethodPut, file, projSaveBody(doc(8), true), http.StatusOK, &sv)
		if sv.VersionsPruned != 3 {
			t.Fatalf("save under the lower limit: %+v, want 3 pruned", sv)
		}
		projWant(t, s, http.MethodGet, file+"/versions", "", http.StatusOK, &vs)
		if len(vs) != 1 || vs[0].WorkflowName != "v7" || vs[0].Filename != *sv.BackupFilename {
			t.Fatalf("versions under the lower limit %+v", vs)
		}
	})
}
