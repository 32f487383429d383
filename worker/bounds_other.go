//go:build !linux

package worker

import (
	"syscall"
	"time"
)

// tcpUserTimeout does nothing where TCP_USER_TIMEOUT does not exist; the
// keepalives and the server's own settings still bound a connection.
func tcpUserTimeout(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
