// Package builder is the N8N Builder's domain: projects of workflow files,
// the versions (backups) of each file, and the modify/iterate history of a
// workflow with its feedback, together with the Store that keeps them and
// the rules every Store applies the same way (names, backup naming, version
// limits, statistics).
//
// JSON names are the builder API's, snake_case as its documentation writes
// them. Everything a Store keeps belongs to one user (an owner id): another
// user's project is not found, exactly like another user's thread.
package builder

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// ErrNotFound is returned (wrapped) for a project, workflow file or version
// that does not exist, or that belongs to another user.
var ErrNotFound = errors.New("not found")

// ErrExists is returned (wrapped) by CreateProject when the user already
// has a project of that name.
var ErrExists = errors.New("already exists")

// Project is a named collection of workflow files. Its name is unique per
// owner.
type Project struct {
	OwnerID     string    `json:"-"`
	Name        string    `json:"name"`
	Description string    `json:"description"`
	CreatedDate time.Time `json:"created_date"`
	// LastModified moves on with every change to the project: its settings,
	// a workflow saved, restored or deleted, a version deleted.
	LastModified time.Time `json:"last_modified"`
	Settings     Settings  `json:"settings"`
	// WorkflowCount is len(Workflows): the project's file names in name
	// order.
	WorkflowCount int      `json:"workflow_count"`
	Workflows     []string `json:"workflows"`
}

// NewProject is what CreateProject makes.
type NewProject struct {
	Name        string
	Description string
	// Settings nil means DefaultSettings.
	Settings *Settings
	// InitialWorkflows are file names to create as empty workflows (see
	// EmptyWorkflow) together with the project.
	InitialWorkflows []string
}

// WorkflowFile is one workflow document of a project.
type WorkflowFile struct {
	Filename string `json:"filename"`
	// WorkflowData is the JSON object as it was saved, byte for byte.
	// ListWorkflows leaves it empty.
	WorkflowData json.RawMessage `json:"workflow_data,omitempty"`
	CreatedDate  time.Time       `json:"created_date"`
	ModifiedDate time.Time       `json:"modified_date"`
	// Size is len(WorkflowData) in bytes.
	Size int64 `json:"size"`
}

// SaveResult reports what SaveWorkflow and RestoreVersion did.
type SaveResult struct {
	Workflow WorkflowFile
	// Created is true when no file of that name existed before.
	Created bool
	// Backup is the version file the previous content was kept as, "" when
	// none was made.
	Backup string
	// Pruned is how many of the oldest versions the project's version
	// limit removed.
	Pruned int
}

// Version is a kept earlier content of a workflow file: a backup made when
// the file was replaced.
type Version struct {
	Filename string `json:"filename"`
	// Timestamp and CreatedDate are when the backup was made;
	// ModifiedDate is when the backed-up content had been saved.
	Timestamp    time.Time `json:"timestamp"`
	CreatedDate  time.Time `json:"created_date"`
	ModifiedDate time.Time `json:"modified_date"`
	FileSize     int64     `json:"file_size"`
	FileSizeMB   float64   `json:"file_size_mb"`
	// WorkflowName, NodeCount and Tags describe the content (see
	// Describe).
	WorkflowName string   `json:"workflow_name"`
	NodeCount    int      `json:"node_count"`
	Tags         []string `json:"tags"`
	IsBackup     bool     `json:"is_backup"`
}

// Stats summarises one user's projects.
type Stats struct {
	TotalProjects              int      `json:"total_projects"`
	TotalWorkflows             int      `json:"total_workflows"`
	AverageWorkflowsPerProject float64  `json:"average_workflows_per_project"`
	ProjectNames               []string `json:"project_names"`
	// LargestProject has the most workflows, MostRecentProject the latest
	// last_modified; ties go to the first name in order; "" without
	// projects.
	LargestProject    string `json:"largest_project"`
	MostRecentProject string `json:"most_recent_project"`
}

// Iteration is one modify or iterate step of a workflow (see
// NewIteration).
type Iteration struct {
	WorkflowID  string    `json:"workflow_id"`
	Timestamp   time.Time `json:"timestamp"`
	Description string    `json:"description"`
	// OriginalHash and ModifiedHash are Hash of the documents' bytes.
	OriginalHash uint64 `json:"original_hash"`
	ModifiedHash uint64 `json:"modified_hash"`
	// ChangesSummary is the caller's JSON object, kept byte for byte.
	ChangesSummary json.RawMessage `json:"changes_summary"`
	OriginalSize   int64           `json:"original_size"`
	ModifiedSize   int64           `json:"modified_size"`
}

// Feedback is what a user reported about a workflow.
type Feedback struct {
	WorkflowID   string    `json:"workflow_id"`
	Feedback     string    `json:"feedback"`
	Timestamp    time.Time `json:"timestamp"`
	FeedbackType string    `json:"feedback_type"`
}

// Store keeps the builder's data. Every method takes the owner's id first
// after the context; names are checked (a *NameError) before anything is
// looked up. Lists are empty, not ErrNotFound, for a workflow id without
// history.
type Store interface {
	// CreateProject makes the project and its initial workflows in one
	// step. A name the owner already uses is ErrExists.
	CreateProject(ctx context.Context, ownerID string, p NewProject) (Project, error)
	GetProject(ctx context.Context, ownerID, name string) (Project, error)
	// ListProjects returns the owner's projects in name order.
	ListProjects(ctx context.Context, ownerID string) ([]Project, error)
	// ProjectStats is ComputeStats of ListProjects.
	ProjectStats(ctx context.Context, ownerID string) (Stats, error)
	// UpdateProjectSettings replaces the settings. A lower version limit
	// takes effect at each file's next save, or with CleanupVersions.
	UpdateProjectSettings(ctx context.Context, ownerID, name string, s Settings) (Project, error)
	// DeleteProject removes the project with its workflows and versions.
	DeleteProject(ctx context.Context, ownerID, name string) error

	// SaveWorkflow creates or replaces a file. Replacing keeps the previous
	// content as a version when ShouldBackup says so (named by BackupName),
	// and then removes the file's oldest versions beyond the project's
	// version limit, all in one transaction.
	SaveWorkflow(ctx context.Context, ownerID, project, filename string, data json.RawMessage, createBackup bool) (SaveResult, error)
	GetWorkflow(ctx context.Context, ownerID, project, filename string) (WorkflowFile, error)
	// ListWorkflows returns the project's files in name order, without
	// their data.
	ListWorkflows(ctx context.Context, ownerID, project string) ([]WorkflowFile, error)
	// DeleteWorkflow removes the file and its versions.
	DeleteWorkflow(ctx context.Context, ownerID, project, filename string) error

	// ListVersions returns the file's versions newest first.
	ListVersions(ctx context.Context, ownerID, project, filename string) ([]Version, error)
	GetVersion(ctx context.Context, ownerID, project, filename, version string) (Version, error)
	GetVersionContent(ctx context.Context, ownerID, project, filename, version string) (json.RawMessage, error)
	// RestoreVersion saves the version's content as the file, as
	// SaveWorkflow would (backup and version limit included). The version
	// itself stays.
	RestoreVersion(ctx context.Context, ownerID, project, filename, version string, createBackup bool) (SaveResult, error)
	DeleteVersion(ctx context.Context, ownerID, project, filename, version string) error
	// CleanupVersions removes all but the keep most recent versions and
	// returns how many it removed.
	CleanupVersions(ctx context.Context, ownerID, project, filename string, keep int) (int, error)

	// AddIteration records a step; a zero Timestamp means now.
	AddIteration(ctx context.Context, ownerID string, it Iteration) (Iteration, error)
	// ListIterations returns the workflow's steps oldest first.
	ListIterations(ctx context.Context, ownerID, workflowID string) ([]Iteration, error)
	// AddFeedback records feedback; a zero Timestamp means now.
	AddFeedback(ctx context.Context, ownerID string, f Feedback) (Feedback, error)
	// ListFeedback returns the workflow's feedback oldest first.
	ListFeedback(ctx context.Context, ownerID, workflowID string) ([]Feedback, error)
}
