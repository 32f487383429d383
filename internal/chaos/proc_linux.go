package chaos

import "syscall"

// childAttr puts a child in a process group of its own (a signal to the
// harness's terminal does not reach it; the harness decides when it ends)
// and has the kernel kill it if the harness dies first, so that no server
// or worker outlives an interrupted run.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
