//go:build !linux

package chaos

import "syscall"

// sysProcAttr puts a server in a process group of its own, so that a
// Ctrl-C meant for the harness reaches the harness alone.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
