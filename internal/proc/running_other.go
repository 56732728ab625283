//go:build !unix

package proc

// running cannot tell here: a process is taken as running, and its record
// lives until its lease runs out.
func running(int) bool { return true }
