//go:build unix

package approvals

import (
	"os"
	"syscall"
)

// fileOwner returns the uid that owns the file info describes.
func fileOwner(info os.FileInfo) (uid int, ok bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
