//go:build linux

package mcp

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// forbidInspection marks this process non-dumpable (prctl PR_SET_DUMPABLE
// 0), once, before its first stdio server starts. A stdio server runs as
// the worker's user, and any process of that user may otherwise read
// /proc/<worker>/environ (DATABASE_URL, TEMPORAL_API_KEY, PAYMENTS_API_KEY,
// the bearer tokens) and its memory, or attach to it with ptrace. The
// kernel refuses all of that to a non-dumpable process's peers, and the
// server, which gets its own dumpable state at exec, stays debuggable.
// What it also changes: the worker writes no core dump, a debugger or
// strace of the same user cannot attach to it, and the worker itself can no
// longer open its own /proc/self/environ, auxv or io (nothing in oncerun
// does; /proc/self/stat, status, limits, fd and maps, which the process
// metrics read, stay open to it). Root, which holds CAP_SYS_PTRACE, is not
// kept out: a worker running as root gives its stdio servers root.
var forbidInspection = sync.OnceValue(func() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl PR_SET_DUMPABLE 0: %w", err)
	}
	return nil
})
