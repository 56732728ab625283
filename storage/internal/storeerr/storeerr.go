// Package storeerr marks the SQL stores' errors with the core's sentinels
// (instanceai.ErrClosed, instanceai.ErrStorageUnavailable), so that what
// a driver's error means is decided here, beside the drivers, and nowhere
// above the stores.
package storeerr

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"syscall"

	"github.com/threadline/threadline/instanceai"
)

// Errorf is fmt.Errorf whose error is marked as Mark marks it: every
// error a SQL store returns is made by it.
func Errorf(format string, args ...any) error {
	return Mark(fmt.Errorf(format, args...))
}

// Mark returns err marked with the sentinel it is a case of, its message
// and chain kept: ErrClosed for a call to a closed database, and
// ErrStorageUnavailable for a database the store cannot reach. Any other
// error, nil and an error marked already are returned as they are.
func Mark(err error) error {
	switch {
	case err == nil, errors.Is(err, instanceai.ErrClosed), errors.Is(err, instanceai.ErrStorageUnavailable):
		return err
	case closed(err):
		return &marked{err: err, as: instanceai.ErrClosed}
	case Unavailable(err):
		return &marked{err: err, as: instanceai.ErrStorageUnavailable}
	}
	return err
}

// marked is an error that also matches a sentinel.
type marked struct {
	err error
	as  error
}

func (m *marked) Error() string   { return m.err.Error() }
func (m *marked) Unwrap() []error { return []error{m.err, m.as} }

// closedTexts are the texts of database/sql's errors for a call to a
// closed *sql.DB, or to a statement prepared on it (closed with it), which
// it does not export.
var closedTexts = []string{"sql: database is closed", "sql: statement is closed"}

// closed reports whether err is database/sql refusing a call to a closed
// database, however the store wrapped it.
func closed(err error) bool {
	msg := err.Error()
	return slices.ContainsFunc(closedTexts, func(t string) bool { return strings.Contains(msg, t) })
}

// Unavailable reports whether err is the store failing to reach its
// database (a refused or cut connection, a server shutting down or out of
// connections) rather than a fault of the request or of the code. lib/pq
// reports a connection the server closed as a bare io.EOF. The SQL
// drivers' errors carry their SQLSTATE: classes 08 (connection exception),
// 53 (insufficient resources) and 57P (operator intervention: shutdown,
// cannot connect now).
func Unavailable(err error) bool {
	var netErr net.Error
	var state interface{ SQLState() string }
	switch {
	case errors.As(err, &netErr),
		errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrConnDone),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	case errors.As(err, &state):
		code := state.SQLState()
		return strings.HasPrefix(code, "08") || strings.HasPrefix(code, "53") || strings.HasPrefix(code, "57P")
	}
	return false
}
