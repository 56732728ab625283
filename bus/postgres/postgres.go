// Package postgres is an instanceai.Bus on PostgreSQL's LISTEN/NOTIFY, on
// the database the store already uses, through github.com/jackc/pgx/v5
// (lib/pq, which the store uses, is in maintenance mode; its listener is
// not what new code should rest on).
//
// NOTIFY payloads are text under 8,000 bytes: MaxPayload says so and the
// core splits or skips what is larger (a skipped frame makes the other
// instances re-read their log). Payloads must be UTF-8 without NUL bytes;
// the core sends JSON, which is.
package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultChannel is the notification channel when none is named.
const DefaultChannel = "threadline"

// maxPayload is NOTIFY's limit (8,000 bytes) less a margin.
const maxPayload = 7900

// healthEvery is how long a quiet listener waits before it pings.
const healthEvery = 5 * time.Second

var channelPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// Bus is a LISTEN/NOTIFY bus.
type Bus struct {
	dsn     string
	channel string
	pool    *pgxpool.Pool
}

// Open connects to the database at dsn (a postgres:// URL as the store
// takes it) for notifications on channel ("" for DefaultChannel).
func Open(ctx context.Context, dsn, channel string) (*Bus, error) {
	if channel == "" {
		channel = DefaultChannel
	}
	if !channelPattern.MatchString(channel) {
		return nil, fmt.Errorf("postgres bus: channel %q: use letters, digits and _ (at most 63, not starting with a digit)", channel)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres bus: %w", err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres bus: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres bus: connect: %w", err)
	}
	return &Bus{dsn: dsn, channel: channel, pool: pool}, nil
}

// Publish implements instanceai.Bus.
func (b *Bus) Publish(ctx context.Context, payload []byte) error {
	if len(payload) > maxPayload {
		return fmt.Errorf("postgres bus: payload of %d bytes is over NOTIFY's limit of %d", len(payload), maxPayload)
	}
	if !utf8.Valid(payload) || bytes.IndexByte(payload, 0) >= 0 {
		return errors.New("postgres bus: payload must be UTF-8 text without NUL bytes")
	}
	if _, err := b.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, b.channel, string(payload)); err != nil {
		return fmt.Errorf("postgres bus: notify: %w", err)
	}
	return nil
}

// MaxPayload implements instanceai.Bus.
func (b *Bus) MaxPayload() int { return maxPayload }

// Listen implements instanceai.Bus.
func (b *Bus) Listen(ctx context.Context, deliver func([]byte), state func(up bool, err error)) error {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := b.listenOnce(ctx, deliver, state, &backoff)
		if ctx.Err() != nil {
			return nil
		}
		state(false, err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 2*time.Second)
	}
	return nil
}

func (b *Bus) listenOnce(ctx context.Context, deliver func([]byte), state func(bool, error), backoff *time.Duration) error {
	cfg, err := pgx.ParseConfig(b.dsn)
	if err != nil {
		return fmt.Errorf("postgres bus: %w", err)
	}
	cfg.RuntimeParams["application_name"] = "threadline-bus-listen"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("postgres bus: connect listener: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{b.channel}.Sanitize()); err != nil {
		return fmt.Errorf("postgres bus: listen: %w", err)
	}
	*backoff = 100 * time.Millisecond
	state(true, nil)
	for {
		wctx, cancel := context.WithTimeout(ctx, healthEvery)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err == nil {
			deliver([]byte(n.Payload))
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("postgres bus: wait: %w", err)
		}
		// Quiet: prove the connection is alive.
		pctx, cancel := context.WithTimeout(ctx, healthEvery)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			return fmt.Errorf("postgres bus: ping: %w", err)
		}
	}
}

// Close implements instanceai.Bus.
func (b *Bus) Close() error {
	b.pool.Close()
	return nil
}
