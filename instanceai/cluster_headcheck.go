package instanceai

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"
)

// HeadReader is implemented by an EventLog that reads the heads of many
// threads at once: the highest committed seq of each existing thread
// among ids (a missing thread is absent from the answer). The cluster's
// head check uses it.
type HeadReader interface {
	Heads(ctx context.Context, threadIDs []string) (map[string]int64, error)
}

// headCheck reads the log's head of the threads this instance streams and
// publishes into the hub the rows its bus did not deliver (see Cluster):
// every interval for the threads that went quiet or came with a gap, and
// at once for the threads asked for (a reconnection of the listener, a
// resync notice, a confirmed follow).
type headCheck struct {
	hub      *Hub
	log      EventLog
	reader   HeadReader // nil: the log reads no heads, and no check runs
	interval time.Duration
	logger   *slog.Logger

	mu sync.Mutex
	// asked are the threads to check now, every thread with subscribers
	// when askedAll; wake signals the check's goroutine.
	asked    map[string]bool
	askedAll bool
	wake     chan struct{}
}

func newHeadCheck(hub *Hub, log EventLog, interval time.Duration, logger *slog.Logger) *headCheck {
	h := &headCheck{hub: hub, log: log, interval: interval, logger: logger,
		asked: map[string]bool{}, wake: make(chan struct{}, 1)}
	h.reader, _ = log.(HeadReader)
	return h
}

// request asks the head check to look at the threads now.
func (h *headCheck) request(threadIDs ...string) {
	h.mu.Lock()
	for _, t := range threadIDs {
		h.asked[t] = true
	}
	h.mu.Unlock()
	notify(h.wake)
}

// requestAll asks the head check to look at every thread with
// subscribers now.
func (h *headCheck) requestAll() {
	h.mu.Lock()
	h.askedAll = true
	h.mu.Unlock()
	notify(h.wake)
}

// run checks every interval, and at once when asked, until ctx ends.
func (h *headCheck) run(ctx context.Context) {
	if h.reader == nil {
		return
	}
	tick := time.NewTicker(h.interval)
	defer tick.Stop()
	failing := false
	for {
		var threads []string
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			threads = h.hub.Behind(h.interval)
		case <-h.wake:
			h.mu.Lock()
			all := h.askedAll
			for t := range h.asked {
				threads = append(threads, t)
			}
			h.askedAll, h.asked = false, map[string]bool{}
			h.mu.Unlock()
			if all {
				threads = h.hub.Behind(0)
			}
		}
		err := h.checkHeads(ctx, threads)
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			h.logger.Warn("the head check cannot read the log; retrying", "err", err)
			failing = true
		case err == nil && failing:
			h.logger.Info("the head check reads the log again")
			failing = false
		}
	}
}

// checkHeads reads the heads of threads in the log and, for each thread
// whose head is past what the hub published, publishes the rows it
// missed; a thread that is gone has its subscribers ended.
func (h *headCheck) checkHeads(ctx context.Context, threads []string) error {
	if len(threads) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, max(h.interval, 2*time.Second))
	defer cancel()
	// What the hub published is read before the heads: a log only grows,
	// so a head below it means the thread was deleted. Read after, it
	// could include rows committed while the heads were read (a slow read
	// on a busy database), and a live thread would be taken for deleted.
	published := make(map[string]int64, len(threads))
	for _, t := range threads {
		published[t] = h.hub.Committed(t)
	}
	heads, err := h.reader.Heads(ctx, threads)
	if err != nil {
		return err
	}
	for _, t := range threads {
		head, ok := heads[t]
		if !ok || head < published[t] {
			// Gone, or deleted and made again under the same id (the hub
			// holds seqs its log never had): its subscribers end, and
			// the thread starts afresh here.
			h.hub.Forget(t)
			continue
		}
		if err := h.catchUp(ctx, t, head); err != nil {
			return err
		}
	}
	return nil
}

// catchUp publishes into the hub the rows of the thread after those it was
// published without a gap, up to head: its last page of them at most,
// since the subscribers read any earlier gap from the log themselves.
func (h *headCheck) catchUp(ctx context.Context, threadID string, head int64) error {
	from := h.hub.Contiguous(threadID)
	if head <= from {
		return nil
	}
	rows, err := h.log.ReadAfter(ctx, threadID, max(from, head-replayPage), replayPage)
	if err != nil {
		return err
	}
	frames := make([]Frame, 0, len(rows))
	for i := range rows {
		r := &rows[i]
		if r.Seq > head {
			break
		}
		data := r.Data
		if len(data) == 0 {
			if data, err = json.Marshal(&r.Event); err != nil {
				return err
			}
		}
		frames = append(frames, EncodedFrame(r.Seq, &r.Event, data))
	}
	h.hub.CaughtUp(threadID, frames, head)
	return nil
}
