package worker

import (
	"net"
	"os"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// signalSelf sends sig to the calling thread of this process. A signal
// sent to the process would be taken by any of its threads, and this one
// could run on (and send a request) before the stop reaches it; sent to
// the thread, the stop takes it before the system call returns.
func signalSelf(sig syscall.Signal) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = syscall.Tgkill(os.Getpid(), syscall.Gettid(), sig)
}

// whenDelivered calls fn once the peer of conn has acknowledged every byte
// written to conn from now on, and at least one: an HTTP request whose
// writing just ended is flushed right after, and then it has reached the
// provider's host. It reports false, and calls nothing, when conn is not a
// TCP connection it can observe.
func whenDelivered(conn net.Conn, fn func()) bool {
	for {
		inner, ok := conn.(interface{ NetConn() net.Conn }) // TLS
		if !ok {
			break
		}
		conn = inner.NetConn()
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	info := func() (*unix.TCPInfo, bool) {
		var (
			ti   *unix.TCPInfo
			ierr error
		)
		if err := rc.Control(func(fd uintptr) { ti, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil || ierr != nil {
			return nil, false
		}
		return ti, true
	}
	before, ok := info()
	if !ok {
		return false
	}
	go func() {
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			now, ok := info()
			if !ok {
				return // the connection is gone: the request never arrived whole
			}
			if now.Bytes_acked > before.Bytes_acked && now.Notsent_bytes == 0 && now.Unacked == 0 {
				fn()
				return
			}
		}
	}()
	return true
}
