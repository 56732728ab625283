// Package proc tells whether a process recorded by another run of this
// program still runs.
package proc

import "os"

// Gone reports whether the process pid of host, as recorded, is known not
// to run: host is this machine (self), and no process has that id, or it
// is this very process (which a record of an earlier run with the same id,
// in a container whose processes always start at the same pid, would
// name). A process of another host is never known gone: its lease says.
func Gone(self, host string, pid int) bool {
	if host == "" || host != self || pid <= 0 {
		return false
	}
	if pid == os.Getpid() {
		return true
	}
	return !running(pid)
}
