package memory

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/threadline/threadline/builder"
)

var _ builder.Store = (*Store)(nil)

// builderData is the builder's part of the store, unbounded like the
// threads' metadata and under the same lock.
type builderData struct {
	projects   map[ownedName]*project
	iterations map[ownedName][]builder.Iteration
	feedback   map[ownedName][]builder.Feedback
}

func newBuilderData() builderData {
	return builderData{projects: map[ownedName]*project{}, iterations: map[ownedName][]builder.Iteration{},
		feedback: map[ownedName][]builder.Feedback{}}
}

// ownedName is a project name or a workflow id of one owner.
type ownedName struct{ owner, name string }

type project struct {
	// meta leaves WorkflowCount and Workflows to the files.
	meta  builder.Project
	files map[string]*file
}

type file struct {
	meta builder.WorkflowFile
	// versions are oldest first.
	versions []version
}

type version struct {
	name           string
	made, modified time.Time
	data           []byte
}

// view is the project as the builder returns it.
func (p *project) view() builder.Project {
	out := p.meta
	out.Settings.Extra = maps.Clone(out.Settings.Extra)
	out.Workflows = slices.Sorted(maps.Keys(p.files))
	if out.Workflows == nil {
		out.Workflows = []string{}
	}
	out.WorkflowCount = len(out.Workflows)
	return out
}

func (v version) info() builder.Version {
	return builder.NewVersion(v.name, v.made, v.modified, v.data)
}

func builderFail(op, what string, err error) error {
	return fmt.Errorf("memory: %s %s: %w", op, what, err)
}

// withProject runs fn on the owner's project under the lock, after the
// checks every call makes.
func (s *Store) withProject(ctx context.Context, op, owner, name string, fn func(p *project) error) error {
	err := builder.CheckName(name)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return builderFail(op, "project "+quote(name), err)
	}
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	p := s.b.projects[ownedName{owner, name}]
	if p == nil {
		return builderFail(op, "project "+quote(name), builder.ErrNotFound)
	}
	return fn(p)
}

// withFile is withProject for one of its files.
func (s *Store) withFile(ctx context.Context, op, owner, projectName, filename string, fn func(p *project, f *file) error) error {
	what := quote(projectName + "/" + filename)
	if err := builder.CheckFilename(filename); err != nil {
		return builderFail(op, what, err)
	}
	return s.withProject(ctx, op, owner, projectName, func(p *project) error {
		f := p.files[filename]
		if f == nil {
			return builderFail(op, what, builder.ErrNotFound)
		}
		return fn(p, f)
	})
}

// withVersion is withFile for one of its versions, at index i of
// f.versions.
func (s *Store) withVersion(ctx context.Context, op, owner, projectName, filename, name string, fn func(p *project, f *file, i int) error) error {
	what := quote(projectName + "/" + filename + "@" + name)
	if err := builder.CheckVersionName(name); err != nil {
		return builderFail(op, what, err)
	}
	return s.withFile(ctx, op, owner, projectName, filename, func(p *project, f *file) error {
		i := slices.IndexFunc(f.versions, func(v version) bool { return v.name == name })
		if i < 0 {
			return builderFail(op, what, builder.ErrNotFound)
		}
		return fn(p, f, i)
	})
}

func quote(s string) string { return fmt.Sprintf("%q", s) }

// CreateProject implements builder.Store.
func (s *Store) CreateProject(ctx context.Context, owner string, np builder.NewProject) (builder.Project, error) {
	np, err := builder.CheckNewProject(np)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return builder.Project{}, builderFail("create", "project "+quote(np.Name), err)
	}
	if err := s.lock(); err != nil {
		return builder.Project{}, err
	}
	defer s.mu.Unlock()
	key := ownedName{owner, np.Name}
	if s.b.projects[key] != nil {
		return builder.Project{}, builderFail("create", "project "+quote(np.Name), builder.ErrExists)
	}
	at := now()
	settings := *np.Settings
	settings.Extra = maps.Clone(settings.Extra)
	p := &project{meta: builder.Project{OwnerID: owner, Name: np.Name, Description: np.Description,
		CreatedDate: at, LastModified: at, Settings: settings}, files: map[string]*file{}}
	for _, name := range np.InitialWorkflows {
		data := builder.EmptyWorkflow(name)
		p.files[name] = &file{meta: builder.WorkflowFile{Filename: name, WorkflowData: data,
			CreatedDate: at, ModifiedDate: at, Size: int64(len(data))}}
	}
	s.b.projects[key] = p
	return p.view(), nil
}

// GetProject implements builder.Store.
func (s *Store) GetProject(ctx context.Context, owner, name string) (out builder.Project, err error) {
	err = s.withProject(ctx, "get", owner, name, func(p *project) error {
		out = p.view()
		return nil
	})
	return out, err
}

// ListProjects implements builder.Store.
func (s *Store) ListProjects(ctx context.Context, owner string) ([]builder.Project, error) {
	if err := ctx.Err(); err != nil {
		return nil, builderFail("list", "projects of "+quote(owner), err)
	}
	if err := s.lock(); err != nil {
		return nil, err
	}
	var out []builder.Project
	for key, p := range s.b.projects {
		if key.owner == owner {
			out = append(out, p.view())
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b builder.Project) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// ProjectStats implements builder.Store.
func (s *Store) ProjectStats(ctx context.Context, owner string) (builder.Stats, error) {
	ps, err := s.ListProjects(ctx, owner)
	if err != nil {
		return builder.Stats{}, err
	}
	return builder.ComputeStats(ps), nil
}

// UpdateProjectSettings implements builder.Store.
func (s *Store) UpdateProjectSettings(ctx context.Context, owner, name string, settings builder.Settings) (out builder.Project, err error) {
	if err := settings.Check(); err != nil {
		return out, builderFail("update settings of", "project "+quote(name), err)
	}
	settings.Extra = maps.Clone(settings.Extra)
	err = s.withProject(ctx, "update settings of", owner, name, func(p *project) error {
		p.meta.Settings = settings
		p.meta.LastModified = now()
		out = p.view()
		return nil
	})
	return out, err
}

// DeleteProject implements builder.Store.
func (s *Store) DeleteProject(ctx context.Context, owner, name string) error {
	return s.withProject(ctx, "delete", owner, name, func(*project) error {
		delete(s.b.projects, ownedName{owner, name})
		return nil
	})
}

// SaveWorkflow implements builder.Store.
func (s *Store) SaveWorkflow(ctx context.Context, owner, projectName, filename string, data json.RawMessage, createBackup bool) (res builder.SaveResult, err error) {
	what := quote(projectName + "/" + filename)
	err = builder.CheckFilename(filename)
	if err == nil {
		err = builder.CheckWorkflowData(data)
	}
	if err != nil {
		return res, builderFail("save", what, err)
	}
	data = slices.Clone(data)
	err = s.withProject(ctx, "save", owner, projectName, func(p *project) error {
		res = p.save(filename, data, createBackup)
		return nil
	})
	return res, err
}

// save writes the file under the store's lock; data is the store's own.
func (p *project) save(filename string, data []byte, createBackup bool) builder.SaveResult {
	at := now()
	var res builder.SaveResult
	f := p.files[filename]
	if f == nil {
		f = &file{meta: builder.WorkflowFile{Filename: filename, CreatedDate: at}}
		p.files[filename] = f
		res.Created = true
	} else {
		if builder.ShouldBackup(true, createBackup, p.meta.Settings) {
			res.Backup = f.freeBackupName(at)
			f.versions = append(f.versions, version{name: res.Backup, made: at, modified: f.meta.ModifiedDate, data: f.meta.WorkflowData})
		}
		res.Pruned = f.keep(p.meta.Settings.VersionLimit)
	}
	f.meta.WorkflowData, f.meta.ModifiedDate, f.meta.Size = data, at, int64(len(data))
	p.meta.LastModified = at
	res.Workflow = f.meta
	res.Workflow.WorkflowData = slices.Clone(data)
	return res
}

func (f *file) freeBackupName(at time.Time) string {
	for n := 1; ; n++ {
		name := builder.BackupName(f.meta.Filename, at, n)
		if !slices.ContainsFunc(f.versions, func(v version) bool { return v.name == name }) {
			return name
		}
	}
}

// keep drops all but the n newest versions and returns how many it
// dropped.
func (f *file) keep(n int) int {
	over := len(f.versions) - n
	if over <= 0 {
		return 0
	}
	f.versions = slices.Delete(f.versions, 0, over)
	return over
}

// GetWorkflow implements builder.Store.
func (s *Store) GetWorkflow(ctx context.Context, owner, projectName, filename string) (out builder.WorkflowFile, err error) {
	err = s.withFile(ctx, "get", owner, projectName, filename, func(_ *project, f *file) error {
		out = f.meta
		out.WorkflowData = slices.Clone(out.WorkflowData)
		return nil
	})
	return out, err
}

// ListWorkflows implements builder.Store.
func (s *Store) ListWorkflows(ctx context.Context, owner, projectName string) (out []builder.WorkflowFile, err error) {
	err = s.withProject(ctx, "list workflows of", owner, projectName, func(p *project) error {
		for _, name := range slices.Sorted(maps.Keys(p.files)) {
			meta := p.files[name].meta
			meta.WorkflowData = nil
			out = append(out, meta)
		}
		return nil
	})
	return out, err
}

// DeleteWorkflow implements builder.Store.
func (s *Store) DeleteWorkflow(ctx context.Context, owner, projectName, filename string) error {
	return s.withFile(ctx, "delete", owner, projectName, filename, func(p *project, _ *file) error {
		delete(p.files, filename)
		p.meta.LastModified = now()
		return nil
	})
}

// ListVersions implements builder.Store.
func (s *Store) ListVersions(ctx context.Context, owner, projectName, filename string) (out []builder.Version, err error) {
	err = s.withFile(ctx, "list versions of", owner, projectName, filename, func(_ *project, f *file) error {
		for _, v := range slices.Backward(f.versions) {
			out = append(out, v.info())
		}
		return nil
	})
	return out, err
}

// GetVersion implements builder.Store.
func (s *Store) GetVersion(ctx context.Context, owner, projectName, filename, name string) (out builder.Version, err error) {
	err = s.withVersion(ctx, "get", owner, projectName, filename, name, func(_ *project, f *file, i int) error {
		out = f.versions[i].info()
		return nil
	})
	return out, err
}

// GetVersionContent implements builder.Store.
func (s *Store) GetVersionContent(ctx context.Context, owner, projectName, filename, name string) (out json.RawMessage, err error) {
	err = s.withVersion(ctx, "get content of", owner, projectName, filename, name, func(_ *project, f *file, i int) error {
		out = slices.Clone(f.versions[i].data)
		return nil
	})
	return out, err
}

// RestoreVersion implements builder.Store.
func (s *Store) RestoreVersion(ctx context.Context, owner, projectName, filename, name string, createBackup bool) (res builder.SaveResult, err error) {
	err = s.withVersion(ctx, "restore", owner, projectName, filename, name, func(p *project, f *file, i int) error {
		// The version's bytes are never modified, so the file may share them.
		res = p.save(filename, f.versions[i].data, createBackup)
		return nil
	})
	return res, err
}

// DeleteVersion implements builder.Store.
func (s *Store) DeleteVersion(ctx context.Context, owner, projectName, filename, name string) error {
	return s.withVersion(ctx, "delete", owner, projectName, filename, name, func(p *project, f *file, i int) error {
		f.versions = slices.Delete(f.versions, i, i+1)
		p.meta.LastModified = now()
		return nil
	})
}

// CleanupVersions implements builder.Store.
func (s *Store) CleanupVersions(ctx context.Context, owner, projectName, filename string, keep int) (removed int, err error) {
	if err := builder.CheckKeep(keep); err != nil {
		return 0, builderFail("clean up versions of", quote(projectName+"/"+filename), err)
	}
	err = s.withFile(ctx, "clean up versions of", owner, projectName, filename, func(p *project, f *file) error {
		removed = f.keep(keep)
		p.meta.LastModified = now()
		return nil
	})
	return removed, err
}

// AddIteration implements builder.Store.
func (s *Store) AddIteration(ctx context.Context, owner string, it builder.Iteration) (builder.Iteration, error) {
	it, err := builder.CheckIteration(it)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return builder.Iteration{}, builderFail("add iteration to", "workflow "+quote(it.WorkflowID), err)
	}
	it.Timestamp = builder.Stamp(it.Timestamp)
	it.ChangesSummary = slices.Clone(it.ChangesSummary)
	if err := s.lock(); err != nil {
		return builder.Iteration{}, err
	}
	defer s.mu.Unlock()
	key := ownedName{owner, it.WorkflowID}
	s.b.iterations[key] = append(s.b.iterations[key], it)
	out := it
	out.ChangesSummary = slices.Clone(it.ChangesSummary)
	return out, nil
}

// ListIterations implements builder.Store: oldest first, equal timestamps
// in insertion order.
func (s *Store) ListIterations(_ context.Context, owner, workflowID string) ([]builder.Iteration, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	out := slices.Clone(s.b.iterations[ownedName{owner, workflowID}])
	s.mu.Unlock()
	for i := range out {
		it := &out[i]
		it.ChangesSummary = slices.Clone(it.ChangesSummary)
		it.OriginalHash, it.ModifiedHash = builder.HashOf(it.OriginalHash), builder.HashOf(it.ModifiedHash)
	}
	slices.SortStableFunc(out, func(a, b builder.Iteration) int { return a.Timestamp.Compare(b.Timestamp) })
	return out, nil
}

// AddFeedback implements builder.Store.
func (s *Store) AddFeedback(ctx context.Context, owner string, f builder.Feedback) (builder.Feedback, error) {
	err := builder.CheckFeedback(f)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return builder.Feedback{}, builderFail("add feedback to", "workflow "+quote(f.WorkflowID), err)
	}
	f.Timestamp = builder.Stamp(f.Timestamp)
	if err := s.lock(); err != nil {
		return builder.Feedback{}, err
	}
	defer s.mu.Unlock()
	key := ownedName{owner, f.WorkflowID}
	s.b.feedback[key] = append(s.b.feedback[key], f)
	return f, nil
}

// ListFeedback implements builder.Store: oldest first, equal timestamps in
// insertion order.
func (s *Store) ListFeedback(_ context.Context, owner, workflowID string) ([]builder.Feedback, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	out := slices.Clone(s.b.feedback[ownedName{owner, workflowID}])
	s.mu.Unlock()
	slices.SortStableFunc(out, func(a, b builder.Feedback) int { return a.Timestamp.Compare(b.Timestamp) })
	return out, nil
}
