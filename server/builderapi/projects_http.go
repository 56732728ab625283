package builderapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/gorilla/mux"

	"github.com/threadline/threadline/builder"
	"github.com/threadline/threadline/server/auth"
	"github.com/threadline/threadline/server/httpjson"
)

// What the project routes share: reading the names in the path, turning
// the store's errors into answers that name the path segment or body
// field at fault, the confirm guard of the deletions and the body checks
// the store cannot make.

// projectHandler is a handler that returns its failure for projectRoute to answer.
type projectHandler func(w http.ResponseWriter, r *http.Request) error

func projectRoute(h projectHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			httpjson.WriteError(w, err)
		}
	}
}

// projectRead is the route of a GET that answers what get returns for the
// path's names.
func projectRead[T any](a *API, d pathDepth, get func(context.Context, pathNames) (T, error)) http.HandlerFunc {
	return projectRoute(func(w http.ResponseWriter, r *http.Request) error {
		loc, err := readPath(r, d)
		if err != nil {
			return err
		}
		v, err := get(r.Context(), loc)
		if err != nil {
			return a.projectStoreError(r.Context(), loc, err)
		}
		httpjson.Write(w, http.StatusOK, v)
		return nil
	})
}

// pathDepth is how far down a route's path goes.
type pathDepth int

const (
	atProject pathDepth = iota
	atFile
	atVersion
)

// pathNames is what a request is about: the caller, and the names its path
// gives.
type pathNames struct {
	owner    string
	project  string
	filename string // "" above atFile
	version  string // "" above atVersion
	// versionField is the path variable the version name came from.
	versionField string
}

// readPath reads and checks the path's names down to d, in path order, so that
// a bad name is reported as the path calls it before anything is looked
// up.
func readPath(r *http.Request, d pathDepth) (pathNames, error) {
	vars := mux.Vars(r)
	loc := pathNames{owner: auth.UserFrom(r.Context()), project: vars["name"], versionField: "version_filename"}
	if err := builder.CheckName(loc.project); err != nil {
		return loc, loc.nameError(err)
	}
	if d >= atFile {
		loc.filename = vars["filename"]
		if err := builder.CheckFilename(loc.filename); err != nil {
			return loc, loc.nameError(err)
		}
	}
	if d >= atVersion {
		loc.version = vars["version_filename"]
		if err := builder.CheckVersionName(loc.version); err != nil {
			return loc, loc.nameError(err)
		}
	}
	return loc, nil
}

// withVersion is loc about another version, named by the path variable
// field (a compare's version1 or version2).
func (loc pathNames) withVersion(field, name string) pathNames {
	loc.version, loc.versionField = name, field
	return loc
}

// nameError answers a *builder.NameError with the field named as the path
// calls it; any other error is returned as it is.
func (loc pathNames) nameError(err error) error {
	var ne *builder.NameError
	if !errors.As(err, &ne) {
		return err
	}
	field := map[string]string{builder.FieldProject: "name", builder.FieldFilename: "filename",
		builder.FieldVersion: loc.versionField}[ne.Field]
	return httpjson.NewError(http.StatusBadRequest, "invalid_field", field, "%s", ne.Error())
}

// projectStoreError answers an error of the store. Not found is told apart by
// looking the project and then the file up again, only on this path, so
// that the answer says which of them is missing: another user's project
// is missing like one that never was.
func (a *API) projectStoreError(ctx context.Context, loc pathNames, err error) error {
	var ve *builder.ValueError
	switch {
	case errors.As(err, new(*builder.NameError)):
		return loc.nameError(err)
	case errors.As(err, &ve):
		return httpjson.NewError(http.StatusBadRequest, "invalid_field", ve.Field, "%s", ve.Error())
	case errors.Is(err, builder.ErrExists):
		return httpjson.NewError(http.StatusConflict, "project_exists", "name", "project %q already exists", loc.project)
	case errors.Is(err, builder.ErrNotFound):
		return a.whichMissing(ctx, loc)
	}
	return err
}

func (a *API) whichMissing(ctx context.Context, loc pathNames) error {
	projectMissing := httpjson.NewError(http.StatusNotFound, "project_not_found", "name", "project %q not found", loc.project)
	if loc.filename == "" {
		return projectMissing
	}
	if _, err := a.store.GetProject(ctx, loc.owner, loc.project); errors.Is(err, builder.ErrNotFound) {
		return projectMissing
	}
	fileMissing := httpjson.NewError(http.StatusNotFound, "workflow_not_found", "filename",
		"workflow %q not found in project %q", loc.filename, loc.project)
	if loc.version == "" {
		return fileMissing
	}
	if _, err := a.store.GetWorkflow(ctx, loc.owner, loc.project, loc.filename); errors.Is(err, builder.ErrNotFound) {
		return fileMissing
	}
	return httpjson.NewError(http.StatusNotFound, "version_not_found", loc.versionField,
		"version %q of workflow %q not found", loc.version, loc.filename)
}

// deleteConfirmed guards a deletion: without ?confirm=true nothing is deleted
// and the answer says how to go ahead and what would go.
func deleteConfirmed(r *http.Request, what string, args ...any) error {
	if r.URL.Query().Get("confirm") == "true" {
		return nil
	}
	return httpjson.NewError(http.StatusBadRequest, "confirmation_required", "confirm",
		"add ?confirm=true to delete %s", fmt.Sprintf(what, args...))
}

// decodeOptionalBody is httpjson.Decode for a body whose fields all have
// defaults: a request without a body leaves v as it is.
func (a *API) decodeOptionalBody(w http.ResponseWriter, r *http.Request, v any) error {
	if r.ContentLength == 0 {
		return nil
	}
	return httpjson.Decode(w, r, a.cfg.MaxBody, v)
}

// checkUTF8Field refuses JSON text kept byte for byte that is not UTF-8: the
// decoder lets such bytes through inside strings, and PostgreSQL's TEXT
// refuses them.
func checkUTF8Field(field string, raw []byte) error {
	if !utf8.Valid(raw) {
		return httpjson.NewError(http.StatusBadRequest, "invalid_field", field, "%s must be UTF-8 text", field)
	}
	return nil
}

// checkStoredText refuses a decoded string PostgreSQL's TEXT cannot hold.
func checkStoredText(field, s string) error {
	if strings.ContainsRune(s, 0) {
		return httpjson.NewError(http.StatusBadRequest, "invalid_field", field, "%s must not contain NUL characters", field)
	}
	return nil
}

// checkWorkflowText refuses workflow data PostgreSQL cannot keep: bytes
// that are not UTF-8, or a name or tag with a NUL character (a version
// keeps them decoded, see builder.Describe).
func checkWorkflowText(data []byte) error {
	if err := checkUTF8Field("workflow_data", data); err != nil {
		return err
	}
	d := builder.Describe(data)
	if err := checkStoredText("workflow_data.name", d.Name); err != nil {
		return err
	}
	for _, tag := range d.Tags {
		if err := checkStoredText("workflow_data.tags", tag); err != nil {
			return err
		}
	}
	return nil
}

// parseSettings reads and checks a settings object. Its fields are named
// as in a project (settings.version_limit), or, when bare, as in a body
// that is the settings object itself (version_limit).
func parseSettings(raw []byte, bare bool) (builder.Settings, error) {
	var s builder.Settings
	if err := checkUTF8Field("settings", raw); err != nil {
		return s, err
	}
	err := s.UnmarshalJSON(raw)
	if err == nil && !strings.HasPrefix(strings.TrimLeft(string(raw), " \t\r\n"), "{") {
		// UnmarshalJSON takes null for the defaults.
		err = &builder.ValueError{Field: "settings", Rule: "must be a JSON object"}
	}
	if err == nil {
		err = s.Check()
	}
	var ve *builder.ValueError
	if errors.As(err, &ve) {
		field := ve.Field
		if bare {
			field = strings.TrimPrefix(field, "settings.")
		}
		return s, httpjson.NewError(http.StatusBadRequest, "invalid_field", field, "%s %s", field, ve.Rule)
	}
	return s, err
}
