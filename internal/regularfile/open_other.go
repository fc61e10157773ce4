//go:build !unix

package regularfile

import (
	"fmt"
	"os"
)

// open refuses a path that is not a regular file before opening it (Lstat), and a file swapped in
// between the look and the open (os.SameFile of the two).
func open(path string, flag int, perm os.FileMode) (*os.File, error) {
	before, err := os.Lstat(path)
	switch {
	case err == nil && !before.Mode().IsRegular():
		return nil, notRegular(path, before.Mode())
	case err != nil && !os.IsNotExist(err):
		return nil, err
	}
	f, err := os.OpenFile(path, flag, perm)
	if err != nil {
		return nil, err
	}
	if before == nil {
		// Created just now, or by someone else in between: look again.
		if before, err = os.Lstat(path); err != nil || !before.Mode().IsRegular() {
			f.Close()
			if err != nil {
				return nil, err
			}
			return nil, notRegular(path, before.Mode())
		}
	}
	after, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !os.SameFile(before, after) {
		f.Close()
		return nil, fmt.Errorf("%s was replaced while it was opened", path)
	}
	return f, nil
}

// Links cannot tell on this system.
func Links(info os.FileInfo) (uint64, bool) { return 0, false }

// openReading opens path for reading, following links.
func openReading(path string) (*os.File, error) { return os.Open(path) }
