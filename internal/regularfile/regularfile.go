package regularfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// NotRegularError is returned for a path that exists and is not a regular file.
type NotRegularError struct {
	Path string
	Mode fs.FileMode
	// Target is where a symbolic link points ("" for other kinds).
	Target string
	// Followed: Path is a symbolic link that was followed (OpenLinked), to Target, and Mode is
	// the kind of file it leads to.
	Followed bool
}

func (e *NotRegularError) Error() string {
	if e.Followed {
		return fmt.Sprintf("%s is a symbolic link to %s, which is %s, not a regular file", e.Path, e.Target, Kind(e.Mode))
	}
	what := Kind(e.Mode)
	if e.Target != "" {
		what += " to " + e.Target
	}
	return fmt.Sprintf("%s is %s, not a regular file", e.Path, what)
}

// Kind names the kind of file mode describes, with its article: "a symbolic link", "a named
// pipe", "a folder", "a device", "a socket", "a regular file".
func Kind(mode fs.FileMode) string {
	switch {
	case mode&fs.ModeSymlink != 0:
		return "a symbolic link"
	case mode&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case mode.IsDir():
		return "a folder"
	case mode&fs.ModeDevice != 0 || mode&fs.ModeCharDevice != 0:
		return "a device"
	case mode&fs.ModeSocket != 0:
		return "a socket"
	case mode.IsRegular():
		return "a regular file"
	}
	return "not a regular file (" + mode.String() + ")"
}

// notRegular returns a *NotRegularError for path of mode, reading a link's target.
func notRegular(path string, mode fs.FileMode) error {
	e := &NotRegularError{Path: path, Mode: mode}
	if mode&fs.ModeSymlink != 0 {
		e.Target, _ = os.Readlink(path)
	}
	return e
}

// Open opens path with flag and perm (os.OpenFile's) when it is a regular file, or creates it
// with os.O_CREATE when it does not exist. A symbolic link, a named pipe, a device, a folder or a
// socket at path is a *NotRegularError, and the file it is or points to is not opened: with
// os.O_TRUNC a link would otherwise empty its target.
func Open(path string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := open(path, flag, perm)
	if err != nil {
		if info, lerr := os.Lstat(path); lerr == nil && !info.Mode().IsRegular() {
			return nil, notRegular(path, info.Mode())
		}
		return nil, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !info.Mode().IsRegular() {
		f.Close()
		return nil, notRegular(path, info.Mode())
	}
	return f, nil
}

// Check returns a *NotRegularError when path exists and is not a regular file (without following
// a link), the error of Lstat when it cannot be looked at, and its size otherwise.
func Check(path string) (size int64, err error) {
	info, err := os.Lstat(path)
	if err != nil {
		return 0, err
	}
	if !info.Mode().IsRegular() {
		return 0, notRegular(path, info.Mode())
	}
	return info.Size(), nil
}

// SizeError is returned by ReadExactly and ReadAtMost for a file of another size than expected.
type SizeError struct {
	Path       string
	Size, Want int64
	AtMost     bool // Want is a bound, not the size
}

func (e *SizeError) Error() string {
	if e.AtMost {
		bound := fmt.Sprint(e.Want)
		if e.Want >= 1<<20 && e.Want%(1<<20) == 0 {
			bound += fmt.Sprintf(" (%d MiB)", e.Want>>20)
		}
		return fmt.Sprintf("%s holds %d bytes, more than the %s expected", e.Path, e.Size, bound)
	}
	return fmt.Sprintf("%s holds %d bytes, %d expected", e.Path, e.Size, e.Want)
}

// ReadExactly reads the regular file path, which must hold size bytes: a file of another size
// is a *SizeError before anything is read, and anything but a regular file a *NotRegularError.
func ReadExactly(path string, size int64) ([]byte, error) {
	return read(path, size, false)
}

// ReadAtMost reads the regular file path, which must hold at most limit bytes (a *SizeError
// otherwise, before anything is read).
func ReadAtMost(path string, limit int64) ([]byte, error) {
	return read(path, limit, true)
}

func read(path string, want int64, atMost bool) ([]byte, error) {
	f, err := Open(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readOpen(f, path, want, atMost)
}

// readOpen reads the open file f (named path) whole, as read does.
func readOpen(f *os.File, path string, want int64, atMost bool) ([]byte, error) {
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := info.Size()
	if size > want || !atMost && size != want {
		return nil, &SizeError{Path: path, Size: size, Want: want, AtMost: atMost}
	}
	// The file may grow or shrink while it is read: read what its size said, and one byte more
	// to notice a file that grew.
	buf := make([]byte, size+1)
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) { // EOF: an empty file
		return nil, err
	}
	if int64(n) != size {
		return nil, fmt.Errorf("%s changed while it was read (%d bytes, then %d)", path, size, n)
	}
	return buf[:size], nil
}
