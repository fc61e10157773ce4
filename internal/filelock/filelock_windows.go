//go:build windows

package filelock

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// Supported reports whether this system has a lock that other processes respect.
const Supported = true

// lockedByte returns the position of the locked byte: 2^62, far beyond any content, because a
// Windows byte-range lock also stops other processes from reading the locked bytes, and a lock
// file's holder writes who it is for the others to read.
func lockedByte() *windows.Overlapped { return &windows.Overlapped{OffsetHigh: 1 << 30} }

func lockFile(f *os.File, flags uint32) error {
	return windows.LockFileEx(windows.Handle(f.Fd()), flags, 0, 1, 0, lockedByte())
}

// TryLock takes f's exclusive lock, or returns ErrLocked at once when another open file holds it.
func TryLock(f *os.File) error {
	err := lockFile(f, windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY)
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) || errors.Is(err, windows.ERROR_IO_PENDING) {
		return ErrLocked
	}
	return err
}

// Lock takes f's exclusive lock, waiting for its holder to release it.
func Lock(f *os.File) error { return lockFile(f, windows.LOCKFILE_EXCLUSIVE_LOCK) }

// Unlock releases f's lock (closing f releases it too).
func Unlock(f *os.File) {
	_ = windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, lockedByte())
}

// ProcessAlive reports whether a process with this pid exists and has not exited.
func ProcessAlive(pid int) bool {
	h, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, uint32(pid))
	if err != nil {
		// Another user's process cannot be opened, but it exists.
		return errors.Is(err, windows.ERROR_ACCESS_DENIED)
	}
	defer windows.CloseHandle(h)
	var code uint32
	if err := windows.GetExitCodeProcess(h, &code); err != nil {
		return true
	}
	const stillActive = 259 // STILL_ACTIVE
	return code == stillActive
}
