package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/onegpu/onegpu/internal/filelock"
	"github.com/onegpu/onegpu/internal/regularfile"
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
	return fmt.Sprintf("checkpoint folder %s is in use by another run (%s): wait for it to finish or use another checkpoint folder (RunOptions.CheckpointDir)",
		e.Dir, e.Holder)
}

// lockFolder takes dir's lock or returns a *FolderLockedError naming the holder. The lock is a
// file lock on dir/onegpu.lock (flock on unix, LockFileEx on Windows; see internal/filelock): the
// system drops it when its process ends in any way, so a lock file left by a killed run never
// blocks the next one.
//
// The lock file is the folder's, and only onegpu's: it is opened without following a symbolic
// link (a link there would make the holder's line overwrite the file it points to), it must have
// no other name (a hard link), and what it holds must be empty or a holder's line. Anything else
// is refused, unchanged.
func lockFolder(dir string) (*folderLock, error) {
	path := filepath.Join(dir, lockName)
	f, err := regularfile.Open(path, os.O_RDWR|os.O_CREATE, 0o666)
	var notRegular *regularfile.NotRegularError
	if errors.As(err, &notRegular) {
		return nil, fmt.Errorf("checkpoint folder %s: the lock file %v; onegpu writes its lock file itself and never through a link: "+
			"remove %s and run again (nothing was changed)", dir, err, path)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint folder %s is not writable: %w", dir, err)
	}
	fail := func(err error) (*folderLock, error) {
		f.Close()
		return nil, err
	}
	info, err := f.Stat()
	if err != nil {
		return fail(fmt.Errorf("checkpoint folder %s: %w", dir, err))
	}
	if links, ok := regularfile.Links(info); ok && links > 1 {
		return fail(fmt.Errorf("checkpoint folder %s: the lock file %s has %d names (hard links): writing it would change the other names' "+
			"file too; remove %s and run again (nothing was changed)", dir, path, links, path))
	}
	if err := filelock.TryLock(f); err != nil {
		if errors.Is(err, filelock.ErrLocked) {
			return fail(&FolderLockedError{Dir: dir, Holder: readHolder(path)})
		}
		return fail(fmt.Errorf("locking checkpoint folder %s: %w", dir, err))
	}
	// Locked: no live holder writes it now. It holds nothing, or what an earlier holder wrote.
	if err := checkHolderLine(f, path); err != nil {
		filelock.Unlock(f)
		return fail(fmt.Errorf("checkpoint folder %s: %w (nothing was changed)", dir, err))
	}
	// Say who holds it, for the message a second writer gets.
	holder := fmt.Sprintf("pid %d, %s, since %s", os.Getpid(), strings.Join(os.Args, " "), time.Now().Format(time.DateTime))
	if len(holder) > maxHolderLine-1 {
		holder = holder[:maxHolderLine-1]
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(holder+"\n"), 0)
	}
	if err != nil {
		filelock.Unlock(f)
		return fail(fmt.Errorf("checkpoint folder %s is not writable: %w", dir, err))
	}
	return &folderLock{f: f}, nil
}

// maxHolderLine bounds the line a holder writes in the lock file (its command line may be long).
const maxHolderLine = 4096

// checkHolderLine returns an error unless the lock file f is empty or holds one holder's line
// ("pid N, ..."), as onegpu writes it: a file of someone else's named onegpu.lock is not emptied.
func checkHolderLine(f *os.File, path string) error {
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if info.Size() == 0 {
		return nil
	}
	raw := make([]byte, min(info.Size(), maxHolderLine+1))
	n, err := f.ReadAt(raw, 0)
	if err != nil && n < len(raw) {
		return fmt.Errorf("reading the lock file %s: %w", path, err)
	}
	line := string(raw[:n])
	var pid int
	if _, err := fmt.Sscanf(line, "pid %d,", &pid); err != nil || info.Size() > maxHolderLine || strings.Count(line, "\n") > 1 {
		return fmt.Errorf("the lock file %s holds %d bytes that are not a holder's line (\"pid N, command, since time\"): it is not "+
			"onegpu's lock file, and onegpu does not overwrite it; move it out of the folder", path, info.Size())
	}
	return nil
}

// readHolder returns what the lock's holder wrote, waiting a moment for a holder that has just
// taken the lock and not written yet (the file is then empty, or still names a process that died
// holding it).
func readHolder(path string) string {
	for range 100 {
		raw, _ := regularfile.ReadAtMost(path, maxHolderLine)
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
