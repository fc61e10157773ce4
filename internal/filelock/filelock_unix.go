//go:build unix

package filelock

import (
	"errors"
	"os"
	"syscall"
)

// Supported reports whether this system has a lock that other processes respect.
const Supported = true

// TryLock takes f's exclusive lock, or returns ErrLocked at once when another open file holds it.
func TryLock(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return ErrLocked
	}
	return err
}

// Lock takes f's exclusive lock, waiting for its holder to release it.
func Lock(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_EX) }

// Unlock releases f's lock (closing f releases it too).
func Unlock(f *os.File) { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }

// ProcessAlive reports whether a process with this pid exists.
func ProcessAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
