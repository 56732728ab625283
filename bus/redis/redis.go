// Package redis is an instanceai.Bus on Redis pub/sub (PUBLISH and
// SUBSCRIBE on one channel), through github.com/redis/go-redis/v9.
//
// Pub/sub delivers at most once: a subscriber that loses its connection
// misses what was published meanwhile. Listen therefore owns its
// subscription and, on any error, reports the loss and subscribes anew,
// rather than letting the client reconnect silently; the core then
// re-reads its log.
package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// DefaultChannel is the pub/sub channel when the URL names none.
const DefaultChannel = "threadline"

// pingEvery is how long a quiet subscription waits before it pings, so
// that a dead connection is noticed within about twice that.
const pingEvery = 3 * time.Second

var channelPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`)

// Bus is a Redis pub/sub bus.
type Bus struct {
	client  *goredis.Client
	channel string
}

// Open connects to redis://[user:password@]HOST:PORT/DB[?channel=NAME] and
// checks that Redis answers. Pub/sub channels are global to a Redis
// server whatever the DB number, so instances that must not hear each
// other need different channels, not different DBs.
func Open(ctx context.Context, rawURL string) (*Bus, error) {
	opts, channel, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	client := goredis.NewClient(opts)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		client.Close()
		return nil, fmt.Errorf("redis bus: %s does not answer: %w", opts.Addr, err)
	}
	return &Bus{client: client, channel: channel}, nil
}

// ParseURL reads a bus URL into client options and the channel name.
func ParseURL(rawURL string) (*goredis.Options, string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, "", fmt.Errorf("redis bus: bad URL: %w", err)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, "", fmt.Errorf("redis bus: URL scheme %q, want redis:// or rediss://", u.Scheme)
	}
	if _, port, err := net.SplitHostPort(u.Host); err != nil || port == "" {
		return nil, "", fmt.Errorf("redis bus: URL %q needs HOST:PORT", u.Redacted())
	}
	channel := DefaultChannel
	q := u.Query()
	if q.Has("channel") {
		channel = q.Get("channel")
		q.Del("channel")
		u.RawQuery = q.Encode()
	}
	if !channelPattern.MatchString(channel) {
		return nil, "", fmt.Errorf("redis bus: channel %q: use letters, digits and _.:- (at most 128)", channel)
	}
	opts, err := goredis.ParseURL(u.String())
	if err != nil {
		return nil, "", fmt.Errorf("redis bus: %w", err)
	}
	return opts, channel, nil
}

// Publish implements instanceai.Bus.
func (b *Bus) Publish(ctx context.Context, payload []byte) error {
	if err := b.client.Publish(ctx, b.channel, payload).Err(); err != nil {
		return fmt.Errorf("redis bus: publish: %w", err)
	}
	return nil
}

// MaxPayload implements instanceai.Bus: Redis takes values up to 512 MB.
func (b *Bus) MaxPayload() int { return 0 }

// Listen implements instanceai.Bus.
func (b *Bus) Listen(ctx context.Context, deliver func([]byte), state func(up bool, err error)) error {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := b.listenOnce(ctx, deliver, state, &backoff)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, goredis.ErrClosed) {
			return fmt.Errorf("redis bus: closed")
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

// listenOnce runs one subscription until it fails.
func (b *Bus) listenOnce(ctx context.Context, deliver func([]byte), state func(bool, error), backoff *time.Duration) error {
	ps := b.client.Subscribe(ctx, b.channel)
	defer ps.Close()
	// A blocked read does not watch ctx; closing the subscription ends it.
	stop := context.AfterFunc(ctx, func() { ps.Close() })
	defer stop()
	pinged := false
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		msg, err := ps.ReceiveTimeout(ctx, pingEvery)
		var nerr net.Error
		if errors.As(err, &nerr) && nerr.Timeout() {
			if pinged {
				return errors.New("redis bus: no answer to a ping")
			}
			// Quiet: a ping proves the connection within the next wait.
			if err := ps.Ping(ctx); err != nil {
				return fmt.Errorf("redis bus: ping: %w", err)
			}
			pinged = true
			continue
		}
		if err != nil {
			return fmt.Errorf("redis bus: receive: %w", err)
		}
		pinged = false
		switch m := msg.(type) {
		case *goredis.Subscription:
			if m.Kind == "subscribe" {
				*backoff = 100 * time.Millisecond
				state(true, nil)
			}
		case *goredis.Message:
			deliver([]byte(m.Payload))
		}
	}
}

// Close implements instanceai.Bus.
func (b *Bus) Close() error { return b.client.Close() }
