//go:build !linux

package chaos

import "syscall"

// childAttr puts a child in a process group of its own: a signal to the
// harness's terminal does not reach it, and the harness decides when it
// ends.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
