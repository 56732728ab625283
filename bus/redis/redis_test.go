package redis_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/threadline/threadline/bus/bustest"
	"github.com/threadline/threadline/bus/redis"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/internal/testredis"
)

func channelURL(t *testing.T, base string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	return base + sep + "channel=test-" + hex.EncodeToString(b[:])
}

func TestContract(t *testing.T) {
	base := testredis.URL(t)
	bustest.Run(t, func(t *testing.T) (instanceai.Bus, instanceai.Bus) {
		u := channelURL(t, base)
		var out [2]instanceai.Bus
		for i := range out {
			b, err := redis.Open(context.Background(), u)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			out[i] = b
		}
		return out[0], out[1]
	}, func(t *testing.T, _ instanceai.Bus) {
		opts, _, err := redis.ParseURL(base)
		if err != nil {
			t.Fatal(err)
		}
		c := goredis.NewClient(opts)
		defer c.Close()
		// Cuts every subscriber's connection, as a Redis restart would.
		if err := c.Do(context.Background(), "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestParseURLErrors(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"http://127.0.0.1:6379/0", "scheme"},
		{"redis://127.0.0.1/0", "HOST:PORT"},
		{"redis://127.0.0.1:6379/0?channel=bad%20name", "channel"},
		{"redis://127.0.0.1:6379/notadb", "redis bus"},
	} {
		if _, _, err := redis.ParseURL(tc.url); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseURL(%q) = %v, want an error about %s", tc.url, err, tc.want)
		}
	}
	if _, ch, err := redis.ParseURL("redis://127.0.0.1:6379/2?channel=a.b"); err != nil || ch != "a.b" {
		t.Errorf("channel = %q, %v", ch, err)
	}
}
