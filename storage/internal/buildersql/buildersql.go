// Package buildersql is builder.Store on the SQL tables of migration 004,
// shared by the SQLite and PostgreSQL backends.
//
// Every write inside a project first stamps the project's row (its
// last_modified), in the same transaction: that UPDATE is also the lock
// that makes concurrent saves of a project take turns (SQLite has one
// writer anyway; PostgreSQL queues them on the row lock), so a backup's
// name is chosen, its row added and the version limit applied without a
// concurrent save in between.
//
// What the two databases do differently is data in a Dialect: how
// placeholders are spelled, whose clock stamps the rows, and how a
// timestamp goes in and comes out.
package buildersql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/threadline/threadline/builder"
	"github.com/threadline/threadline/storage/internal/storeerr"
)

// Dialect is what one database does differently.
type Dialect struct {
	// Name prefixes errors ("sqlite", "postgres").
	Name string
	// Rebind turns ? placeholders into the database's.
	Rebind func(string) string
	// Now is the SQL of the current time, with its parameters. It must
	// give one value per statement, however often it appears.
	Now func() (sql string, args []any)
	// Time turns a time into a timestamp parameter; ParseTime turns a
	// scanned timestamp column back, in UTC.
	Time      func(time.Time) any
	ParseTime func(any) (time.Time, error)
	// Err, when set, amends every error before it is wrapped.
	Err func(ctx context.Context, err error) error
}

// Store implements builder.Store on one database.
type Store struct {
	d Dialect
	// w takes the writes, r the reads (SQLite keeps one writer connection
	// apart from its readers; PostgreSQL passes one pool twice).
	w, r *sql.DB
}

var _ builder.Store = (*Store)(nil)

// New returns the builder's store on a database.
func New(d Dialect, writer, reader *sql.DB) *Store {
	return &Store{d: d, w: writer, r: reader}
}

func (s *Store) q(query string) string { return s.d.Rebind(query) }

// fail wraps err with the backend's name and what was being done.
func (s *Store) fail(ctx context.Context, err error, op, what string) error {
	if s.d.Err != nil {
		err = s.d.Err(ctx, err)
	}
	return storeerr.Errorf("%s: %s %s: %w", s.d.Name, op, what, err)
}

func quote(s string) string { return fmt.Sprintf("%q", s) }

func fileWhat(project, file string) string { return quote(project + "/" + file) }

// inTx runs fn in a write transaction, committing when it returns nil.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) (err error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// notFound turns "no such row" into builder.ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return builder.ErrNotFound
	}
	return err
}

// mustAffect returns builder.ErrNotFound when res changed no row.
func mustAffect(res sql.Result) error {
	n, err := res.RowsAffected()
	if err == nil && n == 0 {
		err = builder.ErrNotFound
	}
	return err
}

// nowArgs is the Now SQL and its parameters for a statement that spells it
// n times.
func (s *Store) nowArgs(n int) (string, []any) {
	now, args := s.d.Now()
	var all []any
	for range n {
		all = append(all, args...)
	}
	return now, all
}

// project is the row a write transaction stamped.
type project struct {
	id       int64
	settings builder.Settings
	at       time.Time
}

// touch stamps the owner's project and returns it, or ErrNotFound.
func (s *Store) touch(ctx context.Context, tx *sql.Tx, owner, name string) (project, error) {
	now, args := s.nowArgs(1)
	var p project
	var settings string
	var at any
	err := tx.QueryRowContext(ctx, s.q(`UPDATE builder_projects SET updated_at = `+now+`
		WHERE owner_id = ? AND name = ? RETURNING id, settings, updated_at`), append(args, owner, name)...).
		Scan(&p.id, &settings, &at)
	if err != nil {
		return p, notFound(err)
	}
	if err := json.Unmarshal([]byte(settings), &p.settings); err != nil {
		return p, storeerr.Errorf("stored settings: %w", err)
	}
	p.at, err = s.d.ParseTime(at)
	return p, err
}

// CreateProject implements builder.Store.
func (s *Store) CreateProject(ctx context.Context, owner string, np builder.NewProject) (builder.Project, error) {
	np, err := builder.CheckNewProject(np)
	var out builder.Project
	if err == nil {
		out, err = s.createProject(ctx, owner, np)
	}
	if err != nil {
		return builder.Project{}, s.fail(ctx, err, "create", "project "+quote(np.Name))
	}
	return out, nil
}

func (s *Store) createProject(ctx context.Context, owner string, np builder.NewProject) (out builder.Project, err error) {
	settings, err := json.Marshal(np.Settings)
	if err != nil {
		return out, err
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		now, nowArgs := s.nowArgs(2)
		var id int64
		var at any
		err := tx.QueryRowContext(ctx, s.q(`INSERT INTO builder_projects (owner_id, name, description, settings, created_at, updated_at)
			VALUES (?, ?, ?, ?, `+now+`, `+now+`) ON CONFLICT (owner_id, name) DO NOTHING RETURNING id, created_at`),
			append([]any{owner, np.Name, np.Description, string(settings)}, nowArgs...)...).Scan(&id, &at)
		if errors.Is(err, sql.ErrNoRows) {
			return builder.ErrExists
		}
		if err != nil {
			return err
		}
		created, err := s.d.ParseTime(at)
		if err != nil {
			return err
		}
		out = builder.Project{OwnerID: owner, Name: np.Name, Description: np.Description, CreatedDate: created,
			LastModified: created, Settings: *np.Settings, Workflows: []string{}}
		for _, name := range np.InitialWorkflows {
			data := builder.EmptyWorkflow(name)
			if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO builder_workflows (project_id, filename, data, size, created_at, updated_at)
				VALUES (?, ?, ?, ?, ?, ?)`), id, name, string(data), len(data), s.d.Time(created), s.d.Time(created)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return out, err
	}
	// Listed in name order, as every read lists them.
	out.Workflows = append(out.Workflows, np.InitialWorkflows...)
	slices.Sort(out.Workflows)
	out.WorkflowCount = len(out.Workflows)
	return out, nil
}

// projectsSQL reads projects with their files' names, one row per file (or
// one with a NULL name for a project without files).
const projectsSQL = `SELECT p.name, p.description, p.settings, p.created_at, p.updated_at, w.filename
	FROM builder_projects p LEFT JOIN builder_workflows w ON w.project_id = p.id
	WHERE p.owner_id = ?`

// projects runs projectsSQL with more conditions and args.
func (s *Store) projects(ctx context.Context, owner, more string, args ...any) ([]builder.Project, error) {
	rows, err := s.r.QueryContext(ctx, s.q(projectsSQL+more+` ORDER BY p.name, w.filename`), append([]any{owner}, args...)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []builder.Project
	for rows.Next() {
		var p builder.Project
		var settings string
		var created, updated any
		var file sql.NullString
		if err := rows.Scan(&p.Name, &p.Description, &settings, &created, &updated, &file); err != nil {
			return nil, err
		}
		if n := len(out); n == 0 || out[n-1].Name != p.Name {
			p.OwnerID, p.Workflows = owner, []string{}
			if err := json.Unmarshal([]byte(settings), &p.Settings); err != nil {
				return nil, storeerr.Errorf("stored settings of %q: %w", p.Name, err)
			}
			if p.CreatedDate, err = s.d.ParseTime(created); err != nil {
				return nil, err
			}
			if p.LastModified, err = s.d.ParseTime(updated); err != nil {
				return nil, err
			}
			out = append(out, p)
		}
		if file.Valid {
			last := &out[len(out)-1]
			last.Workflows = append(last.Workflows, file.String)
			last.WorkflowCount++
		}
	}
	return out, rows.Err()
}

// GetProject implements builder.Store.
func (s *Store) GetProject(ctx context.Context, owner, name string) (builder.Project, error) {
	err := builder.CheckName(name)
	var ps []builder.Project
	if err == nil {
		ps, err = s.projects(ctx, owner, ` AND p.name = ?`, name)
	}
	if err == nil && len(ps) == 0 {
		err = builder.ErrNotFound
	}
	if err != nil {
		return builder.Project{}, s.fail(ctx, err, "get", "project "+quote(name))
	}
	return ps[0], nil
}

// ListProjects implements builder.Store.
func (s *Store) ListProjects(ctx context.Context, owner string) ([]builder.Project, error) {
	ps, err := s.projects(ctx, owner, "")
	if err != nil {
		return nil, s.fail(ctx, err, "list", "projects of "+quote(owner))
	}
	return ps, nil
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
func (s *Store) UpdateProjectSettings(ctx context.Context, owner, name string, settings builder.Settings) (builder.Project, error) {
	err := builder.CheckName(name)
	if err == nil {
		err = settings.Check()
	}
	if err == nil {
		err = s.inTx(ctx, func(tx *sql.Tx) error {
			enc, err := json.Marshal(settings)
			if err != nil {
				return err
			}
			now, args := s.nowArgs(1)
			res, err := tx.ExecContext(ctx, s.q(`UPDATE builder_projects SET settings = ?, updated_at = `+now+` WHERE owner_id = ? AND name = ?`),
				append(append([]any{string(enc)}, args...), owner, name)...)
			if err == nil {
				err = mustAffect(res)
			}
			return err
		})
	}
	if err != nil {
		return builder.Project{}, s.fail(ctx, err, "update settings of", "project "+quote(name))
	}
	return s.GetProject(ctx, owner, name)
}

// DeleteProject implements builder.Store; files and versions go with the
// project through ON DELETE CASCADE.
func (s *Store) DeleteProject(ctx context.Context, owner, name string) error {
	err := builder.CheckName(name)
	if err == nil {
		var res sql.Result
		res, err = s.w.ExecContext(ctx, s.q(`DELETE FROM builder_projects WHERE owner_id = ? AND name = ?`), owner, name)
		if err == nil {
			err = mustAffect(res)
		}
	}
	if err != nil {
		return s.fail(ctx, err, "delete", "project "+quote(name))
	}
	return nil
}

// checkFile checks the names of a call on a file.
func checkFile(projectName, filename string) error {
	if err := builder.CheckName(projectName); err != nil {
		return err
	}
	return builder.CheckFilename(filename)
}

// checkVersion checks the names of a call on a version.
func checkVersion(projectName, filename, version string) error {
	if err := checkFile(projectName, filename); err != nil {
		return err
	}
	return builder.CheckVersionName(version)
}

// SaveWorkflow implements builder.Store.
func (s *Store) SaveWorkflow(ctx context.Context, owner, projectName, filename string, data json.RawMessage, createBackup bool) (builder.SaveResult, error) {
	err := checkFile(projectName, filename)
	if err == nil {
		err = builder.CheckWorkflowData(data)
	}
	var res builder.SaveResult
	if err == nil {
		err = s.inTx(ctx, func(tx *sql.Tx) error {
			p, err := s.touch(ctx, tx, owner, projectName)
			if err != nil {
				return err
			}
			res, err = s.save(ctx, tx, p, filename, data, createBackup)
			return err
		})
	}
	if err != nil {
		return builder.SaveResult{}, s.fail(ctx, err, "save", fileWhat(projectName, filename))
	}
	return res, nil
}

// save writes the file inside the transaction that touched its project:
// the backup of the previous content, the version limit, the new content.
func (s *Store) save(ctx context.Context, tx *sql.Tx, p project, filename string, data []byte, createBackup bool) (builder.SaveResult, error) {
	res := builder.SaveResult{Workflow: builder.WorkflowFile{Filename: filename, WorkflowData: json.RawMessage(string(data)),
		CreatedDate: p.at, ModifiedDate: p.at, Size: int64(len(data))}}
	var id int64
	var old string
	var created, modified any
	err := tx.QueryRowContext(ctx, s.q(`SELECT id, data, created_at, updated_at FROM builder_workflows WHERE project_id = ? AND filename = ?`),
		p.id, filename).Scan(&id, &old, &created, &modified)
	if errors.Is(err, sql.ErrNoRows) {
		res.Created = true
		_, err = tx.ExecContext(ctx, s.q(`INSERT INTO builder_workflows (project_id, filename, data, size, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?)`), p.id, filename, string(data), len(data), s.d.Time(p.at), s.d.Time(p.at))
		return res, err
	}
	if err != nil {
		return res, err
	}
	if res.Workflow.CreatedDate, err = s.d.ParseTime(created); err != nil {
		return res, err
	}
	if builder.ShouldBackup(true, createBackup, p.settings) {
		if res.Backup, err = s.backup(ctx, tx, id, filename, []byte(old), p.at, modified); err != nil {
			return res, err
		}
	}
	if res.Pruned, err = s.keep(ctx, tx, id, p.settings.VersionLimit); err != nil {
		return res, err
	}
	_, err = tx.ExecContext(ctx, s.q(`UPDATE builder_workflows SET data = ?, size = ?, updated_at = ? WHERE id = ?`),
		string(data), len(data), s.d.Time(p.at), id)
	return res, err
}

// backup keeps content as a version of file id under the first free
// BackupName and returns that name.
func (s *Store) backup(ctx context.Context, tx *sql.Tx, id int64, filename string, content []byte, at time.Time, modified any) (string, error) {
	var name string
	for n := 1; ; n++ {
		name = builder.BackupName(filename, at, n)
		var one int
		err := tx.QueryRowContext(ctx, s.q(`SELECT 1 FROM builder_versions WHERE workflow_id = ? AND filename = ?`), id, name).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			break
		}
		if err != nil {
			return "", err
		}
	}
	d := builder.Describe(content)
	tags, err := json.Marshal(d.Tags)
	if err != nil {
		return "", err
	}
	_, err = tx.ExecContext(ctx, s.q(`INSERT INTO builder_versions
		(workflow_id, filename, data, size, workflow_name, node_count, tags, created_at, modified_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		id, name, string(content), len(content), d.Name, d.NodeCount, string(tags), s.d.Time(at), modified)
	return name, err
}

// keep removes all but the n newest versions of file id and returns how
// many it removed.
func (s *Store) keep(ctx context.Context, tx *sql.Tx, id int64, n int) (int, error) {
	res, err := tx.ExecContext(ctx, s.q(`DELETE FROM builder_versions WHERE workflow_id = ? AND id NOT IN
		(SELECT id FROM builder_versions WHERE workflow_id = ? ORDER BY id DESC LIMIT ?)`), id, id, n)
	if err != nil {
		return 0, err
	}
	removed, err := res.RowsAffected()
	return int(removed), err
}

// fileSQL joins a file to its owner's project; the caller binds owner,
// project name and file name in that order.
const fileSQL = ` FROM builder_workflows w JOIN builder_projects p ON p.id = w.project_id
	WHERE p.owner_id = ? AND p.name = ? AND w.filename = ?`

// GetWorkflow implements builder.Store.
func (s *Store) GetWorkflow(ctx context.Context, owner, projectName, filename string) (builder.WorkflowFile, error) {
	err := checkFile(projectName, filename)
	var f builder.WorkflowFile
	if err == nil {
		var data string
		var created, modified any
		err = s.r.QueryRowContext(ctx, s.q(`SELECT w.data, w.size, w.created_at, w.updated_at`+fileSQL), owner, projectName, filename).
			Scan(&data, &f.Size, &created, &modified)
		if err == nil {
			f.Filename, f.WorkflowData = filename, json.RawMessage(data)
			f.CreatedDate, f.ModifiedDate, err = s.times(created, modified)
		}
	}
	if err != nil {
		return builder.WorkflowFile{}, s.fail(ctx, notFound(err), "get", fileWhat(projectName, filename))
	}
	return f, nil
}

// times parses two scanned timestamps.
func (s *Store) times(a, b any) (time.Time, time.Time, error) {
	ta, err := s.d.ParseTime(a)
	if err != nil {
		return ta, time.Time{}, err
	}
	tb, err := s.d.ParseTime(b)
	return ta, tb, err
}

// ListWorkflows implements builder.Store. The project is the left side of
// the join, so an empty project gives one row of NULLs and a missing one
// none.
func (s *Store) ListWorkflows(ctx context.Context, owner, projectName string) ([]builder.WorkflowFile, error) {
	out, err := s.listWorkflows(ctx, owner, projectName)
	if err != nil {
		return nil, s.fail(ctx, err, "list workflows of", "project "+quote(projectName))
	}
	return out, nil
}

func (s *Store) listWorkflows(ctx context.Context, owner, projectName string) ([]builder.WorkflowFile, error) {
	if err := builder.CheckName(projectName); err != nil {
		return nil, err
	}
	var out []builder.WorkflowFile
	err := s.queryFound(ctx, `SELECT w.filename, w.size, w.created_at, w.updated_at
		FROM builder_projects p LEFT JOIN builder_workflows w ON w.project_id = p.id
		WHERE p.owner_id = ? AND p.name = ? ORDER BY w.filename`, []any{owner, projectName}, func(rows *sql.Rows) error {
		var name sql.NullString
		var size sql.NullInt64
		var created, modified any
		if err := rows.Scan(&name, &size, &created, &modified); err != nil || !name.Valid {
			return err
		}
		f := builder.WorkflowFile{Filename: name.String, Size: size.Int64}
		var err error
		f.CreatedDate, f.ModifiedDate, err = s.times(created, modified)
		out = append(out, f)
		return err
	})
	return out, err
}

// DeleteWorkflow implements builder.Store; the versions go with the file
// through ON DELETE CASCADE.
func (s *Store) DeleteWorkflow(ctx context.Context, owner, projectName, filename string) error {
	err := checkFile(projectName, filename)
	if err == nil {
		err = s.inTx(ctx, func(tx *sql.Tx) error {
			p, err := s.touch(ctx, tx, owner, projectName)
			if err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, s.q(`DELETE FROM builder_workflows WHERE project_id = ? AND filename = ?`), p.id, filename)
			if err == nil {
				err = mustAffect(res)
			}
			return err
		})
	}
	if err != nil {
		return s.fail(ctx, err, "delete", fileWhat(projectName, filename))
	}
	return nil
}

const versionColumns = `v.filename, v.size, v.workflow_name, v.node_count, v.tags, v.created_at, v.modified_at`

// scanVersion reads versionColumns; ok is false for the NULLs of a file
// without versions.
func (s *Store) scanVersion(row interface{ Scan(...any) error }) (v builder.Version, ok bool, err error) {
	var name, workflowName, tags sql.NullString
	var size, nodes sql.NullInt64
	var made, modified any
	if err := row.Scan(&name, &size, &workflowName, &nodes, &tags, &made, &modified); err != nil {
		return v, false, err
	}
	if !name.Valid {
		return v, false, nil
	}
	d := builder.Description{Name: workflowName.String, NodeCount: int(nodes.Int64)}
	if err := json.Unmarshal([]byte(tags.String), &d.Tags); err != nil {
		return v, false, storeerr.Errorf("stored tags of %q: %w", name.String, err)
	}
	madeAt, modifiedAt, err := s.times(made, modified)
	if err != nil {
		return v, false, err
	}
	return builder.DescribedVersion(name.String, madeAt, modifiedAt, size.Int64, d), true, nil
}

// ListVersions implements builder.Store. The file is the left side of the
// join, so that a file without versions is told from a missing one.
func (s *Store) ListVersions(ctx context.Context, owner, projectName, filename string) ([]builder.Version, error) {
	out, err := s.listVersions(ctx, owner, projectName, filename)
	if err != nil {
		return nil, s.fail(ctx, err, "list versions of", fileWhat(projectName, filename))
	}
	return out, nil
}

func (s *Store) listVersions(ctx context.Context, owner, projectName, filename string) ([]builder.Version, error) {
	if err := checkFile(projectName, filename); err != nil {
		return nil, err
	}
	var out []builder.Version
	err := s.queryFound(ctx, `SELECT `+versionColumns+`
		FROM builder_workflows w JOIN builder_projects p ON p.id = w.project_id
		LEFT JOIN builder_versions v ON v.workflow_id = w.id
		WHERE p.owner_id = ? AND p.name = ? AND w.filename = ? ORDER BY v.id DESC`,
		[]any{owner, projectName, filename}, func(rows *sql.Rows) error {
			v, ok, err := s.scanVersion(rows)
			if ok {
				out = append(out, v)
			}
			return err
		})
	return out, err
}

// versionSQL joins a version to its file and the owner's project; the
// caller binds owner, project name, file name and version name.
const versionSQL = ` FROM builder_versions v JOIN builder_workflows w ON w.id = v.workflow_id
	JOIN builder_projects p ON p.id = w.project_id
	WHERE p.owner_id = ? AND p.name = ? AND w.filename = ? AND v.filename = ?`

func versionWhat(projectName, filename, version string) string {
	return quote(projectName + "/" + filename + "@" + version)
}

// GetVersion implements builder.Store.
func (s *Store) GetVersion(ctx context.Context, owner, projectName, filename, version string) (builder.Version, error) {
	err := checkVersion(projectName, filename, version)
	var v builder.Version
	if err == nil {
		v, _, err = s.scanVersion(s.r.QueryRowContext(ctx, s.q(`SELECT `+versionColumns+versionSQL), owner, projectName, filename, version))
	}
	if err != nil {
		return builder.Version{}, s.fail(ctx, notFound(err), "get", versionWhat(projectName, filename, version))
	}
	return v, nil
}

// GetVersionContent implements builder.Store.
func (s *Store) GetVersionContent(ctx context.Context, owner, projectName, filename, version string) (json.RawMessage, error) {
	err := checkVersion(projectName, filename, version)
	var data string
	if err == nil {
		err = s.r.QueryRowContext(ctx, s.q(`SELECT v.data`+versionSQL), owner, projectName, filename, version).Scan(&data)
	}
	if err != nil {
		return nil, s.fail(ctx, notFound(err), "get content of", versionWhat(projectName, filename, version))
	}
	return json.RawMessage(data), nil
}

// RestoreVersion implements builder.Store.
func (s *Store) RestoreVersion(ctx context.Context, owner, projectName, filename, version string, createBackup bool) (builder.SaveResult, error) {
	err := checkVersion(projectName, filename, version)
	var res builder.SaveResult
	if err == nil {
		err = s.inTx(ctx, func(tx *sql.Tx) error {
			p, err := s.touch(ctx, tx, owner, projectName)
			if err != nil {
				return err
			}
			var data string
			err = tx.QueryRowContext(ctx, s.q(`SELECT v.data FROM builder_versions v JOIN builder_workflows w ON w.id = v.workflow_id
				WHERE w.project_id = ? AND w.filename = ? AND v.filename = ?`), p.id, filename, version).Scan(&data)
			if err != nil {
				return notFound(err)
			}
			res, err = s.save(ctx, tx, p, filename, []byte(data), createBackup)
			return err
		})
	}
	if err != nil {
		return builder.SaveResult{}, s.fail(ctx, err, "restore", versionWhat(projectName, filename, version))
	}
	return res, nil
}

// DeleteVersion implements builder.Store.
func (s *Store) DeleteVersion(ctx context.Context, owner, projectName, filename, version string) error {
	err := checkVersion(projectName, filename, version)
	if err == nil {
		err = s.inTx(ctx, func(tx *sql.Tx) error {
			p, err := s.touch(ctx, tx, owner, projectName)
			if err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, s.q(`DELETE FROM builder_versions WHERE filename = ? AND workflow_id =
				(SELECT id FROM builder_workflows WHERE project_id = ? AND filename = ?)`), version, p.id, filename)
			if err == nil {
				err = mustAffect(res)
			}
			return err
		})
	}
	if err != nil {
		return s.fail(ctx, err, "delete", versionWhat(projectName, filename, version))
	}
	return nil
}

// CleanupVersions implements builder.Store.
func (s *Store) CleanupVersions(ctx context.Context, owner, projectName, filename string, keep int) (int, error) {
	err := checkFile(projectName, filename)
	if err == nil {
		err = builder.CheckKeep(keep)
	}
	var removed int
	if err == nil {
		err = s.inTx(ctx, func(tx *sql.Tx) error {
			p, err := s.touch(ctx, tx, owner, projectName)
			if err != nil {
				return err
			}
			var id int64
			err = tx.QueryRowContext(ctx, s.q(`SELECT id FROM builder_workflows WHERE project_id = ? AND filename = ?`), p.id, filename).Scan(&id)
			if err != nil {
				return notFound(err)
			}
			removed, err = s.keep(ctx, tx, id, keep)
			return err
		})
	}
	if err != nil {
		return 0, s.fail(ctx, err, "clean up versions of", fileWhat(projectName, filename))
	}
	return removed, nil
}

// AddIteration implements builder.Store. Hashes are stored as the signed
// integers of their bits.
func (s *Store) AddIteration(ctx context.Context, owner string, it builder.Iteration) (builder.Iteration, error) {
	it, err := builder.CheckIteration(it)
	if err == nil {
		it.Timestamp = builder.Stamp(it.Timestamp)
		_, err = s.w.ExecContext(ctx, s.q(`INSERT INTO builder_iterations
			(owner_id, workflow_id, created_at, description, original_hash, modified_hash, changes_summary, original_size, modified_size)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`),
			owner, it.WorkflowID, s.d.Time(it.Timestamp), it.Description, int64(it.OriginalHash), int64(it.ModifiedHash),
			string(it.ChangesSummary), it.OriginalSize, it.ModifiedSize)
	}
	if err != nil {
		return builder.Iteration{}, s.fail(ctx, err, "add iteration to", "workflow "+quote(it.WorkflowID))
	}
	return it, nil
}

// ListIterations implements builder.Store: oldest first, equal timestamps
// in insertion order.
func (s *Store) ListIterations(ctx context.Context, owner, workflowID string) ([]builder.Iteration, error) {
	var out []builder.Iteration
	err := s.query(ctx, `SELECT created_at, description, original_hash, modified_hash, changes_summary, original_size, modified_size
		FROM builder_iterations WHERE owner_id = ? AND workflow_id = ? ORDER BY created_at, id`,
		[]any{owner, workflowID}, func(rows *sql.Rows) error {
			it := builder.Iteration{WorkflowID: workflowID}
			var at any
			var original, modified int64
			var changes string
			if err := rows.Scan(&at, &it.Description, &original, &modified, &changes, &it.OriginalSize, &it.ModifiedSize); err != nil {
				return err
			}
			it.OriginalHash, it.ModifiedHash, it.ChangesSummary = builder.HashOf(uint64(original)), builder.HashOf(uint64(modified)), json.RawMessage(changes)
			var err error
			it.Timestamp, err = s.d.ParseTime(at)
			out = append(out, it)
			return err
		})
	if err != nil {
		return nil, s.fail(ctx, err, "list iterations of", "workflow "+quote(workflowID))
	}
	return out, nil
}

// AddFeedback implements builder.Store.
func (s *Store) AddFeedback(ctx context.Context, owner string, f builder.Feedback) (builder.Feedback, error) {
	err := builder.CheckFeedback(f)
	if err == nil {
		f.Timestamp = builder.Stamp(f.Timestamp)
		_, err = s.w.ExecContext(ctx, s.q(`INSERT INTO builder_feedback (owner_id, workflow_id, created_at, feedback, feedback_type)
			VALUES (?, ?, ?, ?, ?)`), owner, f.WorkflowID, s.d.Time(f.Timestamp), f.Feedback, f.FeedbackType)
	}
	if err != nil {
		return builder.Feedback{}, s.fail(ctx, err, "add feedback to", "workflow "+quote(f.WorkflowID))
	}
	return f, nil
}

// ListFeedback implements builder.Store: oldest first, equal timestamps in
// insertion order.
func (s *Store) ListFeedback(ctx context.Context, owner, workflowID string) ([]builder.Feedback, error) {
	var out []builder.Feedback
	err := s.query(ctx, `SELECT created_at, feedback, feedback_type FROM builder_feedback
		WHERE owner_id = ? AND workflow_id = ? ORDER BY created_at, id`,
		[]any{owner, workflowID}, func(rows *sql.Rows) error {
			f := builder.Feedback{WorkflowID: workflowID}
			var at any
			if err := rows.Scan(&at, &f.Feedback, &f.FeedbackType); err != nil {
				return err
			}
			var err error
			f.Timestamp, err = s.d.ParseTime(at)
			out = append(out, f)
			return err
		})
	if err != nil {
		return nil, s.fail(ctx, err, "list feedback of", "workflow "+quote(workflowID))
	}
	return out, nil
}

// query runs a read and calls each for every row.
func (s *Store) query(ctx context.Context, query string, args []any, each func(*sql.Rows) error) error {
	_, err := s.count(ctx, query, args, each)
	return err
}

// queryFound is query for a read whose left side is the entity asked for
// (a row of NULLs where it has nothing to list): no row at all is
// builder.ErrNotFound.
func (s *Store) queryFound(ctx context.Context, query string, args []any, each func(*sql.Rows) error) error {
	n, err := s.count(ctx, query, args, each)
	if err == nil && n == 0 {
		err = builder.ErrNotFound
	}
	return err
}

// count is query that counts the rows.
func (s *Store) count(ctx context.Context, query string, args []any, each func(*sql.Rows) error) (int, error) {
	rows, err := s.r.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
		if err := each(rows); err != nil {
			return n, err
		}
	}
	return n, rows.Err()
}
