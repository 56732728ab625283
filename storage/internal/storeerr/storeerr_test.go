package storeerr

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/lib/pq"

	"github.com/threadline/threadline/instanceai"
)

// A store that cannot reach its database says so with
// instanceai.ErrStorageUnavailable (which the HTTP surfaces answer with a
// 503 storage_unavailable); a closed one with instanceai.ErrClosed; other
// errors are left as they are. The message and the driver's error stay.
func TestMarkFollowsTheDriversErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want error // nil: unmarked
	}{
		{"refused", fmt.Errorf("postgres: append: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), instanceai.ErrStorageUnavailable},
		{"bad connection", fmt.Errorf("sqlite: read: %w", driver.ErrBadConn), instanceai.ErrStorageUnavailable},
		{"cut mid-query", fmt.Errorf("postgres: read: %w", io.ErrUnexpectedEOF), instanceai.ErrStorageUnavailable},
		{"admin shutdown", fmt.Errorf("postgres: %w", &pq.Error{Code: "57P01"}), instanceai.ErrStorageUnavailable},
		{"connection failure", &pq.Error{Code: "08006"}, instanceai.ErrStorageUnavailable},
		{"too many connections", &pq.Error{Code: "53300"}, instanceai.ErrStorageUnavailable},
		{"closed database", fmt.Errorf("sqlite: get thread %q: %w", "t", errors.New("sql: database is closed")), instanceai.ErrClosed},
		{"closed statement", fmt.Errorf("postgres: append: %w", errors.New("sql: statement is closed")), instanceai.ErrClosed},
		{"syntax error", &pq.Error{Code: "42601"}, nil},
		{"a bug", errors.New("nil map"), nil},
	} {
		got := Mark(c.err)
		for _, sentinel := range []error{instanceai.ErrStorageUnavailable, instanceai.ErrClosed} {
			if errors.Is(got, sentinel) != (sentinel == c.want) {
				t.Errorf("%s: errors.Is(%v, %v) = %v", c.name, got, sentinel, !(sentinel == c.want))
			}
		}
		if got.Error() != c.err.Error() || !errors.Is(got, c.err) {
			t.Errorf("%s: marked as %q, lost %q", c.name, got, c.err)
		}
	}
	if Mark(nil) != nil {
		t.Error("Mark(nil) is not nil")
	}
}
