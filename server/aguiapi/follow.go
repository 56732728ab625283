package aguiapi

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/mapping"
)

// follow writes one instance-ai run of the thread, read from its feed after
// the cursor, as AG-UI events until the mapper's terminal event. It is the
// live part of both /run-agent and the rejoin stream. gone reports that the
// client went away before the terminal event (a failed write or the
// request's end), so the caller may act for a run nobody watches; a source
// failure or an eviction reset ends the stream with the mapper's RUN_ERROR
// and is not gone.
func (h *Handler) follow(ctx context.Context, out *writer, threadID, runID string, after int64,
	m *mapping.InstanceToAGUI, log *slog.Logger) (gone bool) {
	feed := h.core.Feed(threadID, after)
	defer func() { feed.Close() }()
	ping := time.NewTicker(h.cfg.Heartbeat)
	defer ping.Stop()
	for !m.Finished() {
		batch, err := feed.Next(ctx, ping.C)
		if err != nil {
			if ctx.Err() != nil {
				return true
			}
			if errors.Is(err, instanceai.ErrSubscriberDropped) {
				// Fell behind the live tail: the log has every durable
				// event, so pick up again from the cursor.
				last := feed.Last()
				feed.Close()
				feed = h.core.Feed(threadID, last)
				continue
			}
			log.Warn("AG-UI stream source failed", "err", err)
			return out.write(0, m.Close(err)) != nil || out.s.Flush() != nil
		}
		if batch == nil {
			if out.s.Ping() != nil {
				return true
			}
			continue
		}
		for _, d := range batch {
			if d.Reset != nil {
				// The events between the cursor and the rest are gone:
				// no AG-UI sequence can bridge them, so the run ends here.
				log.Warn("AG-UI stream reset: events evicted", "next", d.Reset.NextEventID)
				if out.write(0, m.Close(d.Reset)) == nil {
					_ = out.s.Flush()
				}
				return false
			}
			if d.Event == nil || d.Event.RunID != runID {
				continue
			}
			if err := out.write(d.ID, m.Push(*d.Event)); err != nil {
				return true
			}
		}
		if err := out.s.Flush(); err != nil {
			return !m.Finished()
		}
		ping.Reset(h.cfg.Heartbeat)
	}
	return false
}
