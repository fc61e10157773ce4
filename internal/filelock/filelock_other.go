//go:build !unix && !windows

package filelock

import "os"

// Supported reports whether this system has a lock that other processes respect: not this one.
const Supported = false

// TryLock succeeds without locking: this system has no lock other processes respect.
func TryLock(f *os.File) error { return nil }

// Lock succeeds without locking: this system has no lock other processes respect.
func Lock(f *os.File) error { return nil }

// Unlock does nothing.
func Unlock(f *os.File) {}

// ProcessAlive cannot tell on this system and says yes.
func ProcessAlive(pid int) bool { return true }
