// Package atomicfile writes a file whole or not at all: into a temporary file in the same folder,
// synced, then renamed over the target, so a reader (or a crash) never sees half a file.
package atomicfile

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
)

// Write creates path (mode 0644) with what fn writes, buffered. When fn or the writing fails,
// path is untouched and the temporary file removed.
func Write(path string, fn func(w io.Writer) error) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = tmp.Chmod(0o644); err != nil {
		return err
	}
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err = fn(bw); err != nil {
		return err
	}
	if err = bw.Flush(); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
