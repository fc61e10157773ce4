package data

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/models"
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

var (
	npyDescrRE = regexp.MustCompile(`'descr':\s*'([^']*)'`)
	npyOrderRE = regexp.MustCompile(`'fortran_order':\s*(True|False)`)
	npyShapeRE = regexp.MustCompile(`'shape':\s*\(([^)]*)\)`)
)

// npyMaxHeader bounds the header's length, as NumPy's max_header_size does (10,000 bytes there):
// a header is a short dict, and a corrupt length must not make ReadNPY allocate gigabytes.
const npyMaxHeader = 1 << 16

// ReadNPY reads a .npy file (versions 1.0 to 3.0, C order, little-endian) of one of the dtypes
// WriteNPY writes. A header that cannot be right (negative dimensions, more values than onegpu
// counts, an overlong header) and data shorter than the header's shape are errors; nothing is
// allocated for data the reader does not hold.
func ReadNPY(r io.Reader) (*tensors.Tensor, error) {
	prefix := make([]byte, len(npyMagic)+2)
	if _, err := io.ReadFull(r, prefix); err != nil {
		return nil, fmt.Errorf("npy: %w", err)
	}
	if string(prefix[:len(npyMagic)]) != npyMagic {
		return nil, fmt.Errorf("npy: not a .npy file (bad magic)")
	}
	var headerLen int
	switch major := prefix[len(npyMagic)]; major {
	case 1:
		var n uint16
		if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
			return nil, fmt.Errorf("npy: %w", err)
		}
		headerLen = int(n)
	case 2, 3:
		var n uint32
		if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
			return nil, fmt.Errorf("npy: %w", err)
		}
		headerLen = int(n)
	default:
		return nil, fmt.Errorf("npy: unknown format version %d", major)
	}
	if headerLen > npyMaxHeader {
		return nil, fmt.Errorf("npy: a header of %d bytes: more than %d, so not a .npy file onegpu reads", headerLen, npyMaxHeader)
	}
	header := make([]byte, headerLen)
	if _, err := io.ReadFull(r, header); err != nil {
		return nil, fmt.Errorf("npy: header: %w", err)
	}
	descr, order, shape := npyDescrRE.FindSubmatch(header), npyOrderRE.FindSubmatch(header), npyShapeRE.FindSubmatch(header)
	if descr == nil || order == nil || shape == nil {
		return nil, fmt.Errorf("npy: cannot parse header %q", header)
	}
	if string(order[1]) == "True" {
		return nil, fmt.Errorf("npy: Fortran order is not supported")
	}
	var dims []int
	elements := 1.0
	for _, part := range strings.Split(string(shape[1]), ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		d, err := strconv.Atoi(part)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("npy: bad shape (%s): dimensions are numbers, at least 0", shape[1])
		}
		dims = append(dims, d)
		elements *= float64(d)
	}
	if elements > models.MaxTensorElements {
		return nil, fmt.Errorf("npy: shape (%s) holds %.3g values, more than onegpu counts (2^46)", shape[1], elements)
	}
	var dtype dtypes.DType
	for d, s := range npyDescr {
		if s == string(descr[1]) || (s[0] == '<' && "="+s[1:] == string(descr[1])) {
			dtype = d
		}
	}
	if dtype == dtypes.InvalidDType {
		return nil, fmt.Errorf("npy: unsupported dtype %q", descr[1])
	}
	dataShape := shapes.Make(dtype, dims...)
	// Read what the reader holds, up to the size the header claims, before allocating the tensor.
	want := int64(dataShape.Size()) * int64(dtype.Size())
	raw, err := io.ReadAll(io.LimitReader(r, want))
	if err != nil {
		return nil, fmt.Errorf("npy: data: %w", err)
	}
	if int64(len(raw)) < want {
		return nil, fmt.Errorf("npy: data: the header's shape (%s) of %s needs %d bytes, the file holds %d", shape[1], dtype, want, len(raw))
	}
	t := tensors.FromShape(dataShape)
	t.MustMutableFlatData(func(flat any) {
		if b, isBool := flat.([]bool); isBool {
			for i, v := range raw {
				b[i] = v != 0
			}
			return
		}
		err = binary.Read(bytes.NewReader(raw), binary.LittleEndian, flat)
	})
	if err != nil {
		return nil, fmt.Errorf("npy: data: %w", err)
	}
	return t, nil
}

// ReadNPYFile reads a .npy file (see ReadNPY).
func ReadNPYFile(path string) (*tensors.Tensor, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t, err := ReadNPY(bufio.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}
