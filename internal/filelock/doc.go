// Package filelock holds exclusive locks on files across processes, released by the operating
// system when the holding process ends in any way (so a lock left by a killed process never
// blocks the next one): flock on unix, LockFileEx on Windows. On other systems (plan9, js, wasip1)
// there is no such lock: Supported is false and locking always succeeds.
//
// train locks a checkpoint folder with it (one writer per folder), and the heap sampler takes
// turns with other processes' measurements.
//
//	f, _ := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
//	if err := filelock.TryLock(f); errors.Is(err, filelock.ErrLocked) { ... another process holds it }
//	defer filelock.Unlock(f)
package filelock

import "errors"

// ErrLocked is returned by TryLock when another process (or another open file of this process)
// holds the lock.
var ErrLocked = errors.New("locked by another process")
