package server_test

import (
	"testing"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/servertest"
)

// harness is a servertest server together with the test it was started
// for, which the helpers these tests add (AG-UI streams, rejoins, thread
// pages, …) report to.
type harness struct {
	*servertest.Server
	t *testing.T
}

func start(t *testing.T, store instanceai.Store, o servertest.Options) *harness {
	t.Helper()
	return &harness{Server: servertest.Start(t, store, o), t: t}
}

// As is servertest's As, keeping the helpers of harness.
func (h *harness) As(token string) *harness { return &harness{Server: h.Server.As(token), t: h.t} }
