//go:build !linux

package worker

import (
	"net"
	"os"
	"syscall"
)

// signalSelf sends sig to this process.
func signalSelf(sig syscall.Signal) { _ = syscall.Kill(os.Getpid(), sig) }

// whenDelivered cannot observe a connection's delivery here: it reports
// false, and the caller fires at once.
func whenDelivered(net.Conn, func()) bool { return false }
