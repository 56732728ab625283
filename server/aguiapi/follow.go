package aguiapi

import (
	"context"
	"github.com/threadline/threadline/instanceai"
	"log/slog"

	"github.com/threadline/threadline/agui"
	"github.com/threadline/threadline/mapping"
	"github.com/threadline/threadline/server/internal/follow"
)

// follow writes one instance-ai run of the thread, from the cursor on, as
// AG-UI events until the mapper's terminal event: the live part of both
// /run-agent and the rejoin stream (see follow.Stream.Run for gone).
func (h *Handler) follow(ctx context.Context, out *writer, threadID, runID string, after int64,
	m *mapping.InstanceToAGUI, log *slog.Logger, feed *instanceai.Feed) (gone bool) {
	return follow.Stream[agui.Event]{Core: h.core, ThreadID: threadID, RunID: runID, Mapper: m, Out: out.s,
		Write: out.write, Heartbeat: h.cfg.Heartbeat, Log: log, Feed: feed}.Run(ctx, after)
}
