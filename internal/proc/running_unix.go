//go:build unix

package proc

import (
	"errors"
	"syscall"
)

// running reports whether a process has the id: signal 0 checks without
// sending anything (EPERM: it runs, as another user).
func running(pid int) bool {
	return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
