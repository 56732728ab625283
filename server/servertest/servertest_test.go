package servertest_test

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/servertest"
)

// TestChatAndStream drives one run through the helpers on every store:
// the thread is created and listed, the stream carries the run from
// run-start to its run-finish, and a joined stream's run-sync frame has
// no decoded event.
func TestChatAndStream(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		s := servertest.Start(t, store, servertest.Options{AgentDelay: time.Millisecond})
		if th := s.CreateThread(`{"id":"th","title":"Plans"}`, http.StatusCreated); th.ID != "th" || th.Title != "Plans" {
			t.Fatalf("created %+v", th)
		}
		if p := s.ListThreads(""); len(p.Threads) != 1 || p.Threads[0].ID != "th" {
			t.Fatalf("listed %+v", p)
		}
		runID := s.Chat("th", "long 200")
		live := s.Connect("th", "", false)
		joined := s.Connect("th", "", true)
		frames := live.Until(20*time.Second, servertest.IsRunFinish(runID))
		if first := frames[0].Decoded; first.Type != instanceai.TypeRunStart || first.RunID != runID {
			t.Fatalf("first frame %s", frames[0].Data)
		}
		for _, f := range joined.Until(20*time.Second, servertest.IsRunFinish(runID)) {
			if f.Event != "" && f.Decoded.Type != "" {
				t.Fatalf("frame %q decoded as %s", f.Event, f.Decoded.Type)
			}
		}
		if st := s.ThreadStatus("th"); st.HasActiveRun {
			t.Fatalf("status after the run %+v", st)
		}
		if rows := servertest.StoredEvents(t, store, "th"); len(rows) == 0 {
			t.Fatal("nothing stored")
		}
		if f, ok := live.FrameWithin(100 * time.Millisecond); ok && !f.IsComment() {
			t.Fatalf("frame after the run-finish: %+v", f)
		}
	})
}

// recorder is a testing.TB that records the first fatal message and stops
// the goroutine that calls it, as a real test's FailNow does.
type recorder struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.msg = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

// fatal runs fn against s as seen through a recorder and returns the
// message it failed with ("" when it did not fail).
func fatal(t *testing.T, fn func(r testing.TB)) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); fn(r) }()
	<-done
	return r.msg
}

// TestUnexpectedStatusFailsWithTheAnswer: the JSON helpers fail the test
// on a status they do not expect, naming the request and the answer.
func TestUnexpectedStatusFailsWithTheAnswer(t *testing.T) {
	s := servertest.Start(t, servertest.OpenStore(t, "memory"), servertest.Options{Tokens: "tok-0123456789=alice"})
	authed := s.As("tok-0123456789")
	authed.Chat("th", "simple hi")
	cases := map[string]struct {
		fn   func(s *servertest.Server)
		want []string
	}{
		"chat without a token": {func(s *servertest.Server) { s.Chat("th", "hi") }, []string{`chat "hi" on th: 401`}},
		"bad thread id":        {func(s *servertest.Server) { s.As("tok-0123456789").Chat("-x y", "hi") }, []string{"chat", "400", "invalid_thread_id"}},
		"cancel unknown":       {func(s *servertest.Server) { s.As("tok-0123456789").Cancel("nope") }, []string{"cancel nope: 404"}},
		"confirm unknown":      {func(s *servertest.Server) { s.As("tok-0123456789").Confirm("cr_x", `{"approved":true}`) }, []string{"confirm cr_x", "404"}},
		"create twice":         {func(s *servertest.Server) { s.As("tok-0123456789").CreateThread(`{"id":"th"}`, http.StatusCreated) }, []string{"200, want 201"}},
	}
	for name, c := range cases {
		msg := fatal(t, func(r testing.TB) { c.fn(s.WithTest(r)) })
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: failed with %q, want it to say %q", name, msg, w)
			}
		}
	}
}
