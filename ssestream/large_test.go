package ssestream

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// largeFrame is a single-line payload a few chunks long and what a stream
// writes of it with id 7.
func largeFrame() (data []byte, wire string) {
	data = []byte(`"` + strings.Repeat("abcdefgh", 16<<10) + `"`)
	return data, "id: 7\ndata: " + string(data) + "\n\n"
}

// writeLarge writes the frame on a stream over one end of a pipe and
// flushes it, counting the reloads; the result arrives on the channel.
func writeLarge(conn net.Conn, writeTimeout time.Duration, data []byte, reloads *atomic.Int32) <-chan error {
	s := &Stream{conn: conn, writeTimeout: writeTimeout}
	done := make(chan error, 1)
	go func() {
		reload := func() ([]byte, error) {
			reloads.Add(1)
			return bytes.Clone(data), nil
		}
		err := s.DataReloadable(7, bytes.Clone(data), reload)
		if err == nil {
			err = s.Flush()
		}
		done <- err
	}()
	return done
}

// A large frame is written in chunks. A client that keeps reading gets it;
// one that pauses in the middle for longer than the stall probe gets the
// same bytes, the rest of the frame read again, once however often it
// pauses.
func TestLargeFrameIsReloadedAfterAStall(t *testing.T) {
	data, wire := largeFrame()
	for _, pauses := range [][]time.Duration{{0, 0}, {3 * stallProbe, 0}, {3 * stallProbe, 3 * stallProbe}} {
		pause := pauses[0]
		server, client := net.Pipe()
		var reloads atomic.Int32
		done := writeLarge(server, 10*time.Second, data, &reloads)
		got := make([]byte, len(wire))
		at := 0
		for _, p := range pauses {
			// The head and more than a chunk, then a pause.
			at += 20 << 10
			if _, err := io.ReadFull(client, got[at-20<<10:at]); err != nil {
				t.Fatal(err)
			}
			time.Sleep(p)
		}
		if _, err := io.ReadFull(client, got[at:]); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("pauses %v: %v", pauses, err)
		}
		if string(got) != wire {
			t.Fatalf("pauses %v: the client read other bytes than the frame", pauses)
		}
		// Without the pause a busy machine may still stall a chunk past
		// the probe: the bytes must be right either way.
		if n := reloads.Load(); (pause > 0 && n == 0) || n > 1 {
			t.Fatalf("pauses %v: %d reloads, want one (none allowed without a pause)", pauses, n)
		}
		server.Close()
		client.Close()
	}
}

// A client that never reads ends the write at the deadline, with no
// reload; a reload that returns other bytes ends it too.
func TestLargeFrameWriteEndsAtTheDeadline(t *testing.T) {
	data, _ := largeFrame()
	server, client := net.Pipe()
	defer client.Close()
	var reloads atomic.Int32
	if err := <-writeLarge(server, 2*stallProbe, data, &reloads); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a client that never reads: %v, want a deadline error", err)
	}
	if n := reloads.Load(); n != 0 {
		t.Fatalf("%d reloads for a frame never written", n)
	}

	server2, client2 := net.Pipe()
	defer client2.Close()
	s := &Stream{conn: server2, writeTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() {
		done <- s.DataReloadable(7, data, func() ([]byte, error) { return data[1:], nil })
	}()
	head := make([]byte, 20<<10)
	if _, err := io.ReadFull(client2, head); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * stallProbe)
	go io.Copy(io.Discard, client2)
	if err := <-done; err == nil || !strings.Contains(err.Error(), "reloaded frame") {
		t.Fatalf("a reload of other bytes: %v", err)
	}
}

// A frame read in parts as it is written: a client that keeps reading
// gets it with parts growing; one that pauses gets the same bytes, and
// the part after the stall starts where the write stopped, small again.
func TestDataPartsAfterAStall(t *testing.T) {
	data := []byte(`"` + strings.Repeat("0123456789", 60_000) + `"`) // 600 KB
	wire := "id: 9\ndata: " + string(data) + "\n\n"
	for _, pause := range []time.Duration{0, 3 * stallProbe} {
		server, client := net.Pipe()
		s := &Stream{conn: server, writeTimeout: 10 * time.Second}
		type call struct{ off, n int }
		var mu sync.Mutex
		var calls []call
		done := make(chan error, 1)
		go func() {
			err := s.DataParts(9, len(data), func(off, n int) ([]byte, error) {
				mu.Lock()
				calls = append(calls, call{off, n})
				mu.Unlock()
				return bytes.Clone(data[off : off+n]), nil
			})
			if err == nil {
				err = s.Flush()
			}
			done <- err
		}()
		got := make([]byte, len(wire))
		first := 100 << 10 // into the second part
		if _, err := io.ReadFull(client, got[:first]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(pause)
		if _, err := io.ReadFull(client, got[first:]); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("pause %v: %v", pause, err)
		}
		if string(got) != wire {
			t.Fatalf("pause %v: the client read other bytes than the frame", pause)
		}
		mu.Lock()
		end := 0
		for i, c := range calls {
			if c.off > end || c.n > maxPart || (i == 0 && c.n != firstPart) {
				t.Fatalf("pause %v: parts %v", pause, calls)
			}
			end = max(end, c.off+c.n)
		}
		// A pause past the probe makes a part start again where the
		// write stopped, before the end of the part it had read.
		restarted := false
		for i := 1; i < len(calls); i++ {
			restarted = restarted || calls[i].off < calls[i-1].off+calls[i-1].n
		}
		if end != len(data) || (pause > 0 && !restarted) {
			t.Fatalf("pause %v: parts %v", pause, calls)
		}
		mu.Unlock()
		server.Close()
		client.Close()
	}
}
