package data

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/hostmemory"
	"github.com/onegpu/onegpu/internal/regularfile"
)

// npyMagic starts every .npy file; the format is NumPy's version 1.0: magic, version, a
// little-endian uint16 header length, a Python dict literal padded with spaces to a multiple of 64
// bytes and ended by a newline, then the raw little-endian data in C order.
const npyMagic = "\x93NUMPY"

// npyDescr maps dtypes to NumPy's type strings.
var npyDescr = map[dtypes.DType]string{
	dtypes.Float32: "<f4", dtypes.Float64: "<f8", dtypes.Int32: "<i4", dtypes.Int64: "<i8",
	dtypes.Uint8: "|u1", dtypes.Bool: "|b1",
}

// WriteNPY writes t in NumPy's .npy format (version 1.0). It accepts float32, float64, int32,
// int64, uint8 and bool tensors; convert others first.
func WriteNPY(w io.Writer, t *tensors.Tensor) error {
	descr, ok := npyDescr[t.DType()]
	if !ok {
		return fmt.Errorf("npy: cannot write dtype %s (use float32, float64, int32, int64, uint8 or bool)", t.DType())
	}
	dims := make([]string, t.Shape().Rank())
	for i, d := range t.Shape().Dimensions {
		dims[i] = strconv.Itoa(d)
	}
	shape := strings.Join(dims, ", ")
	if len(dims) == 1 {
		shape += ","
	}
	header := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, shape)
	// Pad so that magic (6) + version (2) + length (2) + header + "\n" is a multiple of 64.
	total := len(npyMagic) + 4 + len(header) + 1
	header += strings.Repeat(" ", (64-total%64)%64) + "\n"
	if len(header) > math.MaxUint16 {
		return fmt.Errorf("npy: header of %d bytes is too long for version 1.0", len(header))
	}
	var buf bytes.Buffer
	buf.WriteString(npyMagic)
	buf.Write([]byte{1, 0})
	_ = binary.Write(&buf, binary.LittleEndian, uint16(len(header)))
	buf.WriteString(header)
	if _, err := w.Write(buf.Bytes()); err != nil {
		return err
	}
	var err error
	t.MustConstFlatData(func(flat any) {
		if b, isBool := flat.([]bool); isBool {
			raw := make([]byte, len(b))
			for i, v := range b {
				if v {
					raw[i] = 1
				}
			}
			_, err = w.Write(raw)
			return
		}
		err = binary.Write(w, binary.LittleEndian, flat)
	})
	return err
}

// WriteNPYFile writes t to the file path in .npy format (see WriteNPY).
func WriteNPYFile(path string, t *tensors.Tensor) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	if err := WriteNPY(w, t); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// npyMaxHeader bounds the header's length, as NumPy's max_header_size does (10,000 bytes there):
// a header is a short dict, and a corrupt length must not make ReadNPY allocate gigabytes.
const npyMaxHeader = 1 << 16

// npyHeader is what a .npy file's header says: the data's dtype and shape, and where the data
// starts.
type npyHeader struct {
	shape     shapes.Shape
	shapeText string // as the header writes it, for messages
	dataStart int64  // bytes before the data: magic, version, length, header
}

// dataBytes is the size of the data the header describes.
func (h npyHeader) dataBytes() int64 { return int64(h.shape.Size()) * int64(h.shape.DType.Size()) }

// ReadNPY reads a .npy file (versions 1.0 to 3.0, C order, little-endian) of one of the dtypes
// WriteNPY writes, from r, leaving in r what follows the data. A header that cannot be right
// (another key than numpy's three, negative dimensions, more values than onegpu counts, an
// overlong header), data larger than this machine's available memory and data shorter than the
// header's shape are errors; nothing is allocated for data the reader does not hold. A key the
// header gives twice takes its last value, as in numpy.
func ReadNPY(r io.Reader) (*tensors.Tensor, error) {
	h, err := readNPYHeader(r)
	if err != nil {
		return nil, err
	}
	if err := h.checkMemory(); err != nil {
		return nil, err
	}
	// Read what the reader holds, up to the size the header claims, before allocating the tensor.
	want := h.dataBytes()
	raw, err := io.ReadAll(io.LimitReader(r, want))
	if err != nil {
		return nil, fmt.Errorf("npy: data: %w", err)
	}
	if int64(len(raw)) < want {
		return nil, fmt.Errorf("npy: data: the header's shape (%s) of %s needs %d bytes, the file holds %d", h.shapeText, h.shape.DType, want, len(raw))
	}
	return h.tensor(bytes.NewReader(raw))
}

// readNPYHeader reads a .npy file's magic, version and header.
func readNPYHeader(r io.Reader) (npyHeader, error) {
	var h npyHeader
	prefix := make([]byte, len(npyMagic)+2)
	if _, err := io.ReadFull(r, prefix); err != nil {
		return h, fmt.Errorf("npy: %w", err)
	}
	if string(prefix[:len(npyMagic)]) != npyMagic {
		return h, fmt.Errorf("npy: not a .npy file (bad magic)")
	}
	var headerLen int
	switch major := prefix[len(npyMagic)]; major {
	case 1:
		var n uint16
		if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
			return h, fmt.Errorf("npy: %w", err)
		}
		headerLen, h.dataStart = int(n), int64(len(prefix)+2+int(n))
	case 2, 3:
		var n uint32
		if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
			return h, fmt.Errorf("npy: %w", err)
		}
		headerLen, h.dataStart = int(n), int64(len(prefix)+4)+int64(n)
	default:
		return h, fmt.Errorf("npy: unknown format version %d", major)
	}
	if headerLen > npyMaxHeader {
		return h, fmt.Errorf("npy: a header of %d bytes: more than %d, so not a .npy file onegpu reads", headerLen, npyMaxHeader)
	}
	header := make([]byte, headerLen)
	if _, err := io.ReadFull(r, header); err != nil {
		return h, fmt.Errorf("npy: header: %w", err)
	}
	descr, fortran, shape, err := parseNPYHeader(string(header))
	if err != nil {
		return h, fmt.Errorf("npy: header: %w", err)
	}
	if fortran {
		return h, fmt.Errorf("npy: Fortran order is not supported")
	}
	h.shapeText = strings.Join(shape, ", ")
	var dims []int
	elements := 1.0
	for _, part := range shape {
		d, err := strconv.Atoi(part)
		if err != nil || d < 0 {
			return h, fmt.Errorf("npy: bad shape (%s): dimensions are numbers, at least 0", h.shapeText)
		}
		dims = append(dims, d)
		elements *= float64(d)
	}
	if elements > analysis.MaxTensorElements {
		return h, fmt.Errorf("npy: shape (%s) holds %.3g values, more than onegpu counts (2^46)", h.shapeText, elements)
	}
	var dtype dtypes.DType
	for d, s := range npyDescr {
		if s == descr || (s[0] == '<' && "="+s[1:] == descr) {
			dtype = d
		}
	}
	if dtype == dtypes.InvalidDType {
		return h, fmt.Errorf("npy: unsupported dtype %q", descr)
	}
	h.shape = shapes.Make(dtype, dims...)
	return h, nil
}

// checkMemory refuses data larger than this machine's available memory (MemAvailable, where
// the system says): reading it would end the process with Go's "out of memory".
func (h npyHeader) checkMemory() error {
	available, err := hostmemory.Available()
	if err == nil && h.dataBytes() > available {
		return fmt.Errorf("npy: the header's shape (%s) of %s is %d bytes of data, more than the %d this machine has available", h.shapeText, h.shape.DType, h.dataBytes(), available)
	}
	return nil
}

// tensor reads the header's data from r into a new tensor.
func (h npyHeader) tensor(r io.Reader) (*tensors.Tensor, error) {
	t := tensors.FromShape(h.shape)
	var err error
	t.MustMutableFlatData(func(flat any) {
		if b, isBool := flat.([]bool); isBool {
			raw := make([]byte, len(b))
			if _, err = io.ReadFull(r, raw); err == nil {
				for i, v := range raw {
					b[i] = v != 0
				}
			}
			return
		}
		err = binary.Read(r, binary.LittleEndian, flat)
	})
	if err != nil {
		return nil, fmt.Errorf("npy: data: %w", err)
	}
	return t, nil
}

// ReadNPYFile reads the .npy file path (see ReadNPY): a regular file, or a link to one, never a
// named pipe or a device, whose size must be the header's plus the data's exactly: shorter data,
// or bytes after the data (a header whose shape does not describe the file), are errors before
// the data is read.
func ReadNPYFile(path string) (*tensors.Tensor, error) {
	f, err := regularfile.OpenLinked(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	br := bufio.NewReader(f)
	h, err := readNPYHeader(br)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	switch held := info.Size() - h.dataStart; {
	case held < h.dataBytes():
		return nil, fmt.Errorf("%s: npy: data: the header's shape (%s) of %s needs %d bytes, the file holds %d", path, h.shapeText, h.shape.DType, h.dataBytes(), held)
	case held > h.dataBytes():
		return nil, fmt.Errorf("%s: npy: %d bytes follow the %d of data the header's shape (%s) of %s describes: the header does not describe this file",
			path, held-h.dataBytes(), h.dataBytes(), h.shapeText, h.shape.DType)
	}
	if err := h.checkMemory(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t, err := h.tensor(br)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}
