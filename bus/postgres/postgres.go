// Package postgres is an instanceai.Bus on PostgreSQL's LISTEN/NOTIFY, on
// the database the instances already share, through github.com/jackc/pgx/v5
// (whose connection exposes notifications directly; lib/pq, the store's
// driver, would need its separate Listener type).
//
// NOTIFY payloads are text shorter than 8,000 bytes. MaxPayload says so,
// with a margin, and the core splits or sends through the log what is
// larger. Payloads travel as they are, with no encoding to inflate them:
// they must therefore be valid UTF-8 without NUL bytes, which the core's
// JSON is, and Publish refuses anything else. The database should use
// the UTF8 encoding, so that no payload is converted on the way.
//
// The bus is also an instanceai.RoutedBus: each topic (a thread) is a
// notification channel of its own, named from a hash of the bus channel
// and the topic (identifiers are at most 63 bytes), LISTENed on the same
// connection while the instance follows it. PostgreSQL hands a
// notification only to the backends that listen on its channel, so an
// instance receives only the threads it serves.
//
// The listener holds one session-level connection of its own, so the DSN
// must reach PostgreSQL directly or through a pooler in session mode: a
// transaction-mode pooler drops LISTEN between transactions.
package postgres

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/threadline/threadline/bus/internal/netbus"
	"github.com/threadline/threadline/instanceai"
)

// DefaultChannel is the notification channel when Open is given none.
const DefaultChannel = "threadline"

// ListenApplicationName is the application_name of every bus listener's
// connection, so that pg_stat_activity shows which backends are buses.
const ListenApplicationName = "threadline-bus-listen"

// maxPayload is NOTIFY's limit, payloads under 8,000 bytes with the
// default block size, less a margin for a server built with other sizes.
const maxPayload = 7900

const (
	// connectTimeout bounds Open's first round trip and each listener
	// connection (with LISTEN) when the DSN sets no connect_timeout, so
	// that an unreachable host fails in seconds, not in TCP's minutes.
	connectTimeout = 10 * time.Second
	// healthEvery is how long a quiet listener waits before it checks its
	// connection with a round trip, which must come back within
	// healthTimeout: a dead connection is noticed within their sum.
	healthEvery   = 5 * time.Second
	healthTimeout = 5 * time.Second
)

var (
	// ErrClosed is returned by Publish and Listen once the bus is closed.
	ErrClosed = errors.New("postgres bus: closed")
	// ErrTooLarge is returned by Publish for a payload over MaxPayload.
	ErrTooLarge = errors.New("postgres bus: payload too large")
	// ErrNotText is returned by Publish for a payload NOTIFY cannot
	// carry: invalid UTF-8, or a NUL byte.
	ErrNotText = errors.New("postgres bus: payload is not UTF-8 text without NUL bytes")
)

// channelName is what Open accepts: an identifier PostgreSQL keeps as it
// is (at most NAMEDATALEN-1 bytes), quoted anyway so that case survives.
var channelName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// Bus is a LISTEN/NOTIFY bus. Its methods are safe for concurrent use.
type Bus struct {
	pool    *pgxpool.Pool   // NOTIFY
	listen  *pgx.ConnConfig // a template for each listener connection
	channel string          // as given, for pg_notify
	ident   string          // quoted, for LISTEN
	pid     atomic.Uint32   // the backend of the last listener connection
	base    *netbus.Base
	// healthEvery and healthTimeout are the constants of the same names;
	// tests shorten them.
	healthEvery, healthTimeout time.Duration

	mu sync.Mutex
	// topics is the set of followed topics, by channel name.
	topics map[string]bool
	// live is the running session, nil between sessions.
	live *session
}

// session is the state of one listener connection that Follow and
// Unfollow reach from other goroutines; guarded by the bus's mu.
type session struct {
	// changed is set when the topic set changed since the session last
	// applied it, and interrupt cancels the wait for a notification under
	// way (nil when none is) so that it applies them at once.
	changed   bool
	interrupt context.CancelFunc
	// waiting are the Follow calls to wake once the set they changed is
	// applied.
	waiting []chan struct{}
	done    chan struct{}
}

// errNotListening is what Follow returns while no listener is connected.
var errNotListening = errors.New("postgres bus: not connected; the topics are followed at the next connection")

// topicChannel is the notification channel of a topic: a hash, so that
// any topic makes an identifier PostgreSQL keeps whole and as it is.
func (b *Bus) topicChannel(topic string) string {
	h := sha256.Sum256([]byte(b.channel + "\x00" + topic))
	return "tl_" + hex.EncodeToString(h[:20])
}

// Open connects to the database at dsn and checks that it answers.
// dsn is a postgres:// URL or key=value string as the store takes it;
// parameters pgx does not know itself (search_path, ...) are sent to the
// server as run-time parameters, as lib/pq does. One difference: without
// sslmode, pgx tries TLS and falls back to plain, where lib/pq requires
// TLS. channel is the notification channel ("" for DefaultChannel): 1 to
// 63 letters, digits and underscores, not starting with a digit, and
// case-sensitive.
func Open(ctx context.Context, dsn, channel string) (*Bus, error) {
	if channel == "" {
		channel = DefaultChannel
	}
	if !channelName.MatchString(channel) {
		return nil, fmt.Errorf("postgres bus: channel %q: want 1 to 63 letters, digits and _, not starting with a digit", channel)
	}
	poolCfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres bus: %w", err)
	}
	listenCfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres bus: %w", err)
	}
	listenCfg.RuntimeParams["application_name"] = ListenApplicationName
	if listenCfg.ConnectTimeout == 0 {
		listenCfg.ConnectTimeout = connectTimeout
	}
	if poolCfg.ConnConfig.RuntimeParams["application_name"] == "" {
		poolCfg.ConnConfig.RuntimeParams["application_name"] = "threadline-bus"
	}
	// NOTIFY is one short statement: a few connections carry any load.
	poolCfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return nil, fmt.Errorf("postgres bus: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres bus: %w", err)
	}
	return &Bus{
		pool:          pool,
		listen:        listenCfg,
		channel:       channel,
		ident:         pgx.Identifier{channel}.Sanitize(),
		base:          netbus.New(maxPayload, ErrClosed, ErrTooLarge),
		healthEvery:   healthEvery,
		healthTimeout: healthTimeout,
		topics:        map[string]bool{},
	}, nil
}

// Publish implements instanceai.Bus: one pg_notify in a transaction of its
// own, so that payloads reach listeners in the order Publish returns.
func (b *Bus) Publish(ctx context.Context, payload []byte) error {
	return b.notify(ctx, b.channel, payload)
}

func (b *Bus) notify(ctx context.Context, channel string, payload []byte) error {
	if err := b.base.CheckPublish(payload); err != nil {
		return err
	}
	if !utf8.Valid(payload) || bytes.IndexByte(payload, 0) >= 0 {
		return ErrNotText
	}
	if _, err := b.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, channel, string(payload)); err != nil {
		return fmt.Errorf("postgres bus: notify: %w", err)
	}
	return nil
}

// PublishTo implements instanceai.RoutedBus: Publish, on the topic's
// channel.
func (b *Bus) PublishTo(ctx context.Context, topic string, payload []byte) error {
	return b.notify(ctx, b.topicChannel(topic), payload)
}

// PublishBatch implements instanceai.BatchBus: one statement of
// pg_notify calls, so one transaction, whose notifications PostgreSQL
// delivers together at its commit, in order. (Within one transaction
// PostgreSQL folds notifications with the same channel and payload into
// one; the core never sends the same message twice in a batch.)
func (b *Bus) PublishBatch(ctx context.Context, batch []instanceai.Envelope) error {
	var q strings.Builder
	args := make([]any, 0, 2*len(batch))
	q.WriteString("SELECT ")
	for i, e := range batch {
		if err := b.base.CheckPublish(e.Payload); err != nil {
			return err
		}
		if !utf8.Valid(e.Payload) || bytes.IndexByte(e.Payload, 0) >= 0 {
			return ErrNotText
		}
		channel := b.channel
		if e.Topic != "" {
			channel = b.topicChannel(e.Topic)
		}
		if i > 0 {
			q.WriteString(", ")
		}
		fmt.Fprintf(&q, "pg_notify($%d, $%d)", 2*i+1, 2*i+2)
		args = append(args, channel, string(e.Payload))
	}
	if _, err := b.pool.Exec(ctx, q.String(), args...); err != nil {
		return fmt.Errorf("postgres bus: notify %d payloads: %w", len(batch), err)
	}
	return nil
}

// Follow implements instanceai.RoutedBus: LISTEN on the listener's
// connection, which has taken effect when the statement returns.
func (b *Bus) Follow(ctx context.Context, topics ...string) error {
	w := make(chan struct{})
	s := b.change(topics, true, w)
	if s == nil {
		return errNotListening
	}
	select {
	case <-w:
		return nil
	case <-s.done:
		return errNotListening
	case <-ctx.Done():
		return fmt.Errorf("postgres bus: follow: %w", ctx.Err())
	}
}

// Unfollow implements instanceai.RoutedBus: UNLISTEN, soon after.
func (b *Bus) Unfollow(_ context.Context, topics ...string) error {
	b.change(topics, false, nil)
	return nil
}

// change adds topics to the set (or removes them), has the session apply
// the set, and returns the session, which closes wake once it did.
func (b *Bus) change(topics []string, follow bool, wake chan struct{}) *session {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, t := range topics {
		if follow {
			b.topics[b.topicChannel(t)] = true
		} else {
			delete(b.topics, b.topicChannel(t))
		}
	}
	s := b.live
	if s == nil {
		return nil
	}
	s.changed = true
	if wake != nil {
		s.waiting = append(s.waiting, wake)
	}
	if s.interrupt != nil {
		s.interrupt()
	}
	return s
}

// listenBatch bounds the LISTEN statements sent in one round trip.
const listenBatch = 256

// apply makes the connection listen on the topic set, which listening
// holds what it listens on now, and wakes the Follow calls that waited
// for it.
func (b *Bus) apply(ctx context.Context, conn *pgx.Conn, s *session, listening map[string]bool) error {
	b.mu.Lock()
	s.changed = false
	want := maps.Clone(b.topics)
	waiting := s.waiting
	s.waiting = nil
	b.mu.Unlock()
	var stmts []string
	for c := range want {
		if !listening[c] {
			stmts = append(stmts, "LISTEN "+pgx.Identifier{c}.Sanitize())
		}
	}
	for c := range listening {
		if !want[c] {
			stmts = append(stmts, "UNLISTEN "+pgx.Identifier{c}.Sanitize())
		}
	}
	for batch := range slices.Chunk(stmts, listenBatch) {
		lctx, cancel := context.WithTimeout(ctx, b.listen.ConnectTimeout)
		_, err := conn.Exec(lctx, strings.Join(batch, "; "))
		cancel()
		if err != nil {
			return err
		}
	}
	clear(listening)
	maps.Copy(listening, want)
	for _, w := range waiting {
		close(w)
	}
	return nil
}

// MaxPayload implements instanceai.Bus.
func (b *Bus) MaxPayload() int { return maxPayload }

// Listen implements instanceai.Bus. It returns nil when ctx ends and
// ErrClosed when the bus is closed; it never gives up on the database.
func (b *Bus) Listen(ctx context.Context, deliver func(payload []byte), state func(up bool, err error)) error {
	// The session's context also ends with the bus, which is what
	// interrupts a listener blocked in WaitForNotification at Close.
	return b.base.Listen(ctx, func(ctx context.Context) (bool, error) { return b.session(ctx, deliver, state) }, state)
}

// session connects, listens and delivers until the connection fails,
// which it returns; listened says whether it got as far as reporting
// state(true, nil).
func (b *Bus) session(ctx context.Context, deliver func([]byte), state func(bool, error)) (listened bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, b.listen.Copy())
	if err != nil {
		return false, fmt.Errorf("postgres bus: connect listener: %w", err)
	}
	pid := conn.PgConn().PID()
	b.pid.Store(pid)
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	lctx, cancel := context.WithTimeout(ctx, b.listen.ConnectTimeout)
	_, err = conn.Exec(lctx, "LISTEN "+b.ident)
	cancel()
	if err != nil {
		return false, fmt.Errorf("postgres bus: listener (backend %d): LISTEN: %w", pid, err)
	}
	s := &session{done: make(chan struct{})}
	b.mu.Lock()
	b.live = s
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		if b.live == s {
			b.live = nil
		}
		b.mu.Unlock()
		close(s.done)
	}()
	// Every topic is listened on before the connection counts as up.
	listening := map[string]bool{}
	if err := b.apply(ctx, conn, s, listening); err != nil {
		return false, fmt.Errorf("postgres bus: listener (backend %d): LISTEN: %w", pid, err)
	}
	state(true, nil)
	for {
		b.mu.Lock()
		changed := s.changed
		wctx, cancel := context.WithTimeout(ctx, b.healthEvery)
		if !changed {
			s.interrupt = cancel
		}
		b.mu.Unlock()
		if changed {
			cancel()
			if err := b.apply(ctx, conn, s, listening); err != nil {
				return true, fmt.Errorf("postgres bus: listener (backend %d): LISTEN: %w", pid, err)
			}
			continue
		}
		n, err := conn.WaitForNotification(wctx)
		b.mu.Lock()
		s.interrupt = nil
		changed = s.changed
		b.mu.Unlock()
		cancel()
		switch {
		case err == nil:
			// Every channel listened on is the bus's.
			deliver([]byte(n.Payload))
			continue
		case ctx.Err() != nil:
			return true, ctx.Err()
		case changed && (errors.Is(err, context.Canceled) || pgconn.Timeout(err)):
			// Interrupted to apply a change of the topic set: a
			// cancelled wait leaves the connection as a timeout does.
			continue
		case !pgconn.Timeout(err):
			return true, fmt.Errorf("postgres bus: listener (backend %d): %w", pid, err)
		}
		// Quiet for healthEvery: a round trip proves the connection
		// (notifications that arrive meanwhile are kept for the next
		// WaitForNotification).
		pctx, cancel := context.WithTimeout(ctx, b.healthTimeout)
		err = conn.Ping(pctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			return true, fmt.Errorf("postgres bus: listener (backend %d): health check (%v): %w", pid, b.healthTimeout, err)
		}
	}
}

// listenerPID is the backend process id of the listener's latest
// connection, 0 before the first.
func (b *Bus) listenerPID() uint32 { return b.pid.Load() }

// Close implements instanceai.Bus: it ends every Listen and closes the
// connections. Closing again returns nil.
func (b *Bus) Close() error {
	return b.base.Close(func() error {
		b.pool.Close()
		return nil
	})
}
