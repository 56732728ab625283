package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/threadline/threadline/bus/bustest"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/internal/faultproxy"
	"github.com/threadline/threadline/internal/testpg"
)

var _ instanceai.Bus = (*Bus)(nil)

// channel is a channel of the test's own, so that parallel tests, and
// parallel runs of the tests on one database, do not hear each other.
func channel(t *testing.T) string {
	t.Helper()
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatal(err)
	}
	return "threadline_test_" + hex.EncodeToString(rnd[:])
}

func open(t *testing.T, dsn, channel string) *Bus {
	t.Helper()
	b, err := Open(context.Background(), dsn, channel)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// kill terminates b's listening backend, found in pg_stat_activity by the
// application name every listener sets and by the pid b recorded, so that
// the other bus's listener, and other tests', stay up.
func kill(t *testing.T, bus instanceai.Bus) {
	t.Helper()
	b := bus.(*Bus)
	pid := b.listenerPID()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testpg.BaseDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var killed bool
	err = conn.QueryRow(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE pid = $1 AND application_name = $2`, int64(pid), ListenApplicationName).Scan(&killed)
	if err != nil || !killed {
		t.Fatalf("terminate listener backend %d (application_name %s): %v, %v", pid, ListenApplicationName, killed, err)
	}
}

func TestContract(t *testing.T) {
	dsn := testpg.BaseDSN(t)
	bustest.Run(t, func(t *testing.T) (a, b instanceai.Bus) {
		ch := channel(t)
		return open(t, dsn, ch), open(t, dsn, ch)
	}, kill)
}

// TestStoreDSNs: the DSNs the store is given, lib/pq style with sslmode
// and extra run-time parameters, work for the bus too.
func TestStoreDSNs(t *testing.T) {
	base := testpg.BaseDSN(t)
	for _, dsn := range []string{
		base,
		testpg.WithParams(t, base, map[string]string{"search_path": "public", "synchronous_commit": "off"}),
		testpg.FreshDSN(t),
	} {
		ch := channel(t)
		b := open(t, dsn, ch)
		l := bustest.Listen(t, "listener", b)
		l.WaitUp(t)
		p := []byte(`{"dsn":"` + strings.ReplaceAll(dsn, `"`, ``) + `"}`)
		if err := b.Publish(context.Background(), p); err != nil {
			t.Fatalf("%s: Publish: %v", dsn, err)
		}
		l.WaitPayload(t, p)
	}
}

// TestChannelCaseIsKept: LISTEN would fold an unquoted Foo to foo, while
// pg_notify keeps it; quoting makes both the same channel, distinct from
// the lower-case one.
func TestChannelCaseIsKept(t *testing.T) {
	dsn := testpg.BaseDSN(t)
	lower := channel(t)
	upper := "Threadline_" + strings.TrimPrefix(lower, "threadline_")
	bu, bl := open(t, dsn, upper), open(t, dsn, strings.ToLower(upper))
	lu, ll := bustest.Listen(t, "upper", bu), bustest.Listen(t, "lower", bl)
	lu.WaitUp(t)
	ll.WaitUp(t)
	for _, b := range []*Bus{bu, bl} {
		if err := b.Publish(context.Background(), []byte(b.channel)); err != nil {
			t.Fatal(err)
		}
	}
	lu.WaitPayload(t, []byte(upper))
	ll.WaitPayload(t, []byte(strings.ToLower(upper)))
	for _, l := range []*bustest.Listener{lu, ll} {
		if n := len(l.Payloads()); n != 1 {
			t.Errorf("%d payloads on one channel, want 1: the two channels are one", n)
		}
	}
}

// TestPayloadMustBeText: NOTIFY carries text; what is not text is refused
// before it reaches the server, with ErrNotText, and nothing is sent.
func TestPayloadMustBeText(t *testing.T) {
	b := open(t, testpg.BaseDSN(t), channel(t))
	l := bustest.Listen(t, "listener", b)
	l.WaitUp(t)
	for _, p := range [][]byte{{0}, []byte("a\x00b"), {0xff}, []byte("\xc3"), []byte("\xed\xa0\x80")} {
		if err := b.Publish(context.Background(), p); !errors.Is(err, ErrNotText) {
			t.Errorf("Publish(%q) = %v, want ErrNotText", p, err)
		}
	}
	if err := b.Publish(context.Background(), make([]byte, maxPayload+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Publish of %d bytes = %v, want ErrTooLarge", maxPayload+1, err)
	}
	marker := []byte("text")
	if err := b.Publish(context.Background(), marker); err != nil {
		t.Fatal(err)
	}
	l.WaitPayload(t, marker)
	if got := l.Payloads(); len(got) != 1 {
		t.Errorf("payloads %q, want only the marker", got)
	}
}

// TestOpenErrors: bad channels and unreachable servers fail Open, at once
// and saying what is wrong.
func TestOpenErrors(t *testing.T) {
	for _, ch := range []string{"bad-name", "1st", "a b", `q"uote`, strings.Repeat("c", 64), "é"} {
		if _, err := Open(context.Background(), "postgres://x@127.0.0.1:1/x?sslmode=disable", ch); err == nil ||
			!strings.Contains(err.Error(), "postgres bus: channel") {
			t.Errorf("Open with channel %q: %v, want a channel error", ch, err)
		}
	}
	start := time.Now()
	_, err := Open(context.Background(), "postgres://x@127.0.0.1:1/x?sslmode=disable", "")
	if err == nil || !strings.HasPrefix(err.Error(), "postgres bus: ") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("Open of a closed port: %v, want a postgres bus error naming the address", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Open took %v to fail", d)
	}
	for _, dsn := range []string{
		"postgres://x:secret@127.0.0.1:5432/x?sslmode=bogus",
		"postgres://x:secret@127.0.0.1:notaport/x",
		"host=127.0.0.1 password=secret port=abc",
	} {
		_, err := Open(context.Background(), dsn, "")
		if err == nil || !strings.HasPrefix(err.Error(), "postgres bus: ") || strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%q) = %v, want a postgres bus error without the password", dsn, err)
		}
	}
}

// viaProxy returns dsn (a URL) with its host replaced by a proxy's.
func viaProxy(t *testing.T, dsn string) (string, *faultproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		t.Skipf("TEST_DATABASE_URL is not a URL (%v); the proxy tests need one", err)
	}
	host := u.Host
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(host, "5432")
	}
	p := bustest.NewProxy(t, host)
	u.Host = p.Addr()
	return u.String(), p
}

// TestOutages: the listener notices a silent connection by its health
// check, and outlasts an outage of the server.
func TestOutages(t *testing.T) {
	bustest.RunOutages(t, bustest.Outage{
		Open: func(t *testing.T) (proxied, direct instanceai.Bus, p *faultproxy.Proxy) {
			dsn := testpg.BaseDSN(t)
			via, p := viaProxy(t, dsn)
			ch := channel(t)
			return open(t, via, ch), open(t, dsn, ch), p
		},
		QuickCheck: func(b instanceai.Bus, quiet, answer time.Duration) {
			b.(*Bus).healthEvery, b.(*Bus).healthTimeout = quiet, answer
		},
		SilenceLoss: "health check",
	})
}
