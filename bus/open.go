// Package bus chooses the live transport between instances from a one-line
// spec, as package storage does for stores. The transports live in
// subpackages: memory (in-process), redis (pub/sub) and postgres
// (LISTEN/NOTIFY); every one passes the contract in bustest.
package bus

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/threadline/threadline/bus/postgres"
	"github.com/threadline/threadline/bus/redis"
	"github.com/threadline/threadline/instanceai"
)

// Forms lists the accepted specs, for help texts and error messages.
const Forms = `"memory" (one process), "redis://HOST:PORT/DB[?channel=NAME]", "postgres[?channel=NAME]" (LISTEN/NOTIFY on the store's database) or "postgres://…[?channel=NAME]" (on that database)`

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
		dsn, channel, err := splitChannel(s)
		if err != nil {
			return nil, err
		}
		return postgres.Open(ctx, dsn, channel)
	}
	return nil, fmt.Errorf("unknown bus %q; want one of %s", s, Forms)
}

// splitChannel takes the bus's own channel parameter out of a PostgreSQL
// URL, whose other parameters are the connection's.
func splitChannel(dsn string) (rest, channel string, err error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", "", fmt.Errorf("bus %q: %w", redact(dsn), err)
	}
	q := u.Query()
	channel = q.Get("channel")
	q.Del("channel")
	u.RawQuery = q.Encode()
	return u.String(), channel, nil
}

// redact hides a URL's password for an error message.
func redact(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return "(a URL that does not parse)"
}
