package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/onegpu/onegpu/internal/filelock"
)

// lockName is the lock file of a checkpoint folder.
const lockName = "onegpu.lock"

// folderLock is an exclusive lock on a checkpoint folder, held by one process.
type folderLock struct{ f *os.File }

// FolderLockedError is returned when another process holds a checkpoint folder.
type FolderLockedError struct {
	Dir    string
	Holder string // what the holder wrote: its pid, command and start time
}

func (e *FolderLockedError) Error() string {
	return fmt.Sprintf("checkpoint folder %s is in use by another run (%s): wait for it to finish or use another --checkpoint folder",
		e.Dir, e.Holder)
}

// lockFolder takes dir's lock or returns a *FolderLockedError naming the holder. The lock is a
// file lock on dir/onegpu.lock (flock on unix, LockFileEx on Windows; see internal/filelock): the
// system drops it when its process ends in any way, so a lock file left by a killed run never
// blocks the next one.
func lockFolder(dir string) (*folderLock, error) {
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, fmt.Errorf("checkpoint folder %s is not writable: %w", dir, err)
	}
	if err := filelock.TryLock(f); err != nil {
		f.Close()
		if errors.Is(err, filelock.ErrLocked) {
			return nil, &FolderLockedError{Dir: dir, Holder: readHolder(path)}
		}
		return nil, fmt.Errorf("locking checkpoint folder %s: %w", dir, err)
	}
	// Say who holds it, for the message a second writer gets.
	holder := fmt.Sprintf("pid %d, %s, since %s", os.Getpid(), strings.Join(os.Args, " "), time.Now().Format(time.DateTime))
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(holder+"\n"), 0)
	}
	if err != nil {
		filelock.Unlock(f)
		f.Close()
		return nil, fmt.Errorf("checkpoint folder %s is not writable: %w", dir, err)
	}
	return &folderLock{f: f}, nil
}

// readHolder returns what the lock's holder wrote, waiting a moment for a holder that has just
// taken the lock and not written yet (the file is then empty, or still names a process that died
// holding it).
func readHolder(path string) string {
	for range 100 {
		raw, _ := os.ReadFile(path)
		holder := strings.TrimSpace(string(raw))
		var pid int
		if _, err := fmt.Sscanf(holder, "pid %d", &pid); err == nil && filelock.ProcessAlive(pid) {
			return holder
		}
		time.Sleep(10 * time.Millisecond)
	}
	return "a process that did not say which"
}

func (l *folderLock) release() {
	// The file stays: removing it would let a third process lock a new file while a second one
	// holds the old one.
	_ = l.f.Truncate(0) // a finished run holds nothing
	filelock.Unlock(l.f)
	l.f.Close()
}
