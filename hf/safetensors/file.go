package safetensors

import (
	"bytes"
	"fmt"
	"io"
	"os"

	"github.com/onegpu/onegpu/internal/regularfile"
)

// File is an open safetensors file: its validated header, and its tensors' data read on demand.
// Where the platform allows it (Linux, macOS, the BSDs) the file is memory-mapped read-only, so
// reading a tensor copies from the page cache without a system call per read and the file is
// never held in Go memory; elsewhere tensors are read by offset (ReadAt). Either way the data of a
// tensor is only read when asked for, so a many-gigabyte file opens in the time of its header.
//
// A File is safe for concurrent reads. Close it when done: a mapped slice returned by Chunks is
// only valid until then.
type File struct {
	Header
	path      string
	file      *os.File
	mapped    []byte      // the whole file when memory-mapped, nil when read by offset
	data      io.ReaderAt // the file's bytes: the mapping or the file itself
	dataStart int64       // offset of the data section in the file
}

// Open opens path, reads and validates its header (see ParseHeader) and maps the file when the
// platform allows it. Errors name the file. path must be a regular file or a symbolic link to one
// (a Hugging Face cache links its snapshots to blobs); a folder, a named pipe or a device is
// refused before it is read (see regularfile.OpenLinked).
func Open(path string) (*File, error) { return open(path, true) }

// OpenUnmapped is Open without memory mapping: tensors are read with ReadAt, as on platforms
// without mmap. For files on storage where mapping misbehaves (some network file systems), and for
// tests of the portable path.
func OpenUnmapped(path string) (*File, error) { return open(path, false) }

func open(path string, mapFile bool) (*File, error) {
	file, err := regularfile.OpenLinked(path)
	if err != nil {
		return nil, err
	}
	st, err := file.Stat()
	if err != nil {
		file.Close()
		return nil, err
	}
	f := &File{path: path, file: file, data: file}
	if mapFile && st.Size() > 0 {
		if f.mapped, err = mmapFile(file, st.Size()); err != nil {
			file.Close()
			return nil, fmt.Errorf("%s: mapping the file: %w", path, err)
		}
		if f.mapped != nil {
			f.data = bytes.NewReader(f.mapped)
		}
	}
	h, dataStart, err := readHeader(f.data, st.Size())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.Header, f.dataStart = *h, dataStart
	return f, nil
}

// Path is the file's path as given to Open.
func (f *File) Path() string { return f.path }

// Mapped reports whether the file is memory-mapped (false: read by offset).
func (f *File) Mapped() bool { return f.mapped != nil }

// Close unmaps and closes the file.
func (f *File) Close() error {
	var err error
	if f.mapped != nil {
		err = munmapFile(f.mapped)
		f.mapped = nil
	}
	if f.file != nil {
		if cerr := f.file.Close(); err == nil {
			err = cerr
		}
		f.file = nil
	}
	return err
}

func (f *File) info(name string) (TensorInfo, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return t, fmt.Errorf("%s has no tensor %q", f.path, name)
	}
	return t, nil
}

// Reader returns a reader of the tensor's raw bytes (little-endian, row-major).
func (f *File) Reader(name string) (*io.SectionReader, error) {
	t, err := f.info(name)
	if err != nil {
		return nil, err
	}
	return io.NewSectionReader(f.data, f.dataStart+t.Begin, t.Bytes()), nil
}

// ReadTensor returns a copy of the tensor's raw bytes (one tensor in memory; see Chunks to
// convert a large tensor without holding its bytes twice).
func (f *File) ReadTensor(name string) ([]byte, error) {
	r, err := f.Reader(name)
	if err != nil {
		return nil, err
	}
	out := make([]byte, r.Size())
	if _, err := io.ReadFull(r, out); err != nil {
		return nil, fmt.Errorf("%s: reading tensor %q: %w", f.path, name, err)
	}
	return out, nil
}

// Chunks calls fn with the tensor's raw bytes in order, in pieces of at most chunkBytes (rounded
// down to whole values, at least one value) that each hold whole values, so fn can convert piece
// by piece. When the file is mapped the pieces are slices of the mapping (no copy; do not keep
// them past Close); otherwise they are read into one reused buffer of chunkBytes, so converting a
// tensor needs no more Go memory than that buffer.
func (f *File) Chunks(name string, chunkBytes int, fn func(chunk []byte) error) error {
	t, err := f.info(name)
	if err != nil {
		return err
	}
	valueBytes := max(t.DType.Bits()/8, 1)
	chunkBytes = max(chunkBytes/valueBytes, 1) * valueBytes
	var buf []byte
	for pos := t.Begin; pos < t.End; {
		n := min(int64(chunkBytes), t.End-pos)
		var chunk []byte
		if f.mapped != nil {
			start := f.dataStart + pos
			chunk = f.mapped[start : start+n]
		} else {
			if buf == nil {
				buf = make([]byte, min(int64(chunkBytes), t.Bytes()))
			}
			chunk = buf[:n]
			if _, err := f.data.ReadAt(chunk, f.dataStart+pos); err != nil {
				return fmt.Errorf("%s: reading tensor %q: %w", f.path, name, err)
			}
		}
		if err := fn(chunk); err != nil {
			return err
		}
		pos += n
	}
	return nil
}
