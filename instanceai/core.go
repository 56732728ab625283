package instanceai

import (
	"context"
	"log/slog"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Core is the front door to the engine: the thread's ordered writer, the
// hub that fans its frames out, the run registry, and the link to the other
// instances when there are several, built and wired to one another once.
// The HTTP surfaces take a Core; none of them builds or connects these
// parts, and none lends another a callback.
type Core struct {
	Store  Store
	Hub    *Hub
	Writer *Writer
	Runs   *Runs
	// Cluster is nil on a single instance (no bus).
	Cluster *Cluster
	log     *slog.Logger
}

// CoreConfig configures NewCore.
type CoreConfig struct {
	// SubscriberQueue bounds each live subscriber's queue (NewHub).
	SubscriberQueue int
	Writer          WriterConfig
	// Bus joins this instance to others; nil for one process.
	Bus Bus
	// Instance names this process among those sharing the store.
	Instance string
	// Lease is how long a run's claim lives without renewal.
	Lease time.Duration
	// PollInterval is the log poll's period while the bus is down.
	PollInterval time.Duration
	Logger       *slog.Logger
	Observer     Observer
}

// NewCore builds the engine over store with agent answering chats.
func NewCore(store Store, agent Agent, cfg CoreConfig) *Core {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Instance == "" {
		cfg.Instance = NewID("inst_")
	}
	c := &Core{Store: store, Hub: NewHub(cfg.SubscriberQueue), log: cfg.Logger}
	var publisher Publisher = c.Hub
	var control Controller
	if cfg.Bus != nil {
		c.Cluster = NewCluster(cfg.Bus, c.Hub, ClusterConfig{Instance: cfg.Instance, PollInterval: cfg.PollInterval, Logger: cfg.Logger})
		publisher, control = c.Cluster, c.Cluster
	}
	wcfg := cfg.Writer
	wcfg.Logger = cfg.Logger
	if cfg.Observer != nil {
		wcfg.Observer = cfg.Observer
	}
	// A run whose events the store refused for good is ended by its
	// registry: the writer reports it, the registry is built after it.
	wcfg.OnRunFailed = func(threadID, runID string, err error) { c.Runs.Fail(threadID, runID, err) }
	c.Writer = NewWriter(store, publisher, wcfg)
	c.Runs = NewRuns(c.Writer, agent, RunsConfig{Logger: cfg.Logger, Confirmations: store, Observer: cfg.Observer,
		Claims: store, Index: store, Instance: cfg.Instance, Lease: cfg.Lease, Control: control})
	if c.Cluster != nil {
		c.Cluster.Attach(c.Runs)
	}
	return c
}

// Title limits: MaxTitle characters after trimming; one derived from the
// first message is cut at DerivedTitle.
const (
	MaxTitle     = 200
	DerivedTitle = 60
)

// SystemAgentID is the agent id of events the server emits on its own
// behalf, such as thread-title-updated.
const SystemAgentID = "system"

// Chat starts a run on thread t for req and records req.Message as the
// thread's user message (titling an untitled thread after it), so that
// every surface's chat shows in /messages, the title and the model's
// history alike. A run that answers a client tool (req.ToolResult) records
// nothing. The errors are Runs.Start's.
func (c *Core) Chat(ctx context.Context, t Thread, req StartRequest) (*Run, error) {
	run, err := c.Runs.Start(req)
	if err != nil {
		return run, err
	}
	if req.ToolResult == nil {
		c.recordMessage(ctx, t, req.UserID, run.ID, req.Message)
	}
	return run, nil
}

// recordMessage stores the user message of a run that just started and, if
// the thread has no title yet, titles it after the message. The run is
// under way whatever happens here, so failures are logged, not returned.
// A client that hangs up at once must not lose its message: the work is
// detached from the request's cancellation.
func (c *Core) recordMessage(ctx context.Context, t Thread, user, runID, message string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := c.Store.AddMessage(ctx, Message{ID: NewID("msg_"), ThreadID: t.ID, RunID: runID, Role: "user", Content: message})
	if err != nil {
		c.log.Error("could not store the user message", "thread", t.ID, "run", runID, "err", err)
	}
	if t.Title != "" {
		return
	}
	if title := DeriveTitle(message); title != "" {
		if err := c.Rename(ctx, t.ID, user, runID, title); err != nil {
			c.log.Error("could not title the thread", "thread", t.ID, "err", err)
		}
	}
}

// Rename stores the thread's new title and appends thread-title-updated to
// its log, in runID (the thread's active run when empty, else a fresh id).
// A missing thread is ErrNotFound.
func (c *Core) Rename(ctx context.Context, threadID, userID, runID, title string) error {
	if err := c.Store.RenameThread(ctx, threadID, title); err != nil {
		return err
	}
	if runID == "" {
		runID = NewID("run_")
		if run := c.Runs.Active(threadID); run != nil {
			runID = run.ID
		}
	}
	ev := Event{Type: TypeThreadTitleUpdated, RunID: runID, AgentID: SystemAgentID,
		UserID: userID, TS: time.Now().UnixMilli(), Payload: &ThreadTitle{Title: title}}
	if err := ev.Validate(); err != nil {
		return err
	}
	if err := c.Writer.Enqueue(threadID, ev); err != nil {
		// Only a closing writer refuses, at shutdown: the rename is stored
		// and shows in the thread list; only the live notice is lost.
		c.log.Warn("thread renamed without a thread-title-updated event", "thread", threadID, "err", err)
	}
	return nil
}

// Feed opens a connection's view of the thread after the cursor.
func (c *Core) Feed(threadID string, after int64) *Feed {
	return OpenFeed(c.Store, c.Hub, threadID, after)
}

// DeriveTitle makes a title of a message's first non-blank line: spaces
// collapsed, at most DerivedTitle characters, cut ones ending in "…".
func DeriveTitle(message string) string {
	var line string
	for l := range strings.Lines(message) {
		if line = strings.Join(strings.FieldsFunc(l, isTitleSpace), " "); line != "" {
			break
		}
	}
	if utf8.RuneCountInString(line) <= DerivedTitle {
		return line
	}
	runes := []rune(line)[:DerivedTitle-1]
	return strings.TrimRightFunc(string(runes), unicode.IsSpace) + "…"
}

func isTitleSpace(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }
