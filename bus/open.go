// Package bus chooses the live transport between instances from a one-line
// spec, as package storage does for stores. The transports live in
// subpackages: memory (in-process), redis (pub/sub) and postgres
// (LISTEN/NOTIFY); every one passes the contract in bustest.
package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/threadline/threadline/bus/postgres"
	"github.com/threadline/threadline/bus/redis"
	"github.com/threadline/threadline/instanceai"
)

// Forms lists the accepted specs, for help texts and error messages.
const Forms = `"memory" (one process), "redis://HOST:PORT/DB[?channel=NAME]", "postgres[?channel=NAME]" (LISTEN/NOTIFY on the store's database) or "postgres://…"`

// Open opens the bus named by spec. "memory" is no bus at all (nil): this
// process is alone, and its hub is the whole fan-out. "postgres" uses the
// store's database, which storeSpec must then name.
func Open(ctx context.Context, spec, storeSpec string) (instanceai.Bus, error) {
	s := strings.TrimSpace(spec)
	lower := strings.ToLower(s)
	switch {
	case lower == "" || lower == "memory":
		return nil, nil
	case strings.HasPrefix(lower, "redis://") || strings.HasPrefix(lower, "rediss://"):
		return redis.Open(ctx, s)
	case lower == "postgres" || lower == "postgresql" || strings.HasPrefix(lower, "postgres?channel="):
		channel := ""
		if i := strings.Index(s, "?channel="); i >= 0 {
			channel = s[i+len("?channel="):]
		}
		st := strings.ToLower(storeSpec)
		if !strings.HasPrefix(st, "postgres://") && !strings.HasPrefix(st, "postgresql://") {
			return nil, errors.New(`bus "postgres" uses the store's database, but the store is not PostgreSQL; name one with postgres://…`)
		}
		return postgres.Open(ctx, storeSpec, channel)
	case strings.HasPrefix(lower, "postgres://") || strings.HasPrefix(lower, "postgresql://"):
		return postgres.Open(ctx, s, "")
	}
	return nil, fmt.Errorf("unknown bus %q; want one of %s", s, Forms)
}
