// Package redis is an instanceai.Bus on Redis pub/sub: PUBLISH and
// SUBSCRIBE on one channel, through github.com/redis/go-redis/v9, and an
// instanceai.RoutedBus on sharded pub/sub: each topic (a thread) is a
// channel of its own, NAME:t:TOPIC, published with SPUBLISH and followed
// with SSUBSCRIBE, so that an instance receives only the threads it
// serves (sharded channels, Redis 7.0 or later, are also what a Redis
// Cluster routes to one shard instead of every node).
//
// Pub/sub delivers at most once: a subscriber that loses its connection
// misses what was published meanwhile. go-redis hides that loss (its
// PubSub reconnects and resubscribes by itself, and its Channel API
// swallows the error), so Listen does not use Channel: it owns one
// subscription per connection, reports every end of one through its state
// callback before it subscribes anew, and pings a quiet connection so that
// a dead one is noticed too. The core then re-reads its log.
package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/threadline/threadline/bus/internal/netbus"
	"github.com/threadline/threadline/instanceai"
)

// DefaultChannel is the pub/sub channel when the URL names none.
const DefaultChannel = "threadline"

// maxPayload bounds what Publish takes. Redis itself takes 512 MB, but it
// disconnects a subscriber whose unsent output passes its pub/sub limit
// (client-output-buffer-limit pubsub, 32 MB by default, or 8 MB for a
// minute): one huge payload would cut every listener at once. The core
// sends what is larger through the log instead.
const maxPayload = 1 << 20

const (
	// openTimeout bounds Open's PING when ctx has no earlier deadline.
	openTimeout = 5 * time.Second
	// pingEvery is how long a quiet subscription waits before it pings,
	// and pongWait how long it then waits for anything at all: a dead
	// connection is noticed within their sum, without TCP keepalives.
	pingEvery = 2 * time.Second
	pongWait  = 3 * time.Second
)

var (
	// ErrClosed is returned by Publish and Listen once the bus is closed.
	ErrClosed = errors.New("redis bus: closed")
	// ErrTooLarge is returned by Publish for a payload over MaxPayload.
	ErrTooLarge = errors.New("redis bus: payload too large")
)

// channelName is what Open accepts as a channel: printable, no spaces,
// so that it reads the same in logs, redis-cli and URLs.
var channelName = regexp.MustCompile(`^[A-Za-z0-9_.:{}-]{1,128}$`)

// Bus is a Redis pub/sub bus. Its methods are safe for concurrent use.
type Bus struct {
	pub *goredis.Client // PUBLISH, through go-redis's pool
	sub *goredis.Client // one dedicated connection per subscription
	// listenName is the CLIENT SETNAME of b's subscriptions, unique per
	// Bus, so that an operator (or a test) can tell instances apart.
	listenName string
	channel    string
	prefix     string // of the topics' channels: channel + ":t:"
	// pingEvery and pongWait are the constants of the same names; tests
	// shorten them.
	pingEvery, pongWait time.Duration

	base *netbus.Base

	mu sync.Mutex
	// topics is the set of followed topics, by channel name.
	topics map[string]bool
	// live is the running session, nil between sessions.
	live *session
}

// session is one subscription connection and the Follow calls waiting
// for the server's confirmation on it.
type session struct {
	ps *goredis.PubSub
	// pending are the confirmations awaited, by channel; guarded by the
	// bus's mu.
	pending map[string][]chan struct{}
	// done is closed when the session ends.
	done chan struct{}
}

// errNotListening is what Follow returns while no listener is connected.
var errNotListening = errors.New("redis bus: not connected; the topics are followed at the next connection")

// topicChannel is the sharded channel of a topic.
func (b *Bus) topicChannel(topic string) string { return b.prefix + topic }

func (b *Bus) topicChannels(topics []string) []string {
	chans := make([]string, len(topics))
	for i, t := range topics {
		chans[i] = b.topicChannel(t)
	}
	return chans
}

// Open connects to the Redis server at
//
//	redis://[user:password@]HOST[:PORT][/DB][?channel=NAME&OPTION=VALUE...]
//
// (rediss:// for TLS; PORT defaults to 6379) and checks with a PING that
// it answers, so that a wrong address fails at start-up rather than in the
// first Publish. NAME is the pub/sub channel, DefaultChannel if omitted:
// letters, digits and _.:{}- (at most 128). Other options are go-redis's
// (dial_timeout, pool_size, ...). Pub/sub channels are global to a Redis
// server whatever the DB number, so deployments that share a server must
// use different channels, not different DBs. max_retries is ignored:
// Publish never retries (see options).
func Open(ctx context.Context, rawURL string) (*Bus, error) {
	base, channel, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	pubOpts, err := options(base)
	if err != nil {
		return nil, err
	}
	subOpts, err := options(base)
	if err != nil {
		return nil, err
	}
	if pubOpts.ClientName == "" {
		pubOpts.ClientName = "threadline-bus"
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:]) // never fails since Go 1.24
	subOpts.ClientName = pubOpts.ClientName + "-listen-" + hex.EncodeToString(rnd[:])

	pub := goredis.NewClient(pubOpts)
	pctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	if err := pub.Ping(pctx).Err(); err != nil {
		_ = pub.Close()
		return nil, fmt.Errorf("redis bus: %s does not answer PING: %w", pubOpts.Addr, err)
	}
	return &Bus{
		pub:        pub,
		sub:        goredis.NewClient(subOpts),
		listenName: subOpts.ClientName,
		channel:    channel,
		prefix:     channel + ":t:",
		pingEvery:  pingEvery,
		pongWait:   pongWait,
		base:       netbus.New(maxPayload, ErrClosed, ErrTooLarge),
		topics:     map[string]bool{},
	}, nil
}

// parseURL checks rawURL and splits it into the URL go-redis parses
// (without the channel) and the channel.
func parseURL(rawURL string) (base, channel string, err error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error repeats the URL, password included.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return "", "", fmt.Errorf("redis bus: bad URL: %w", err)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return "", "", fmt.Errorf("redis bus: URL %s: scheme %q, want redis:// or rediss://", u.Redacted(), u.Scheme)
	}
	if u.Hostname() == "" {
		return "", "", fmt.Errorf("redis bus: URL %s names no host", u.Redacted())
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", "", fmt.Errorf("redis bus: URL %s: port %q is not a number from 1 to 65535", u.Redacted(), p)
		}
	} else if _, _, err := net.SplitHostPort(u.Host); err == nil {
		return "", "", fmt.Errorf("redis bus: URL %s: empty port", u.Redacted())
	}
	q := u.Query()
	channel = DefaultChannel
	if vs, ok := q["channel"]; ok {
		if len(vs) != 1 {
			return "", "", fmt.Errorf("redis bus: URL %s names %d channels, want one", u.Redacted(), len(vs))
		}
		channel = vs[0]
		q.Del("channel")
		u.RawQuery = q.Encode()
	}
	if !channelName.MatchString(channel) {
		return "", "", fmt.Errorf("redis bus: channel %q: want 1 to 128 letters, digits and _.:{}-", channel)
	}
	base = u.String()
	if _, err := options(base); err != nil {
		return "", "", err
	}
	return base, channel, nil
}

// options parses a URL parseURL accepted into a client's options.
func options(base string) (*goredis.Options, error) {
	opts, err := goredis.ParseURL(base)
	if err != nil {
		return nil, fmt.Errorf("redis bus: %w", err)
	}
	// A PUBLISH whose reply is lost may have reached the server: retrying
	// it would deliver the payload twice, where the bus promises at most
	// once. A failed publish makes the core resync instead.
	opts.MaxRetries = -1
	// Dial once: Listen has its own backoff, a failed publish its
	// resync, and Open should fail fast, not after go-redis's five dials.
	opts.DialerRetries = 1
	return opts, nil
}

// Publish implements instanceai.Bus.
func (b *Bus) Publish(ctx context.Context, payload []byte) error {
	if err := b.base.CheckPublish(payload); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redis bus: publish: %w", err)
	}
	if err := b.pub.Publish(ctx, b.channel, payload).Err(); err != nil {
		return fmt.Errorf("redis bus: publish: %w", err)
	}
	return nil
}

// PublishTo implements instanceai.RoutedBus with SPUBLISH.
func (b *Bus) PublishTo(ctx context.Context, topic string, payload []byte) error {
	if err := b.base.CheckPublish(payload); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redis bus: publish: %w", err)
	}
	if err := b.pub.SPublish(ctx, b.topicChannel(topic), payload).Err(); err != nil {
		return fmt.Errorf("redis bus: publish: %w", err)
	}
	return nil
}

// PublishBatch implements instanceai.BatchBus: one pipeline of PUBLISH and
// SPUBLISH commands, one round trip.
func (b *Bus) PublishBatch(ctx context.Context, batch []instanceai.Envelope) error {
	for _, e := range batch {
		if err := b.base.CheckPublish(e.Payload); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redis bus: publish: %w", err)
	}
	pipe := b.pub.Pipeline()
	for _, e := range batch {
		if e.Topic == "" {
			pipe.Publish(ctx, b.channel, e.Payload)
		} else {
			pipe.SPublish(ctx, b.topicChannel(e.Topic), e.Payload)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("redis bus: publish %d payloads: %w", len(batch), err)
	}
	return nil
}

// subscribeBatch bounds the channels of one SSUBSCRIBE.
const subscribeBatch = 512

// Follow implements instanceai.RoutedBus: SSUBSCRIBE on the listener's
// connection, confirmed by the server's reply to it.
func (b *Bus) Follow(ctx context.Context, topics ...string) error {
	chans := b.topicChannels(topics)
	b.mu.Lock()
	for _, c := range chans {
		b.topics[c] = true
	}
	s := b.live
	waits := make([]chan struct{}, 0, len(chans))
	if s != nil {
		for _, c := range chans {
			w := make(chan struct{})
			s.pending[c] = append(s.pending[c], w)
			waits = append(waits, w)
		}
	}
	b.mu.Unlock()
	if s == nil {
		return errNotListening
	}
	for batch := range slices.Chunk(chans, subscribeBatch) {
		if err := s.ps.SSubscribe(ctx, batch...); err != nil {
			return fmt.Errorf("redis bus: follow: %w", err)
		}
	}
	for _, w := range waits {
		select {
		case <-w:
		case <-s.done:
			return errNotListening
		case <-ctx.Done():
			return fmt.Errorf("redis bus: follow: %w", ctx.Err())
		}
	}
	return nil
}

// Unfollow implements instanceai.RoutedBus with SUNSUBSCRIBE.
func (b *Bus) Unfollow(ctx context.Context, topics ...string) error {
	chans := b.topicChannels(topics)
	b.mu.Lock()
	for _, c := range chans {
		delete(b.topics, c)
	}
	s := b.live
	b.mu.Unlock()
	if s == nil {
		return nil
	}
	for batch := range slices.Chunk(chans, subscribeBatch) {
		if err := s.ps.SUnsubscribe(ctx, batch...); err != nil {
			return fmt.Errorf("redis bus: unfollow: %w", err)
		}
	}
	return nil
}

// confirm wakes the Follow calls waiting for channel on s.
func (b *Bus) confirm(s *session, channel string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range s.pending[channel] {
		close(w)
	}
	delete(s.pending, channel)
}

// MaxPayload implements instanceai.Bus: 1 MiB, see maxPayload.
func (b *Bus) MaxPayload() int { return maxPayload }

// Listen implements instanceai.Bus. It returns nil when ctx ends and
// ErrClosed when the bus is closed; it never gives up on Redis.
func (b *Bus) Listen(ctx context.Context, deliver func(payload []byte), state func(up bool, err error)) error {
	return b.base.Listen(ctx, func(ctx context.Context) (bool, error) { return b.session(ctx, deliver, state) }, state)
}

// session subscribes on a connection of its own and delivers until that
// connection fails, which it returns; subscribed says whether it got as
// far as reporting state(true, nil).
func (b *Bus) session(ctx context.Context, deliver func([]byte), state func(bool, error)) (subscribed bool, err error) {
	ps := b.sub.Subscribe(ctx) // no channel yet: no I/O, no error hidden
	s := &session{ps: ps, pending: map[string][]chan struct{}{}, done: make(chan struct{})}
	b.mu.Lock()
	b.live = s
	topics := slices.Collect(maps.Keys(b.topics))
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		if b.live == s {
			b.live = nil
		}
		b.mu.Unlock()
		close(s.done)
	}()
	traffic := make(chan struct{}, 1)
	stop := make(chan struct{})
	var (
		wg       sync.WaitGroup
		busy     atomic.Bool // a callback runs: nobody reads, the PONG waits
		healthMu sync.Mutex
		health   error
	)
	wg.Go(func() {
		b.watch(ctx, ps, stop, traffic, &busy, func(err error) {
			healthMu.Lock()
			health = err
			healthMu.Unlock()
		})
	})
	defer func() {
		close(stop)
		wg.Wait()
		_ = ps.Close()
	}()
	// failure prefers the watcher's diagnosis: when it closes a dead
	// connection, Receive only sees the close.
	failure := func(err error) error {
		healthMu.Lock()
		defer healthMu.Unlock()
		if health != nil {
			return health
		}
		return err
	}

	// The topics first: their replies come before the channel's, which
	// is what reports the connection up, so that every topic is followed
	// by then.
	for batch := range slices.Chunk(topics, subscribeBatch) {
		if err := ps.SSubscribe(ctx, batch...); err != nil {
			return false, failure(fmt.Errorf("redis bus: subscribe: %w", err))
		}
	}
	if err := ps.Subscribe(ctx, b.channel); err != nil {
		return false, failure(fmt.Errorf("redis bus: subscribe: %w", err))
	}
	for {
		// No timeout: go-redis does not reconnect on a read timeout, and
		// one that struck mid-message would leave the reader inside it.
		// The watcher pings and closes a connection that stays silent.
		msg, err := ps.Receive(ctx)
		if err != nil {
			return subscribed, failure(fmt.Errorf("redis bus: receive: %w", err))
		}
		busy.Store(true)
		switch m := msg.(type) {
		case *goredis.Message:
			// A topic's payloads may come before the channel is
			// confirmed: they are as good as any.
			if m.Channel == b.channel && subscribed || strings.HasPrefix(m.Channel, b.prefix) {
				deliver([]byte(m.Payload))
			}
		case *goredis.Subscription:
			if m.Kind == "ssubscribe" {
				b.confirm(s, m.Channel)
				break
			}
			if m.Channel != b.channel {
				break
			}
			switch {
			case m.Kind != "subscribe":
				return subscribed, fmt.Errorf("redis bus: %s from the server", m.Kind)
			case subscribed:
				// go-redis replaced the connection by itself (it does on
				// some errors, and on a server's maintenance hand-off)
				// and subscribed again, the channel before the topics:
				// what was published in between is lost, and the topics
				// may not be followed yet. A session of our own
				// subscribes them in order.
				return subscribed, errors.New("redis bus: the connection was replaced; payloads may be lost")
			}
			subscribed = true
			state(true, nil)
		}
		busy.Store(false)
		select {
		case traffic <- struct{}{}:
		default:
		}
	}
}

// watch runs beside a session's Receive loop until stop. It closes ps,
// which is what ends a blocked Receive (go-redis reads without watching
// the context), when ctx ends, when the bus closes, and when the
// connection stays silent after a PING; then it tells fail why first.
// traffic gets a value for everything Receive reads, once the callbacks
// are done with it; busy is set while they run, which is no silence of
// the connection's.
func (b *Bus) watch(ctx context.Context, ps *goredis.PubSub, stop, traffic <-chan struct{}, busy *atomic.Bool, fail func(error)) {
	timer := time.NewTimer(b.pingEvery)
	defer timer.Stop()
	pinged := false
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			_ = ps.Close()
			return
		case <-b.base.Done():
			_ = ps.Close()
			return
		case <-traffic:
			pinged = false
			timer.Reset(b.pingEvery)
		case <-timer.C:
			if busy.Load() {
				pinged = false
				timer.Reset(b.pingEvery)
				continue
			}
			if pinged {
				fail(fmt.Errorf("redis bus: no answer to PING within %v", b.pongWait))
				_ = ps.Close()
				return
			}
			// The answer comes through Receive, as traffic.
			pctx, cancel := context.WithTimeout(ctx, b.pongWait)
			err := ps.Ping(pctx)
			cancel()
			if err != nil {
				fail(fmt.Errorf("redis bus: ping: %w", err))
				_ = ps.Close()
				return
			}
			pinged = true
			timer.Reset(b.pongWait)
		}
	}
}

// Close implements instanceai.Bus: it ends every Listen and closes the
// connections. Closing again returns nil.
func (b *Bus) Close() error {
	return b.base.Close(func() error {
		if err := errors.Join(b.pub.Close(), b.sub.Close()); err != nil {
			return fmt.Errorf("redis bus: close: %w", err)
		}
		return nil
	})
}
