package netbus

import (
	"context"
	"errors"
	"testing"
	"time"
)

var (
	errClosed   = errors.New("test bus: closed")
	errTooLarge = errors.New("test bus: too large")
)

func TestCheckPublish(t *testing.T) {
	b := New(4, errClosed, errTooLarge)
	if err := b.CheckPublish([]byte("four")); err != nil {
		t.Errorf("a payload at the limit: %v", err)
	}
	err := b.CheckPublish([]byte("fives"))
	if !errors.Is(err, errTooLarge) || err.Error() != "test bus: too large: 5 bytes, the limit is 4" {
		t.Errorf("a payload over the limit: %v", err)
	}
	if err := b.Close(func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := b.CheckPublish(nil); err != errClosed {
		t.Errorf("after Close: %v, want the closed error", err)
	}
}

// TestCloseReleasesOnce: release runs at the first Close only, after Done
// is closed, and its error is that Close's.
func TestCloseReleasesOnce(t *testing.T) {
	b := New(1, errClosed, errTooLarge)
	released := 0
	release := func() error {
		released++
		select {
		case <-b.Done():
		default:
			t.Error("release ran before Done was closed")
		}
		return errors.New("release failed")
	}
	if err := b.Close(release); err == nil || err.Error() != "release failed" {
		t.Errorf("first Close: %v, want release's error", err)
	}
	if err := b.Close(release); err != nil {
		t.Errorf("second Close: %v, want nil", err)
	}
	if released != 1 {
		t.Errorf("release ran %d times, want once", released)
	}
}

// TestCloseEndsListen: a session blocked on its connection is interrupted
// by Close, and Listen returns the closed error.
func TestCloseEndsListen(t *testing.T) {
	b := New(1, errClosed, errTooLarge)
	blocked := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- b.Listen(context.Background(), func(ctx context.Context) (bool, error) {
			close(blocked)
			<-ctx.Done()
			return true, ctx.Err()
		}, func(bool, error) {})
	}()
	<-blocked
	_ = b.Close(func() error { return nil })
	select {
	case err := <-done:
		if err != errClosed {
			t.Errorf("Listen after Close: %v, want the closed error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end Listen")
	}
	if err := b.Listen(context.Background(), func(context.Context) (bool, error) {
		t.Error("a session ran on a closed bus")
		return false, nil
	}, func(bool, error) {}); err != errClosed {
		t.Errorf("Listen on a closed bus: %v", err)
	}
}
