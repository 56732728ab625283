package bustest

import (
	"testing"

	"github.com/threadline/threadline/internal/faultproxy"
)

// NewProxy puts a fault proxy on a loopback port in front of target
// (host:port) until the test ends: transports' and the server's tests
// reach a bus or store server through it to silence, freeze, cut or take
// down the link.
func NewProxy(t testing.TB, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Listen(target)
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}
