//go:build unix

package testkit

import "syscall"

// MakeFIFO makes a named pipe at path, for tests that hand one where a regular file belongs (a
// read of it would wait for a writer forever).
func MakeFIFO(path string) error { return syscall.Mkfifo(path, 0o666) }
