package bound

import (
	"testing"

	"github.com/threadline/threadline/instanceai"
)

func TestSize(t *testing.T) {
	for n, want := range map[int]string{
		0: "0 bytes", 1023: "1023 bytes", 1 << 10: "1 KiB", 1536: "1.5 KiB", 64 << 10: "64 KiB",
		4 << 20: "4 MiB", 3 << 19: "1.5 MiB", 4<<20 + 64<<10: "4.1 MiB",
	} {
		if got := Size(n); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestBounds(t *testing.T) {
	if Event(0) != instanceai.DefaultMaxEventBytes || Event(-1) != instanceai.DefaultMaxEventBytes || Event(100) != 100 {
		t.Fatal("Event does not take the core's default for 0")
	}
	if Stream(1<<20) != 1<<20+Envelope {
		t.Fatal("Stream is not the event's bound and the envelope")
	}
	if got, want := Named(0), "4 MiB, the bound on one event (--max-event-bytes)"; got != want {
		t.Fatalf("Named(0) = %q, want %q", got, want)
	}
}
