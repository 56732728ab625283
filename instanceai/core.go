package instanceai

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Core is the front door to the engine: the thread's ordered writer, the
// hub that fans its frames out, the run registry, and the link to the other
// instances when there are several, built and wired to one another once.
// The HTTP surfaces take a Core and use its methods alone: none of them
// builds, connects or reaches into these parts (a surface that read the
// store or started runs past the registry would step around what the core
// guarantees about them), and none lends another a callback.
type Core struct {
	store  Store
	hub    *Hub
	writer *Writer
	runs   *Runs
	// cluster is nil on a single instance (no bus).
	cluster *Cluster
	log     *slog.Logger

	// joined is this instance's record in the store's registry, once Join
	// made it (zero ID: none).
	joined   Instance
	registry InstanceRegistry
	bus      Bus
	lease    time.Duration

	// loops run beside the requests once Start was called (the lease
	// heartbeat, the bus listener); stopLoops ends them at Shutdown.
	loopsCtx  context.Context
	stopLoops context.CancelFunc
	started   bool
	loops     sync.WaitGroup
	topicIdle time.Duration
}

// CoreConfig configures NewCore.
type CoreConfig struct {
	// SubscriberQueue bounds each live subscriber's queue (NewHub).
	SubscriberQueue int
	// SubscriberQueueBytes bounds it in bytes (Hub.LimitQueueBytes).
	SubscriberQueueBytes int
	// Hub, when set, is the hub the core fans frames out through (made
	// with NewHub by a caller that publishes to it or subscribes to it
	// directly, as tests do); nil makes one of SubscriberQueue frames.
	Hub *Hub
	// TopicIdle is how long a thread's published state stays in the hub
	// with nothing to do (Hub.Evict; DefaultTopicIdle when 0).
	TopicIdle time.Duration
	Writer    WriterConfig
	// Limits bound every producer's events (zero: the defaults).
	Limits Limits
	// Bus joins this instance to others; nil for one process.
	Bus Bus
	// Instance names this process among those sharing the store.
	Instance string
	// Lease is how long a run's claim lives without renewal.
	Lease time.Duration
	// PollInterval is the head check's period (see Cluster).
	PollInterval time.Duration
	// BusBroadcast sends every thread's frames to every instance, also on
	// a bus that routes by thread (ClusterConfig.Broadcast).
	BusBroadcast bool
	Logger       *slog.Logger
	Observer     Observer
	// Expired judges a confirmation's expiry (RunsConfig.Expired).
	Expired func(c *Confirmation, now time.Time) (at string, expired bool)
}

// NewCore builds the engine over store with agent answering chats.
func NewCore(store Store, agent Agent, cfg CoreConfig) *Core {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Instance == "" {
		cfg.Instance = NewID("inst_")
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.TopicIdle <= 0 {
		cfg.TopicIdle = DefaultTopicIdle
	}
	if cfg.Hub == nil {
		cfg.Hub = NewHub(cfg.SubscriberQueue)
	}
	c := &Core{store: store, hub: cfg.Hub, log: cfg.Logger, bus: cfg.Bus, lease: cfg.Lease, topicIdle: cfg.TopicIdle}
	c.hub.LimitQueueBytes(cfg.SubscriberQueueBytes)
	c.registry, _ = store.(InstanceRegistry)
	c.loopsCtx, c.stopLoops = context.WithCancel(context.Background())
	var publisher Publisher = c.hub
	var control Controller
	if cfg.Bus != nil {
		c.cluster = NewCluster(cfg.Bus, c.hub, ClusterConfig{Instance: cfg.Instance, PollInterval: cfg.PollInterval, Log: store, Logger: cfg.Logger,
			Broadcast: cfg.BusBroadcast, Observer: cfg.Observer})
		publisher, control = c.cluster, c.cluster
	}
	wcfg := cfg.Writer
	wcfg.Logger = cfg.Logger
	wcfg.Limits = cfg.Limits
	if cfg.Observer != nil {
		wcfg.Observer = cfg.Observer
	}
	// A run whose events the store refused for good is ended by its
	// registry: the writer reports it, the registry is built after it.
	wcfg.OnRunFailed = func(threadID, runID string, err error) { c.runs.Fail(threadID, runID, err) }
	wcfg.OnAgentFailed = func(threadID, runID, agentID string, err error) { c.runs.AgentFailed(threadID, runID, agentID, err) }
	wcfg.OnRunGone = func(threadID, runID string) { c.runs.Gone(threadID, runID) }
	wcfg.OnRunFenced = func(threadID, runID, agentID string) { c.runs.Fenced(threadID, runID, agentID) }
	// Deltas go out live only while the other instances can hear them:
	// one of them may settle this instance's runs from the text it heard
	// over the bus, and a client here must not have been shown more. So
	// they are held while the leases may have run out, and while the bus
	// is lost (a database reset takes the PostgreSQL bus with it). Their
	// text still reaches clients, in its block.
	wcfg.LiveHeld = func() bool { return c.runs.LiveHeld() || (c.cluster != nil && c.cluster.Lost()) }
	c.writer = NewWriter(store, publisher, wcfg)
	c.runs = NewRuns(c.writer, agent, RunsConfig{Logger: cfg.Logger, Confirmations: store, Observer: cfg.Observer,
		Claims: store, Index: store, Instance: cfg.Instance, Lease: cfg.Lease, Control: control, Threads: store,
		Expired: cfg.Expired, Limits: cfg.Limits})
	c.runs.leases.hubText = c.hub.LiveText
	if c.cluster != nil {
		c.cluster.HoldDeltas(c.runs.LiveHeld)
	}
	if c.registry != nil {
		c.runs.leases.peers = c.registry.LiveInstances
	}
	if c.cluster != nil && c.cluster.Routed() {
		c.runs.leases.heardRun = c.hub.HeardRun
	}
	if c.cluster != nil {
		c.cluster.Attach(c.runs)
	}
	return c
}

// SystemAgentID is the agent id of events the server emits on its own
// behalf, such as thread-title-updated.
const SystemAgentID = "system"

// Chat starts a run on thread t for req and records req.Message as the
// thread's user message (titling an untitled thread after it), so that
// every surface's chat shows in /messages, the title and the model's
// history alike. A run that answers a client tool (req.ToolResult) records
// nothing. The errors are Runs.Start's.
func (c *Core) Chat(ctx context.Context, t Thread, req StartRequest) (*Run, error) {
	if !req.Trace.IsValid() {
		req.Trace = trace.SpanContextFromContext(ctx)
	}
	if req.ToolResult != nil {
		return c.runs.Start(req)
	}
	return c.runs.start(req, func(run *Run) { c.recordMessage(ctx, t, req.UserID, run.ID, req.Message, req.Attachments) })
}

// StartRun starts a run on the thread for req and records no user
// message: for work that carries no message of a person (a producer
// outside Threadline that drives the run itself, say). req.Trace is the
// caller's to set. The errors are Runs.Start's.
func (c *Core) StartRun(req StartRequest) (*Run, error) { return c.runs.Start(req) }

// recordMessage stores the user message of a run that is starting and, if
// the thread has no title yet, titles it after the message. The run is
// under way whatever happens here, so failures are logged, not returned.
// A client that hangs up at once must not lose its message: the work is
// detached from the request's cancellation.
func (c *Core) recordMessage(ctx context.Context, t Thread, user, runID, message string, attachments []Attachment) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := c.store.AddMessage(ctx, Message{ID: NewID("msg_"), ThreadID: t.ID, RunID: runID, Role: "user", Content: message, Attachments: attachments})
	if err != nil {
		c.log.Error("could not store the user message", "thread", t.ID, "run", runID, "err", err)
	}
	if t.Title != "" {
		return
	}
	if message == "" && len(attachments) > 0 {
		// A message of files alone is titled after its first file.
		message = attachments[0].FileName
	}
	if title := DeriveTitle(message); title != "" {
		if err := c.Rename(ctx, t.ID, user, runID, title); err != nil {
			c.log.Error("could not title the thread", "thread", t.ID, "err", err)
		}
	}
}

// Rename stores the thread's new title and appends thread-title-updated to
// its log, in runID (the thread's active run when empty, else a fresh id).
// A missing thread is *ThreadNotFoundError.
func (c *Core) Rename(ctx context.Context, threadID, userID, runID, title string) error {
	if err := c.store.RenameThread(ctx, threadID, title); err != nil {
		if errors.Is(err, ErrNotFound) {
			return &ThreadNotFoundError{ThreadID: threadID}
		}
		return err
	}
	if runID == "" {
		runID = NewID("run_")
		if run := c.runs.Active(threadID); run != nil {
			runID = run.ID
		}
	}
	ev := Event{Type: TypeThreadTitleUpdated, RunID: runID, AgentID: SystemAgentID,
		UserID: userID, TS: time.Now().UnixMilli(), Payload: &ThreadTitle{Title: title}}
	if err := ev.Validate(); err != nil {
		return err
	}
	if err := c.writer.Enqueue(threadID, ev); err != nil {
		// Only a closing writer refuses, at shutdown: the rename is stored
		// and shows in the thread list; only the live notice is lost.
		c.log.Warn("thread renamed without a thread-title-updated event", "thread", threadID, "err", err)
	}
	return nil
}

// followWait bounds Follow's wait for the bus.
const followWait = 2 * time.Second

// Follow makes this instance receive the thread's live frames from the
// other instances, if the bus routes by thread, and waits (up to 2 s; not
// while the bus listener is down) until the bus confirmed it: a stream
// opened after it misses nothing of a run that another instance starts
// once the client saw the stream open. A bus that does not confirm in
// time only delays the frames: the head check reads what it missed from
// the log.
func (c *Core) Follow(ctx context.Context, threadID string) {
	if c.cluster == nil || !c.cluster.Routed() {
		return
	}
	c.hub.Watch(threadID)
	if !c.cluster.Up() {
		return // followed once the listener is back, which a wait would not hasten
	}
	ctx, cancel := context.WithTimeout(ctx, followWait)
	defer cancel()
	_ = c.cluster.AwaitFollow(ctx, threadID)
}

// Feed opens a connection's view of the thread after the cursor.
func (c *Core) Feed(threadID string, after int64) *Feed {
	return OpenFeed(c.store, c.hub, threadID, after)
}

// LiveFeed opens a feed of the thread from the log's end, registered
// before the caller starts a run on it, so that it gets every frame of
// that run (see OpenLiveFeed); its Last is the log's end.
func (c *Core) LiveFeed(ctx context.Context, threadID string) (*Feed, error) {
	c.Follow(ctx, threadID)
	return OpenLiveFeed(ctx, c.store, c.hub, threadID)
}

// Thread returns the thread if userID owns it; a missing thread, another
// user's and one outside the context's thread limit (WithThreadLimit) are
// all *ThreadNotFoundError.
func (c *Core) Thread(ctx context.Context, threadID, userID string) (Thread, error) {
	if !ThreadAllowed(ctx, threadID) {
		return Thread{}, &ThreadNotFoundError{ThreadID: threadID}
	}
	t, err := c.store.GetThread(ctx, threadID)
	if errors.Is(err, ErrNotFound) || (err == nil && t.OwnerID != userID) {
		return Thread{}, &ThreadNotFoundError{ThreadID: threadID}
	}
	return t, err
}

// OpenThread returns the thread, creating it for userID when it does not
// exist yet (a chat on a new id starts a thread); another user's thread,
// and one outside the context's thread limit, is *ThreadNotFoundError.
func (c *Core) OpenThread(ctx context.Context, threadID, userID string) (Thread, error) {
	if !ThreadAllowed(ctx, threadID) {
		// Checked first: a request limited to other threads creates none.
		return Thread{}, &ThreadNotFoundError{ThreadID: threadID}
	}
	t, _, err := c.store.EnsureThread(ctx, Thread{ID: threadID, OwnerID: userID})
	if err != nil {
		return Thread{}, err
	}
	if t.OwnerID != userID {
		return Thread{}, &ThreadNotFoundError{ThreadID: threadID}
	}
	return t, nil
}

// EnsureThread creates thread t unless a thread has its id, and returns
// the stored thread; created reports whether this call made it. Unlike
// OpenThread it leaves the stored owner to the caller to compare, for a
// surface that answers another user's id otherwise than not found.
func (c *Core) EnsureThread(ctx context.Context, t Thread) (stored Thread, created bool, err error) {
	return c.store.EnsureThread(ctx, t)
}

// Sync waits until every event queued for the thread before the call is
// stored and published (or dropped after a failure).
func (c *Core) Sync(ctx context.Context, threadID string) error { return c.writer.Sync(ctx, threadID) }

// Cancel stops the thread's active run and its background agents, here
// and on the instance that runs them, and says whether the work stopped
// (Applied) or only the request is recorded (Accepted); see
// Runs.Cancel.
func (c *Core) Cancel(threadID string) (ControlOutcome, error) {
	_, outcome, err := c.runs.Cancel(threadID, ReasonUserCancelled)
	return outcome, err
}

// Answer answers the confirmation requestID for userID and returns its run
// id and whether the run took the answer (see Runs.Answer).
func (c *Core) Answer(ctx context.Context, userID, requestID string, a Answer) (string, ControlOutcome, error) {
	return c.runs.Answer(ctx, userID, requestID, a)
}

// Status reports the thread's activity (see Runs.Status).
func (c *Core) Status(ctx context.Context, threadID string) ThreadStatus {
	return c.runs.Status(ctx, threadID)
}

// Active returns the thread's active run in this process, if any.
func (c *Core) Active(threadID string) *Run { return c.runs.Active(threadID) }

// LiveRuns returns the ids of the thread's runs live in this process.
func (c *Core) LiveRuns(threadID string) []string { return c.runs.LiveRuns(threadID) }

// Awaited returns the confirmations the thread's run waits for.
func (c *Core) Awaited(ctx context.Context, threadID string) ([]Confirmation, error) {
	return c.runs.Awaited(ctx, threadID)
}

// ActiveRuns counts the runs working in this process.
func (c *Core) ActiveRuns() int { return c.runs.Count() }

// Draining reports whether Drain began: new runs are refused.
func (c *Core) Draining() bool { return c.runs.Draining() }

// Archive sets the thread's archived flag (ThreadStore.ArchiveThread). A
// missing thread is *ThreadNotFoundError.
func (c *Core) Archive(ctx context.Context, threadID string, archived bool) error {
	err := c.store.ArchiveThread(ctx, threadID, archived)
	if errors.Is(err, ErrNotFound) {
		return &ThreadNotFoundError{ThreadID: threadID}
	}
	return err
}

// QuiesceTimeout bounds how long DeleteThread waits for cancelled agents.
const QuiesceTimeout = 5 * time.Second

// DeleteThread cancels the thread's run and background agents, waits until
// they stopped and the writer stored what they queued last (run-finish,
// agent-completed), deletes the thread with its log, messages and
// confirmations, and ends the thread's open streams. Without the wait, a
// late event would be appended after the delete, or to a new thread that
// took the id. While it works, no run starts on the thread here (Start
// gives *ThreadNotFoundError); a run another instance starts meanwhile has
// its first refused append stop it (see Runs.Gone). A missing thread is
// *ThreadNotFoundError.
func (c *Core) DeleteThread(ctx context.Context, threadID string) error {
	defer c.runs.beginDelete(threadID)()
	// The deletion is the database's: work of the thread on another
	// instance stops when its row goes with the thread (its next renewal
	// finds it gone), whatever this cancel came to.
	_, _, _ = c.runs.Cancel(threadID, ReasonUserCancelled)
	if err := c.quiesce(ctx, threadID); err != nil {
		return err
	}
	if err := c.writer.Sync(ctx, threadID); err != nil {
		return err
	}
	if err := c.store.DeleteThread(ctx, threadID); err != nil {
		if errors.Is(err, ErrNotFound) {
			return &ThreadNotFoundError{ThreadID: threadID}
		}
		return err
	}
	// A run that started while the deletion went on may have committed a
	// batch just before it: the hub forgets the thread once that batch is
	// published, or it would hold the deleted thread's seqs for a thread
	// made again under the same id.
	if err := c.writer.Sync(ctx, threadID); err != nil {
		return err
	}
	c.hub.Forget(threadID)
	c.runs.ThreadDeleted(threadID)
	return nil
}

// ThreadsPruned ends the open streams of threads deleted by the retention
// policy, here and on the other instances, as DeleteThread does after its
// delete, so that the hub does not keep their seqs for a thread made again
// under the same id. The policy deletes only threads without work, so no
// run is stopped.
func (c *Core) ThreadsPruned(ids []string) {
	for _, id := range ids {
		c.hub.Forget(id)
		c.runs.ThreadDeleted(id)
	}
}

// quiesce waits until no run of the thread is live in this process: a
// cancelled background agent settles its tool calls and queues its
// agent-completed when its work returns, a moment after the cancel. An
// agent that ignores cancellation is not waited for beyond QuiesceTimeout.
func (c *Core) quiesce(ctx context.Context, threadID string) error {
	wctx, cancel := context.WithTimeout(ctx, QuiesceTimeout)
	defer cancel()
	err := c.runs.Wait(wctx, threadID)
	if err != nil && ctx.Err() == nil {
		c.log.Warn("deleting a thread whose agents did not stop in time", "thread", threadID,
			"runs", c.runs.LiveRuns(threadID))
		return nil
	}
	return err
}

// Join records this instance in the store's registry of serving processes
// (a store several processes share keeps one) and checks that it may serve
// beside the live instances there (see CheckBus): it returns the
// *BusConflictError otherwise, having removed its record. gone reports a
// recorded instance that is known dead although its lease has not run out
// (a process of this host that no longer runs): it is left out, and its
// record removed. Start renews the record; Shutdown removes it. Call Join
// once, before Start.
func (c *Core) Join(ctx context.Context, host string, pid int, gone func(Instance) bool) error {
	if c.registry == nil {
		return nil
	}
	self := Instance{ID: c.runs.Instance(), Bus: MemoryBus, Host: host, PID: pid}
	if id, ok := c.bus.(BusIdentifier); ok {
		name, err := id.Identity(ctx)
		if err != nil {
			return fmt.Errorf("name the bus: %w", err)
		}
		self.Bus = name
	} else if c.bus != nil {
		self.Bus = fmt.Sprintf("%T", c.bus)
	}
	others, err := c.registry.RegisterInstance(ctx, self, c.lease)
	if err != nil {
		return err
	}
	live := others[:0]
	for _, o := range others {
		if gone != nil && gone(o) {
			if err := c.registry.RemoveInstance(ctx, o.ID); err != nil {
				return err
			}
			continue
		}
		live = append(live, o)
	}
	if err := CheckBus(self, live); err != nil {
		if rerr := c.registry.RemoveInstance(ctx, self.ID); rerr != nil {
			c.log.Warn("could not remove this instance's record", "err", rerr)
		}
		return err
	}
	c.joined = self
	c.log.Info("joined the instances on this store", "instance", self.ID, "bus", self.Bus, "others", len(live))
	return nil
}

// renewJoin keeps this instance's record live until ctx ends.
func (c *Core) renewJoin(ctx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rctx, cancel := context.WithTimeout(ctx, c.lease/2)
		err := c.registry.RenewInstance(rctx, c.joined.ID, c.lease)
		cancel()
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			c.log.Warn("could not renew this instance's record", "err", err)
			failing = true
		case err == nil:
			failing = false
		}
	}
}

// Start begins the work that runs beside the requests: the heartbeat that
// renews this instance's run leases every renew and settles the runs of
// dead instances, and the bus listener. Shutdown ends it; calling Start
// again does nothing.
func (c *Core) Start(renew time.Duration) {
	if c.started {
		return
	}
	c.started = true
	c.loops.Go(func() { c.runs.Maintain(c.loopsCtx, renew) })
	c.loops.Go(func() { c.evictIdle(c.loopsCtx) })
	if c.joined.ID != "" {
		c.loops.Go(func() { c.renewJoin(c.loopsCtx, renew) })
	}
	if c.cluster != nil {
		c.loops.Go(func() {
			if err := c.cluster.Run(c.loopsCtx); err != nil && c.loopsCtx.Err() == nil {
				c.log.Error("bus listener stopped", "err", err)
			}
		})
	}
}

// evictIdle drops idle threads' state from the hub (Hub.Evict) until ctx
// ends: the threads' writer drains retire by themselves.
func (c *Core) evictIdle(ctx context.Context) {
	tick := time.NewTicker(c.topicIdle / 2)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			c.hub.Evict(c.topicIdle)
		}
	}
}

// Sweep settles the runs a crashed process left open, those with no live
// claim (see Runs.Sweep), and returns how many. Call it once at start,
// after the listener is bound (a process that cannot serve must not touch
// runs) and before serving.
func (c *Core) Sweep(ctx context.Context) (int, error) {
	return c.runs.Sweep(ctx, c.store)
}

// Drain refuses new runs (ErrDraining) and waits until the runs working
// here finished or ctx ends; it returns how many still work.
func (c *Core) Drain(ctx context.Context) int { return c.runs.Drain(ctx) }

// Shutdown cancels the active runs (run-finish cancelled, reason
// service_shutdown; runs waiting for approval stay suspended), flushes
// every open segment to the log, and stops the work Start began. The open
// streams are the caller's to end afterwards, when they carry each run's
// last events. It does not close the store.
func (c *Core) Shutdown(ctx context.Context) error {
	var errs []error
	if err := c.runs.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("runs shutdown: %w", err))
	}
	if err := c.writer.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	c.stopLoops()
	c.loops.Wait()
	if c.joined.ID != "" {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if err := c.registry.RemoveInstance(rctx, c.joined.ID); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	return errors.Join(errs...)
}
