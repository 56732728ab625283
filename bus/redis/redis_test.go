package redis

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/threadline/threadline/bus/bustest"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/internal/faultproxy"
	"github.com/threadline/threadline/internal/testredis"
)

var _ instanceai.Bus = (*Bus)(nil)

// channelURL is base on a channel of its own, so that parallel tests, and
// parallel runs of the tests, do not hear each other.
func channelURL(t *testing.T, base string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("TEST_REDIS_URL: %v", err)
	}
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("channel", "threadline-test-"+hex.EncodeToString(rnd[:]))
	u.RawQuery = q.Encode()
	return u.String()
}

func open(t *testing.T, rawURL string) *Bus {
	t.Helper()
	b, err := Open(context.Background(), rawURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// admin is a plain client on the test server, for what the bus does not
// do (CLIENT LIST, CLIENT KILL).
func admin(t *testing.T) *goredis.Client {
	t.Helper()
	opts, err := goredis.ParseURL(testredis.URL(t))
	if err != nil {
		t.Fatalf("TEST_REDIS_URL: %v", err)
	}
	c := goredis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// listenerIDs returns the client ids of the connections subscribed for b.
func listenerIDs(t *testing.T, c *goredis.Client, b *Bus) []string {
	t.Helper()
	list, err := c.Do(context.Background(), "CLIENT", "LIST", "TYPE", "pubsub").Text()
	if err != nil {
		t.Fatalf("CLIENT LIST: %v", err)
	}
	var ids []string
	for line := range strings.Lines(list) {
		var id, name string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "id="); ok {
				id = v
			}
			if v, ok := strings.CutPrefix(f, "name="); ok {
				name = v
			}
		}
		if name == b.listenName {
			ids = append(ids, id)
		}
	}
	return ids
}

// kill cuts b's subscription from the server, by the client name only b's
// listener has; the other bus's listener, and other tests', stay up.
// There may be two: the server can still list a connection of b's that
// the client has just closed.
func kill(t *testing.T, bus instanceai.Bus) {
	t.Helper()
	b := bus.(*Bus)
	c := admin(t)
	ids := listenerIDs(t, c, b)
	killed := 0
	for _, id := range ids {
		// A connection gone meanwhile makes CLIENT KILL fail: fine.
		if n, err := c.Do(context.Background(), "CLIENT", "KILL", "ID", id).Int(); err == nil {
			killed += n
		}
	}
	if killed == 0 {
		t.Fatalf("no pub/sub connection named %s to kill (listed %v)", b.listenName, ids)
	}
}

func TestContract(t *testing.T) {
	base := testredis.URL(t)
	bustest.Run(t, func(t *testing.T) (a, b instanceai.Bus) {
		u := channelURL(t, base)
		return open(t, u), open(t, u)
	}, kill)
}

// TestBinaryPayloads: Redis strings are bytes, so any payload, NUL and
// invalid UTF-8 included, arrives byte-exact (the suite only sends text).
func TestBinaryPayloads(t *testing.T) {
	b := open(t, channelURL(t, testredis.URL(t)))
	want := make([][]byte, 0, 3)
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	want = append(want, all, []byte{0}, []byte("\xff\xfe\x00\r\n$-1\r\n"))

	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan []byte, len(want))
	up := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- b.Listen(ctx, func(p []byte) { got <- p }, func(ok bool, _ error) {
			if ok {
				up <- struct{}{}
			}
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Listen: %v", err)
		}
	}()
	select {
	case <-up:
	case <-time.After(10 * time.Second):
		t.Fatal("no connection")
	}
	for _, p := range want {
		if err := b.Publish(ctx, p); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	for i, w := range want {
		select {
		case p := <-got:
			if !bytes.Equal(p, w) {
				t.Errorf("payload %d = %q, want %q", i, p, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("payload %d not delivered", i)
		}
	}
}

// TestOpenFailsFast: a Redis that does not answer fails Open at once,
// with the address in the error, rather than the first Publish.
func TestOpenFailsFast(t *testing.T) {
	// Port 1 on the loopback refuses at once.
	start := time.Now()
	_, err := Open(context.Background(), "redis://127.0.0.1:1/0")
	if err == nil {
		t.Fatal("Open of a closed port succeeded")
	}
	if !strings.Contains(err.Error(), "redis bus: 127.0.0.1:1 does not answer PING") {
		t.Errorf("error %q does not say which Redis does not answer", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Open took %v to fail", d)
	}
}

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url, base, channel string
	}{
		{"redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0", DefaultChannel},
		{"redis://127.0.0.1:6379/2?channel=a.b", "redis://127.0.0.1:6379/2", "a.b"},
		{"redis://u:p@redis.example:6380/0?channel=tl:prod-1&dial_timeout=1s", "redis://u:p@redis.example:6380/0?dial_timeout=1s", "tl:prod-1"},
		{"rediss://redis.example/0", "rediss://redis.example/0", DefaultChannel},
		{"redis://[::1]:6379", "redis://[::1]:6379", DefaultChannel},
	} {
		base, channel, err := parseURL(tc.url)
		if err != nil || base != tc.base || channel != tc.channel {
			t.Errorf("parseURL(%q) = %q, %q, %v; want %q, %q", tc.url, base, channel, err, tc.base, tc.channel)
		}
	}
}

func TestParseURLErrors(t *testing.T) {
	for _, tc := range []struct{ name, url, want string }{
		{"no scheme", "127.0.0.1/0", `scheme ""`},
		{"http scheme", "http://127.0.0.1:6379/0", `scheme "http"`},
		{"unix scheme", "unix:///run/redis.sock", `scheme "unix"`},
		{"bad URL", "redis://127.0.0.1:6379/0\x7f", "bad URL"},
		{"no host", "redis:///0", "names no host"},
		{"port not a number", "redis://127.0.0.1:abc/0", "bad URL"},
		{"port 0", "redis://127.0.0.1:0/0", `port "0"`},
		{"port too large", "redis://127.0.0.1:65536/0", `port "65536"`},
		{"empty port", "redis://127.0.0.1:/0", "empty port"},
		{"empty channel", "redis://127.0.0.1:6379/0?channel=", `channel ""`},
		{"channel with a space", "redis://127.0.0.1:6379/0?channel=bad%20name", `channel "bad name"`},
		{"channel with a newline", "redis://127.0.0.1:6379/0?channel=a%0Ab", `channel "a\nb"`},
		{"channel too long", "redis://127.0.0.1:6379/0?channel=" + strings.Repeat("c", 129), "channel"},
		{"two channels", "redis://127.0.0.1:6379/0?channel=a&channel=b", "2 channels"},
		{"bad DB", "redis://127.0.0.1:6379/notadb", "invalid database"},
		{"unknown option", "redis://127.0.0.1:6379/0?chanel=x", "unexpected option"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := parseURL(tc.url)
			if err == nil {
				t.Fatalf("parseURL(%q) succeeded", tc.url)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "redis bus: ") || !strings.Contains(msg, tc.want) {
				t.Errorf("parseURL(%q) = %q; want a redis bus error about %s", tc.url, msg, tc.want)
			}
		})
	}
}

// TestParseURLRedactsPassword: errors quote the URL without its password.
func TestParseURLRedactsPassword(t *testing.T) {
	for _, u := range []string{
		"http://user:secret@127.0.0.1:6379/0",
		"redis://user:secret@127.0.0.1:0/0",
		"redis://user:secret@127.0.0.1:6379/0?channel=a&channel=b",
		"redis://user:secret@127.0.0.1:abc/0",
	} {
		if _, _, err := parseURL(u); err == nil || strings.Contains(err.Error(), "secret") {
			t.Errorf("parseURL(%q) = %v; want an error without the password", u, err)
		}
	}
}

// FuzzParseURL: parseURL never panics, and what it accepts go-redis
// accepts, with a channel Open would subscribe to.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"redis://127.0.0.1:6379/0", "redis://u:p@h:1/15?channel=x", "rediss://h", "redis://h:65535/0?channel=a&channel=b",
		"redis://h:0", "redis://[::1]:6379/0?channel=%00", "redis:///0", "redis://h/0?protocol=2&channel=c",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		base, channel, err := parseURL(raw)
		if err != nil {
			return
		}
		if !channelName.MatchString(channel) {
			t.Errorf("parseURL(%q) accepted channel %q", raw, channel)
		}
		if _, err := goredis.ParseURL(base); err != nil {
			t.Errorf("parseURL(%q) gave %q, which go-redis refuses: %v", raw, base, err)
		}
	})
}

// viaProxy returns a URL like rawURL but through a proxy to its server.
func viaProxy(t *testing.T, rawURL string) (string, *faultproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	p := bustest.NewProxy(t, u.Host)
	u.Host = p.Addr()
	return u.String(), p
}

// TestOutages: the listener notices a silent connection by its PING, and
// outlasts an outage of the server.
func TestOutages(t *testing.T) {
	bustest.RunOutages(t, bustest.Outage{
		Open: func(t *testing.T) (proxied, direct instanceai.Bus, p *faultproxy.Proxy) {
			u := channelURL(t, testredis.URL(t))
			via, p := viaProxy(t, u)
			return open(t, via), open(t, u), p
		},
		QuickCheck: func(b instanceai.Bus, quiet, answer time.Duration) {
			b.(*Bus).pingEvery, b.(*Bus).pongWait = quiet, answer
		},
		SilenceLoss: "no answer to PING",
	})
}

// TestSlowCallbackIsNotALoss: while deliver runs nobody reads the
// connection, so the PONG waits unread; that must not pass for a dead
// connection.
func TestSlowCallbackIsNotALoss(t *testing.T) {
	b := open(t, channelURL(t, testredis.URL(t)))
	b.pingEvery, b.pongWait = 50*time.Millisecond, 100*time.Millisecond
	// Many times pingEvery+pongWait: without the busy check, the watcher
	// would declare the connection dead within the first 150 ms.
	const hold = time.Second

	ctx, cancel := context.WithCancel(context.Background())
	states := make(chan bool, 16)
	got := make(chan string, 16)
	done := make(chan error, 1)
	go func() {
		done <- b.Listen(ctx, func(p []byte) {
			if string(p) == "slow" {
				time.Sleep(hold) // the slow consumer under test
			}
			got <- string(p)
		}, func(up bool, _ error) { states <- up })
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Listen: %v", err)
		}
	}()
	next := func(what string) {
		t.Helper()
		select {
		case up := <-states:
			if !up {
				t.Fatalf("state(false) while waiting for %s", what)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s", what)
		}
	}
	next("connection")
	for _, p := range []string{"slow", "after"} {
		if err := b.Publish(ctx, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"slow", "after"} {
		select {
		case p := <-got:
			if p != want {
				t.Fatalf("got %q, want %q", p, want)
			}
		case up := <-states:
			t.Fatalf("state(%v) while deliver was slow; want none", up)
		case <-time.After(10 * time.Second):
			t.Fatalf("%q not delivered", want)
		}
	}
	select {
	case up := <-states:
		t.Errorf("state(%v) after a slow deliver; want none", up)
	default:
	}
}
