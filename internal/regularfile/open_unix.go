//go:build unix

package regularfile

import (
	"os"
	"syscall"
)

// open opens path without following a link at its last element (O_NOFOLLOW: the open fails on a
// link) and without waiting for a writer of a named pipe (O_NONBLOCK, which changes nothing for a
// regular file's reads and writes).
func open(path string, flag int, perm os.FileMode) (*os.File, error) {
	return os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, perm)
}

// Links returns the number of names (hard links) of the file info describes, and whether the
// system says.
func Links(info os.FileInfo) (uint64, bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return uint64(st.Nlink), true // Nlink is uint16, uint32 or uint64, by system
}

// openReading opens path for reading, following links, without waiting for a named pipe's writer.
func openReading(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}
