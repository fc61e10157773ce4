package regularfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// MaxSmallBytes bounds the files onegpu reads whole from a folder a user or a download provides:
// config.json, a weights index, tokenizer and generation files (Llama 3's tokenizer.json, the
// largest of them, holds 9 MB). A larger one is damage or not the file it is named after, and is
// refused before it is read: a sparse or endless file would otherwise exhaust memory.
const MaxSmallBytes = 64 << 20

// OpenLinked opens for reading the regular file that path is or, through symbolic links, leads
// to: a Hugging Face cache's snapshot folder is made of links into its blobs. Anything else
// (a folder, a named pipe, a device, a dangling link) is refused before it is opened, as a
// *NotRegularError naming where a link leads, and the opened file is compared with what was
// looked at (os.SameFile), so that a file swapped in between is refused too. Opening never waits
// for a named pipe's writer.
func OpenLinked(path string) (*os.File, error) {
	before, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !before.Mode().IsRegular() {
		return nil, notRegularLinked(path, before.Mode())
	}
	f, err := openReading(path)
	if err != nil {
		return nil, err
	}
	after, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !after.Mode().IsRegular() || !os.SameFile(before, after) {
		f.Close()
		return nil, fmt.Errorf("%s was replaced while it was opened", path)
	}
	return f, nil
}

// CheckLinked returns the size of the regular file path is or leads to (see OpenLinked), without
// opening it: a *NotRegularError for anything else, a *SizeError when it holds more than limit
// bytes, os.Stat's error (fs.ErrNotExist for a missing file or a dangling link) when it cannot be
// looked at.
func CheckLinked(path string, limit int64) (int64, error) {
	info, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	if !info.Mode().IsRegular() {
		return 0, notRegularLinked(path, info.Mode())
	}
	if info.Size() > limit {
		return 0, &SizeError{Path: path, Size: info.Size(), Want: limit, AtMost: true}
	}
	return info.Size(), nil
}

// ReadLinked reads whole the regular file path is or leads to (see OpenLinked), which must hold at
// most limit bytes (a *SizeError otherwise, before anything is read).
func ReadLinked(path string, limit int64) ([]byte, error) {
	f, err := OpenLinked(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readOpen(f, path, limit, true)
}

// notRegularLinked is the *NotRegularError of path, which is or leads to a file of mode.
func notRegularLinked(path string, mode os.FileMode) error {
	e := &NotRegularError{Path: path, Mode: mode}
	if info, err := os.Lstat(path); err == nil && info.Mode()&os.ModeSymlink != 0 {
		e.Followed = true
		if e.Target, err = filepath.EvalSymlinks(path); err != nil {
			e.Target, _ = os.Readlink(path)
		}
	}
	return e
}
