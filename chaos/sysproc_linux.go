package chaos

import "syscall"

// sysProcAttr puts a server in a process group of its own, so that a
// Ctrl-C meant for the harness reaches the harness alone (it then kills
// its servers), and has the kernel kill the server should the harness die
// without cleaning up.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
