package storagetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
)

// Contract tests of MessageStore, ConfirmationStore and RunIndex.

func testMessages(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	ensure(t, s, "m", "owner")
	ensure(t, s, "other", "owner")
	if got, err := s.ListMessages(ctx, "m"); err != nil || len(got) != 0 {
		t.Fatalf("ListMessages of a new thread = %v, %v; want empty", got, err)
	}

	base := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	zone := time.FixedZone("X", -7*3600)
	add := func(m instanceai.Message) {
		t.Helper()
		if err := s.AddMessage(ctx, m); err != nil {
			t.Fatalf("AddMessage(%s): %v", m.ID, err)
		}
	}
	// Added out of time order, two with the same timestamp (insertion order
	// breaks the tie), one in another zone with nanoseconds.
	add(instanceai.Message{ID: "m3", ThreadID: "m", RunID: "run-3", Role: "user", Content: "third", CreatedAt: base.Add(3 * time.Second)})
	add(instanceai.Message{ID: "m1", ThreadID: "m", RunID: "run-1", Role: "user", Content: "first ☃ \"quoted\"\nline", CreatedAt: base.Add(time.Second).In(zone)})
	add(instanceai.Message{ID: "m2b", ThreadID: "m", Role: "user", Content: "tie, added first", CreatedAt: base.Add(2 * time.Second)})
	add(instanceai.Message{ID: "m2a", ThreadID: "m", Role: "user", Content: "tie, added second", CreatedAt: base.Add(2 * time.Second)})
	add(instanceai.Message{ID: "m0", ThreadID: "m", Role: "user", Content: "", CreatedAt: base.Add(123456789 * time.Nanosecond)})
	add(instanceai.Message{ID: "x1", ThreadID: "other", Role: "user", Content: "elsewhere", CreatedAt: base})

	got, err := s.ListMessages(ctx, "m")
	if err != nil {
		t.Fatalf("ListMessages: %v", err)
	}
	want := []instanceai.Message{
		{ID: "m0", ThreadID: "m", Role: "user", Content: "", CreatedAt: base.Add(123456 * time.Microsecond)},
		{ID: "m1", ThreadID: "m", RunID: "run-1", Role: "user", Content: "first ☃ \"quoted\"\nline", CreatedAt: base.Add(time.Second)},
		{ID: "m2b", ThreadID: "m", Role: "user", Content: "tie, added first", CreatedAt: base.Add(2 * time.Second)},
		{ID: "m2a", ThreadID: "m", Role: "user", Content: "tie, added second", CreatedAt: base.Add(2 * time.Second)},
		{ID: "m3", ThreadID: "m", RunID: "run-3", Role: "user", Content: "third", CreatedAt: base.Add(3 * time.Second)},
	}
	if len(got) != len(want) {
		t.Fatalf("ListMessages returned %d messages, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if !sameMessage(got[i], want[i]) || got[i].CreatedAt.Location() != time.UTC {
			t.Errorf("message %d = %+v, want %+v (in UTC)", i, got[i], want[i])
		}
	}

	// Heads: the same messages in the same order, sizes for contents.
	heads, err := s.MessageHeads(ctx, "m")
	if err != nil || len(heads) != len(want) {
		t.Fatalf("MessageHeads = %d messages, %v; want %d", len(heads), err, len(want))
	}
	for i, w := range want {
		h := heads[i]
		if h.ID != w.ID || h.RunID != w.RunID || h.Content != "" || h.Size != len(w.Content) || !h.CreatedAt.Equal(w.CreatedAt) {
			t.Errorf("head %d = %+v, want %s of %d bytes", i, h, w.ID, len(w.Content))
		}
	}
	// By id: those asked for (another thread's and unknown ones are not
	// found), whole, in the list's order.
	byID, err := s.MessagesByID(ctx, "m", []string{"m3", "x1", "m2b", "nope", "m1"})
	if err != nil || len(byID) != 3 || !sameMessage(byID[0], want[1]) || !sameMessage(byID[1], want[2]) || !sameMessage(byID[2], want[4]) {
		t.Fatalf("MessagesByID(m3, x1, m2b, nope, m1) = %+v, %v; want m1, m2b, m3", byID, err)
	}
	if none, err := s.MessagesByID(ctx, "m", nil); err != nil || len(none) != 0 {
		t.Fatalf("MessagesByID of no ids = %+v, %v", none, err)
	}
	for _, call := range []func() error{
		func() error { _, err := s.MessageHeads(ctx, "missing"); return err },
		func() error { _, err := s.MessagesByID(ctx, "missing", []string{"m1"}); return err },
		func() error { _, err := s.MessagesByID(ctx, "missing", nil); return err },
	} {
		if err := call(); !errors.Is(err, instanceai.ErrNotFound) {
			t.Errorf("a missing thread: %v, want ErrNotFound", err)
		}
	}

	// A zero CreatedAt is now; such a message sorts after the 2025 ones.
	before := time.Now()
	add(instanceai.Message{ID: "now", ThreadID: "m", Role: "user", Content: "just now"})
	got, err = s.ListMessages(ctx, "m")
	if err != nil || len(got) != len(want)+1 || got[len(got)-1].ID != "now" {
		t.Fatalf("ListMessages after a message of now = %+v, %v", got, err)
	}
	if at := got[len(got)-1].CreatedAt; at.Before(before.Add(-timeWindow)) || at.After(time.Now().Add(timeWindow)) {
		t.Errorf("CreatedAt of a message added now is %v", at)
	}

	// Ids are unique across threads; a duplicate changes nothing.
	for _, dup := range []instanceai.Message{
		{ID: "m1", ThreadID: "m", Role: "user", Content: "again"},
		{ID: "m1", ThreadID: "other", Role: "user", Content: "again"},
	} {
		if err := s.AddMessage(ctx, dup); err == nil || errors.Is(err, instanceai.ErrNotFound) {
			t.Errorf("AddMessage with the existing id m1 in thread %s: err = %v, want a duplicate error", dup.ThreadID, err)
		}
	}
	if got, _ := s.ListMessages(ctx, "m"); len(got) < 2 || got[1].Content != want[1].Content {
		t.Errorf("a duplicate AddMessage changed the stored message: %+v", got)
	}
	if got, err := s.ListMessages(ctx, "other"); err != nil || len(got) != 1 || got[0].ID != "x1" {
		t.Errorf("ListMessages(other) = %+v, %v; want only x1", got, err)
	}

	// Malformed messages and missing threads.
	for _, bad := range []instanceai.Message{
		{ThreadID: "m", Role: "user", Content: "no id"},
		{ID: "no-role", ThreadID: "m", Content: "no role"},
	} {
		if err := s.AddMessage(ctx, bad); err == nil {
			t.Errorf("AddMessage(%+v) succeeded", bad)
		}
	}
	if err := s.AddMessage(ctx, instanceai.Message{ID: "lost", ThreadID: "missing", Role: "user"}); !errors.Is(err, instanceai.ErrNotFound) {
		t.Errorf("AddMessage to a missing thread: err = %v, want ErrNotFound", err)
	}
	if _, err := s.ListMessages(ctx, "missing"); !errors.Is(err, instanceai.ErrNotFound) {
		t.Errorf("ListMessages of a missing thread: err = %v, want ErrNotFound", err)
	}
	if _, err := s.GetThread(ctx, "missing"); !errors.Is(err, instanceai.ErrNotFound) {
		t.Errorf("AddMessage created the missing thread: %v", err)
	}
}

func sameMessage(a, b instanceai.Message) bool {
	return a.ID == b.ID && a.ThreadID == b.ThreadID && a.RunID == b.RunID && a.Role == b.Role &&
		a.Content == b.Content && a.CreatedAt.Equal(b.CreatedAt)
}

// request is a confirmation-request payload as a producer sends it, with
// whitespace, key order and escapes that must come back byte for byte.
const request = `{"requestId":"REQ", "toolCallId":"call-1","toolName":"workflows","args":{"z":1,"a":[true,null]},` +
	`"severity":"warning","message":"Archive \u201cMy Workflow\u201d? ☃"}`

func newConfirmation(thread, id string, at time.Time) instanceai.Confirmation {
	return instanceai.Confirmation{RequestID: id, ThreadID: thread, RunID: "run-" + thread, AgentID: "agent-" + thread,
		ToolCallID: "call-" + id, OwnerID: "owner-" + thread, Request: json.RawMessage(request), CreatedAt: at}
}

func addConfirmation(t *testing.T, s instanceai.Store, c instanceai.Confirmation) {
	t.Helper()
	if err := s.AddConfirmation(context.Background(), c); err != nil {
		t.Fatalf("AddConfirmation(%s): %v", c.RequestID, err)
	}
}

func requestIDs(cs []instanceai.Confirmation) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.RequestID)
	}
	return out
}

func testConfirmations(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	ensure(t, s, "c", "owner")
	ensure(t, s, "other", "owner")
	if got, err := s.PendingConfirmations(ctx, "c"); err != nil || len(got) != 0 {
		t.Fatalf("PendingConfirmations of a new thread = %v, %v; want empty", got, err)
	}

	base := time.Date(2025, 4, 1, 8, 0, 0, 0, time.UTC)
	addConfirmation(t, s, newConfirmation("c", "r3", base.Add(3*time.Minute)))
	addConfirmation(t, s, newConfirmation("c", "r1", base.Add(time.Minute).In(time.FixedZone("Y", 3600))))
	addConfirmation(t, s, newConfirmation("c", "r2b", base.Add(2*time.Minute)))
	addConfirmation(t, s, newConfirmation("c", "r2a", base.Add(2*time.Minute)))
	addConfirmation(t, s, newConfirmation("other", "o1", base))

	// Stored as given, pending, without an answer; times in UTC.
	got, err := s.GetConfirmation(ctx, "r1")
	if err != nil {
		t.Fatalf("GetConfirmation: %v", err)
	}
	want := newConfirmation("c", "r1", base.Add(time.Minute))
	want.Status = instanceai.ConfirmationPending
	if !sameConfirmation(got, want) || got.CreatedAt.Location() != time.UTC {
		t.Fatalf("GetConfirmation = %+v (request %s)\nwant %+v (request %s)", got, got.Request, want, want.Request)
	}
	if got.Answer != nil || !got.AnsweredAt.IsZero() {
		t.Fatalf("a pending confirmation has answer %q at %v", got.Answer, got.AnsweredAt)
	}
	// A reader's changes to the bytes do not reach the store.
	got.Request[0] = '['
	if again, err := s.GetConfirmation(ctx, "r1"); err != nil || string(again.Request) != request {
		t.Fatalf("a change to a returned request reached the store: %s, %v", again.Request, err)
	}

	pending, err := s.PendingConfirmations(ctx, "c")
	if err != nil {
		t.Fatalf("PendingConfirmations: %v", err)
	}
	if ids := requestIDs(pending); !slices.Equal(ids, []string{"r1", "r2b", "r2a", "r3"}) {
		t.Fatalf("PendingConfirmations = %v, want [r1 r2b r2a r3] (oldest first, ties in insertion order)", ids)
	}
	for _, c := range pending {
		if string(c.Request) != request || c.Status != instanceai.ConfirmationPending || c.ThreadID != "c" {
			t.Fatalf("pending confirmation %+v", c)
		}
	}

	// Answering: the status and the answer bytes are kept, with the time.
	answer := json.RawMessage(`{"kind":"approval", "approved":true,"userInput":"go ☃"}`)
	before := time.Now()
	if err := s.AnswerConfirmation(ctx, "r2b", instanceai.ConfirmationApproved, answer); err != nil {
		t.Fatalf("AnswerConfirmation: %v", err)
	}
	got, err = s.GetConfirmation(ctx, "r2b")
	if err != nil {
		t.Fatalf("GetConfirmation: %v", err)
	}
	if got.Status != instanceai.ConfirmationApproved || string(got.Answer) != string(answer) || string(got.Request) != request {
		t.Fatalf("answered confirmation = %+v (answer %s)", got, got.Answer)
	}
	if got.AnsweredAt.Location() != time.UTC || got.AnsweredAt.Before(before.Add(-timeWindow)) || got.AnsweredAt.After(time.Now().Add(timeWindow)) {
		t.Fatalf("AnsweredAt = %v, want about now in UTC", got.AnsweredAt)
	}
	// A second answer, whatever it says, changes nothing.
	for _, status := range []string{instanceai.ConfirmationApproved, instanceai.ConfirmationDenied} {
		err := s.AnswerConfirmation(ctx, "r2b", status, json.RawMessage(`{"approved":false}`))
		if !errors.Is(err, instanceai.ErrAlreadyAnswered) {
			t.Fatalf("second AnswerConfirmation (%s): err = %v, want ErrAlreadyAnswered", status, err)
		}
	}
	if again, err := s.GetConfirmation(ctx, "r2b"); err != nil || !sameConfirmation(again, got) {
		t.Fatalf("after a second answer: %+v, %v; want %+v", again, err, got)
	}
	// An answer without a body is stored as none.
	if err := s.AnswerConfirmation(ctx, "r3", instanceai.ConfirmationDenied, nil); err != nil {
		t.Fatalf("AnswerConfirmation without a body: %v", err)
	}
	if got, err := s.GetConfirmation(ctx, "r3"); err != nil || got.Status != instanceai.ConfirmationDenied || got.Answer != nil || got.AnsweredAt.IsZero() {
		t.Fatalf("denied without a body: %+v, %v", got, err)
	}
	pending, err = s.PendingConfirmations(ctx, "c")
	if ids := requestIDs(pending); err != nil || !slices.Equal(ids, []string{"r1", "r2a"}) {
		t.Fatalf("PendingConfirmations after two answers = %v, %v; want [r1 r2a]", ids, err)
	}
	if other, err := s.PendingConfirmations(ctx, "other"); err != nil || !slices.Equal(requestIDs(other), []string{"o1"}) {
		t.Fatalf("PendingConfirmations(other) = %v, %v; want [o1]", requestIDs(other), err)
	}

	// Unknown ids, missing threads, malformed input.
	if _, err := s.GetConfirmation(ctx, "nope"); !errors.Is(err, instanceai.ErrNotFound) {
		t.Errorf("GetConfirmation(unknown): err = %v, want ErrNotFound", err)
	}
	if err := s.AnswerConfirmation(ctx, "nope", instanceai.ConfirmationApproved, nil); !errors.Is(err, instanceai.ErrNotFound) {
		t.Errorf("AnswerConfirmation(unknown): err = %v, want ErrNotFound", err)
	}
	if err := s.AddConfirmation(ctx, newConfirmation("missing", "lost", base)); !errors.Is(err, instanceai.ErrNotFound) {
		t.Errorf("AddConfirmation to a missing thread: err = %v, want ErrNotFound", err)
	}
	if _, err := s.PendingConfirmations(ctx, "missing"); !errors.Is(err, instanceai.ErrNotFound) {
		t.Errorf("PendingConfirmations of a missing thread: err = %v, want ErrNotFound", err)
	}
	dup := newConfirmation("other", "r1", base)
	if err := s.AddConfirmation(ctx, dup); err == nil || errors.Is(err, instanceai.ErrNotFound) {
		t.Errorf("AddConfirmation with an existing request id: err = %v, want a duplicate error", err)
	}
	if got, err := s.GetConfirmation(ctx, "r1"); err != nil || got.ThreadID != "c" {
		t.Errorf("a duplicate AddConfirmation changed the stored one: %+v, %v", got, err)
	}
	bad := map[string]instanceai.Confirmation{}
	c := newConfirmation("c", "", base)
	bad["empty request id"] = c
	c = newConfirmation("c", "bad-json", base)
	c.Request = json.RawMessage(`{"unterminated":`)
	bad["request not JSON"] = c
	c = newConfirmation("c", "no-request", base)
	c.Request = nil
	bad["no request"] = c
	c = newConfirmation("c", "answered", base)
	c.Status = instanceai.ConfirmationApproved
	bad["already answered"] = c
	c = newConfirmation("c", "with-answer", base)
	c.Answer = json.RawMessage(`true`)
	bad["with an answer"] = c
	for name, c := range bad {
		if err := s.AddConfirmation(ctx, c); err == nil {
			t.Errorf("AddConfirmation (%s) succeeded", name)
		}
	}
	for _, status := range []string{"", instanceai.ConfirmationPending} {
		if err := s.AnswerConfirmation(ctx, "r1", status, nil); err == nil || errors.Is(err, instanceai.ErrAlreadyAnswered) {
			t.Errorf("AnswerConfirmation to status %q: err = %v, want a refusal", status, err)
		}
	}
	if err := s.AnswerConfirmation(ctx, "r1", instanceai.ConfirmationApproved, json.RawMessage(`{nope`)); err == nil {
		t.Error("AnswerConfirmation with an answer that is not JSON succeeded")
	}
	// None of the refused answers touched r1.
	if got, err := s.GetConfirmation(ctx, "r1"); err != nil || got.Status != instanceai.ConfirmationPending || got.Answer != nil {
		t.Errorf("r1 after refused answers: %+v, %v; want pending", got, err)
	}
}

func sameConfirmation(a, b instanceai.Confirmation) bool {
	return a.RequestID == b.RequestID && a.ThreadID == b.ThreadID && a.RunID == b.RunID && a.AgentID == b.AgentID &&
		a.ToolCallID == b.ToolCallID && a.OwnerID == b.OwnerID && string(a.Request) == string(b.Request) &&
		a.Status == b.Status && string(a.Answer) == string(b.Answer) &&
		a.CreatedAt.Equal(b.CreatedAt) && a.AnsweredAt.Equal(b.AnsweredAt)
}

func testConcurrentAnswers(t *testing.T, s instanceai.Store) {
	ensure(t, s, "race", "owner")
	checkConcurrentAnswers(t, []instanceai.Store{s}, "race", 5, 12)
}

// checkConcurrentAnswers adds n confirmations to thread and has workers
// goroutines (spread over stores) answer each at once: exactly one answer
// wins, every other gets ErrAlreadyAnswered, and the stored answer is the
// winner's.
func checkConcurrentAnswers(t *testing.T, stores []instanceai.Store, thread string, n, workers int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		id := fmt.Sprintf("%s-req-%d", thread, i)
		addConfirmation(t, stores[0], newConfirmation(thread, id, time.Time{}))
		errs := make([]error, workers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				<-start
				status := instanceai.ConfirmationApproved
				if w%2 == 1 {
					status = instanceai.ConfirmationDenied
				}
				errs[w] = stores[w%len(stores)].AnswerConfirmation(ctx, id, status, json.RawMessage(`{"worker":`+strconv.Itoa(w)+`}`))
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for w, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("%s: workers %d and %d both answered", id, winner, w)
			case err == nil:
				winner = w
			case !errors.Is(err, instanceai.ErrAlreadyAnswered):
				t.Fatalf("%s: worker %d: err = %v, want nil or ErrAlreadyAnswered", id, w, err)
			}
		}
		if winner < 0 {
			t.Fatalf("%s: no answer won", id)
		}
		got, err := stores[len(stores)-1].GetConfirmation(ctx, id)
		if err != nil {
			t.Fatalf("GetConfirmation(%s): %v", id, err)
		}
		wantStatus := instanceai.ConfirmationApproved
		if winner%2 == 1 {
			wantStatus = instanceai.ConfirmationDenied
		}
		if got.Status != wantStatus || string(got.Answer) != `{"worker":`+strconv.Itoa(winner)+`}` {
			t.Fatalf("%s: stored %s %s, want worker %d's answer", id, got.Status, got.Answer, winner)
		}
	}
	if pending, err := stores[0].PendingConfirmations(ctx, thread); err != nil || len(pending) != 0 {
		t.Fatalf("PendingConfirmations after every answer = %v, %v; want none", requestIDs(pending), err)
	}
}

// runEvent is an event of run runID in the log, with a text that names it.
func runEvent(typ instanceai.EventType, runID, label string) instanceai.Event {
	ev := instanceai.Event{Type: typ, RunID: runID, AgentID: instanceai.OrchestratorAgentID(runID)}
	switch typ {
	case instanceai.TypeRunStart:
		ev.Payload = &instanceai.RunStart{MessageID: "msg-" + label}
	case instanceai.TypeRunFinish:
		ev.Payload = &instanceai.RunFinish{Status: instanceai.RunCompleted, Reason: label}
	default:
		ev.Payload = &instanceai.Text{Text: label}
	}
	return ev
}

func appendEvents(t *testing.T, s instanceai.Store, thread string, events ...instanceai.Event) {
	t.Helper()
	if _, err := s.Append(context.Background(), thread, events); err != nil {
		t.Fatalf("Append(%q): %v", thread, err)
	}
}

func testUnfinishedRuns(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	if runs, err := s.UnfinishedRuns(ctx); err != nil || len(runs) != 0 {
		t.Fatalf("UnfinishedRuns of an empty store = %v, %v", runs, err)
	}
	const start, finish, text = instanceai.TypeRunStart, instanceai.TypeRunFinish, instanceai.TypeTextBlock
	ensure(t, s, "b", "owner")
	ensure(t, s, "a", "owner")
	ensure(t, s, "quiet", "owner")
	// Thread b: done finished; open-2 started after open-1 (both open);
	// orphan has a finish without a start; dup has two starts.
	appendEvents(t, s, "b",
		runEvent(start, "done", "1"), runEvent(text, "done", "t"),
		runEvent(start, "open-2", "2"))
	appendEvents(t, s, "b",
		runEvent(finish, "done", "f"), runEvent(finish, "orphan", "f"),
		runEvent(start, "dup", "3"), runEvent(start, "dup", "3 again"))
	appendEvents(t, s, "a", runEvent(start, "a-run", "1"), runEvent(text, "a-run", "t"))
	// An unfinished run's id finished in another thread does not finish it.
	appendEvents(t, s, "a", runEvent(finish, "open-2", "elsewhere"))
	appendTexts(t, s, "quiet", 0, 3)

	want := []instanceai.RunRef{{ThreadID: "a", RunID: "a-run"}, {ThreadID: "b", RunID: "open-2"}, {ThreadID: "b", RunID: "dup"}}
	check := func(want []instanceai.RunRef) {
		t.Helper()
		runs, err := s.UnfinishedRuns(ctx)
		if err != nil {
			t.Fatalf("UnfinishedRuns: %v", err)
		}
		if !slices.Equal(runs, want) {
			t.Fatalf("UnfinishedRuns = %v, want %v", runs, want)
		}
	}
	check(want)
	// Finishing one (several events after its start, in a later batch)
	// takes it off the list.
	appendEvents(t, s, "b", runEvent(text, "dup", "x"), runEvent(finish, "dup", "f"))
	check(want[:2])
	if err := s.DeleteThread(ctx, "a"); err != nil {
		t.Fatalf("DeleteThread: %v", err)
	}
	check(want[1:2])
}

func testRunEvents(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	const start, finish, text = instanceai.TypeRunStart, instanceai.TypeRunFinish, instanceai.TypeTextBlock
	ensure(t, s, "re", "owner")
	ensure(t, s, "re-other", "owner")
	// Two runs interleaved, a detached event of r1 after its run-finish,
	// a run without a run-start, and r1's id in another thread.
	appendEvents(t, s, "re",
		runEvent(text, "loose", "loose-1"),
		runEvent(start, "r1", "r1-start"), runEvent(text, "r1", "r1-a"))
	appendEvents(t, s, "re-other", runEvent(start, "r1", "other-start"), runEvent(text, "r1", "other"))
	appendEvents(t, s, "re",
		runEvent(start, "r2", "r2-start"), runEvent(text, "r2", "r2-a"), runEvent(text, "r1", "r1-b"),
		runEvent(finish, "r1", "r1-finish"), runEvent(text, "loose", "loose-2"), runEvent(text, "r2", "r2-b"),
		runEvent(text, "r1", "r1-late"))

	log, err := s.ReadAfter(ctx, "re", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, runID := range []string{"r1", "r2", "loose"} {
		var want []instanceai.StoredEvent
		for _, se := range log {
			if se.Event.RunID == runID {
				want = append(want, se)
			}
		}
		got, err := s.RunEvents(ctx, "re", runID)
		if err != nil {
			t.Fatalf("RunEvents(%s): %v", runID, err)
		}
		if len(got) != len(want) {
			t.Fatalf("RunEvents(%s) returned %d events, want %d", runID, len(got), len(want))
		}
		for i := range want {
			g, _ := json.Marshal(&got[i].Event)
			w, _ := json.Marshal(&want[i].Event)
			if got[i].Seq != want[i].Seq || string(g) != string(w) {
				t.Fatalf("RunEvents(%s)[%d] = %d %s, want %d %s", runID, i, got[i].Seq, g, want[i].Seq, w)
			}
		}
	}
	if got, err := s.RunEvents(ctx, "re", "unknown"); err != nil || len(got) != 0 {
		t.Errorf("RunEvents of an unknown run = %v, %v; want empty", got, err)
	}
	if _, err := s.RunEvents(ctx, "missing", "r1"); !errors.Is(err, instanceai.ErrNotFound) {
		t.Errorf("RunEvents of a missing thread: err = %v, want ErrNotFound", err)
	}
}

func testDeleteCascadesToRecords(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	for _, id := range []string{"doomed", "survivor"} {
		ensure(t, s, id, "owner")
		appendEvents(t, s, id, runEvent(instanceai.TypeRunStart, "run-"+id, "s"))
		if err := s.AddMessage(ctx, instanceai.Message{ID: "msg-" + id, ThreadID: id, RunID: "run-" + id, Role: "user", Content: id}); err != nil {
			t.Fatalf("AddMessage: %v", err)
		}
		addConfirmation(t, s, newConfirmation(id, "req-"+id, time.Time{}))
		addConfirmation(t, s, newConfirmation(id, "answered-"+id, time.Time{}))
		if err := s.AnswerConfirmation(ctx, "answered-"+id, instanceai.ConfirmationDenied, nil); err != nil {
			t.Fatalf("AnswerConfirmation: %v", err)
		}
	}
	if err := s.DeleteThread(ctx, "doomed"); err != nil {
		t.Fatalf("DeleteThread: %v", err)
	}
	if _, err := s.ListMessages(ctx, "doomed"); !errors.Is(err, instanceai.ErrNotFound) {
		t.Errorf("ListMessages after delete: err = %v, want ErrNotFound", err)
	}
	if _, err := s.PendingConfirmations(ctx, "doomed"); !errors.Is(err, instanceai.ErrNotFound) {
		t.Errorf("PendingConfirmations after delete: err = %v, want ErrNotFound", err)
	}
	for _, id := range []string{"req-doomed", "answered-doomed"} {
		if _, err := s.GetConfirmation(ctx, id); !errors.Is(err, instanceai.ErrNotFound) {
			t.Errorf("GetConfirmation(%s) after delete: err = %v, want ErrNotFound", id, err)
		}
	}
	if err := s.AnswerConfirmation(ctx, "req-doomed", instanceai.ConfirmationApproved, nil); !errors.Is(err, instanceai.ErrNotFound) {
		t.Errorf("AnswerConfirmation after delete: err = %v, want ErrNotFound", err)
	}
	if runs, err := s.UnfinishedRuns(ctx); err != nil || !slices.Equal(runs, []instanceai.RunRef{{ThreadID: "survivor", RunID: "run-survivor"}}) {
		t.Errorf("UnfinishedRuns after delete = %v, %v; want only the survivor's", runs, err)
	}
	if _, err := s.RunEvents(ctx, "doomed", "run-doomed"); !errors.Is(err, instanceai.ErrNotFound) {
		t.Errorf("RunEvents after delete: err = %v, want ErrNotFound", err)
	}

	// The same thread id starts empty, and the ids of the deleted records
	// are free again: nothing of them is left behind.
	ensure(t, s, "doomed", "owner")
	if got, err := s.ListMessages(ctx, "doomed"); err != nil || len(got) != 0 {
		t.Errorf("recreated thread has messages %+v, %v", got, err)
	}
	if got, err := s.PendingConfirmations(ctx, "doomed"); err != nil || len(got) != 0 {
		t.Errorf("recreated thread has pending confirmations %v, %v", requestIDs(got), err)
	}
	if err := s.AddMessage(ctx, instanceai.Message{ID: "msg-doomed", ThreadID: "doomed", Role: "user", Content: "new"}); err != nil {
		t.Errorf("AddMessage reusing a deleted message's id: %v", err)
	}
	addConfirmation(t, s, newConfirmation("doomed", "answered-doomed", time.Time{}))
	if got, err := s.GetConfirmation(ctx, "answered-doomed"); err != nil || got.Status != instanceai.ConfirmationPending {
		t.Errorf("reused request id = %+v, %v; want a new pending confirmation", got, err)
	}

	// The other thread kept everything.
	if got, err := s.ListMessages(ctx, "survivor"); err != nil || len(got) != 1 || got[0].Content != "survivor" {
		t.Errorf("survivor's messages = %+v, %v", got, err)
	}
	if got, err := s.PendingConfirmations(ctx, "survivor"); err != nil || !slices.Equal(requestIDs(got), []string{"req-survivor"}) {
		t.Errorf("survivor's pending confirmations = %v, %v", requestIDs(got), err)
	}
	if got, err := s.GetConfirmation(ctx, "answered-survivor"); err != nil || got.Status != instanceai.ConfirmationDenied {
		t.Errorf("survivor's answered confirmation = %+v, %v", got, err)
	}
}
