package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"unicode/utf8"
)

// MaxHeaderBytes bounds the JSON header, as the reference implementation does (100,000,000 bytes):
// a length past it is damage or a different kind of file, and is refused before anything is read.
const MaxHeaderBytes = 100_000_000

// metadataKey is the header's reserved entry for free-form string metadata.
const metadataKey = "__metadata__"

// TensorInfo describes one tensor of a file: its element type, its shape (row-major, the last
// axis varying fastest) and where its bytes lie, as offsets [Begin, End) from the start of the
// data section (just after the header).
type TensorInfo struct {
	Name  string
	DType DType
	Shape []int
	Begin int64
	End   int64
}

// Elements is the number of values: the product of the shape (1 for a scalar, shape []).
func (t TensorInfo) Elements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= int64(d)
	}
	return n
}

// Bytes is the size of the tensor's data in bytes.
func (t TensorInfo) Bytes() int64 { return t.End - t.Begin }

// Header is a parsed and validated header: the tensors in the order of their data (ascending
// offsets) and the optional string metadata (nil when the file has none).
type Header struct {
	Tensors  []TensorInfo
	Metadata map[string]string
	index    map[string]int
}

// Tensor returns the tensor called name.
func (h *Header) Tensor(name string) (TensorInfo, bool) {
	i, ok := h.index[name]
	if !ok {
		return TensorInfo{}, false
	}
	return h.Tensors[i], true
}

// DataBytes is the size of the data section the header describes.
func (h *Header) DataBytes() int64 {
	if len(h.Tensors) == 0 {
		return 0
	}
	return h.Tensors[len(h.Tensors)-1].End
}

// ParseHeader parses the JSON header of a file whose data section (everything after the header)
// holds dataBytes bytes, and checks it strictly: valid UTF-8 JSON, one object whose keys are
// unique; "__metadata__", if present, maps strings to strings; every other entry is a tensor with
// exactly the fields dtype (a type the format defines), shape (non-negative integers) and
// data_offsets ([begin, end], begin <= end); the tensors' sizes equal shape × dtype size; and
// their byte ranges, in offset order, tile the data section exactly: no gap, no overlap, nothing
// past its end and nothing after the last tensor. Trailing spaces (the alignment padding writers
// add) are allowed. Errors name the tensor and the field.
func ParseHeader(header []byte, dataBytes int64) (*Header, error) {
	if len(header) > MaxHeaderBytes {
		return nil, fmt.Errorf("header of %d bytes is longer than %d: not a safetensors file, or damaged", len(header), MaxHeaderBytes)
	}
	if !utf8.Valid(header) {
		return nil, errors.New("header is not valid UTF-8")
	}
	if len(header) == 0 || header[0] != '{' {
		return nil, errors.New("header does not start with '{': not a safetensors file")
	}
	dec := json.NewDecoder(bytes.NewReader(header))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil { // the opening '{', checked above
		return nil, fmt.Errorf("header: %w", err)
	}
	h := &Header{index: map[string]int{}}
	seen := map[string]bool{}
	for dec.More() {
		key, err := stringToken(dec)
		if err != nil {
			return nil, fmt.Errorf("header: %w", err)
		}
		if seen[key] {
			return nil, fmt.Errorf("header names %q twice", key)
		}
		seen[key] = true
		if key == metadataKey {
			if h.Metadata, err = parseMetadata(dec); err != nil {
				return nil, fmt.Errorf("header %s: %w", metadataKey, err)
			}
			continue
		}
		info, err := parseTensorInfo(dec, key)
		if err != nil {
			return nil, fmt.Errorf("header, tensor %q: %w", key, err)
		}
		h.Tensors = append(h.Tensors, info)
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, fmt.Errorf("header: %w", err)
	}
	rest := header[dec.InputOffset():]
	if len(bytes.Trim(rest, " ")) != 0 {
		return nil, fmt.Errorf("header has %d bytes after its JSON object that are not space padding", len(rest))
	}
	if err := h.checkLayout(dataBytes); err != nil {
		return nil, err
	}
	return h, nil
}

// checkLayout sorts the tensors by offset and checks that they tile [0, dataBytes).
func (h *Header) checkLayout(dataBytes int64) error {
	sort.SliceStable(h.Tensors, func(i, j int) bool {
		a, b := h.Tensors[i], h.Tensors[j]
		if a.Begin != b.Begin {
			return a.Begin < b.Begin
		}
		if a.End != b.End {
			return a.End < b.End
		}
		return a.Name < b.Name
	})
	var pos int64
	for i, t := range h.Tensors {
		h.index[t.Name] = i
		if t.Begin != pos {
			if t.Begin < pos {
				return fmt.Errorf("tensor %q: data_offsets [%d, %d] overlap the previous tensor's data, which ends at %d", t.Name, t.Begin, t.End, pos)
			}
			return fmt.Errorf("tensor %q: data_offsets [%d, %d] leave a gap after byte %d (tensors must be contiguous)", t.Name, t.Begin, t.End, pos)
		}
		if t.End > dataBytes {
			return fmt.Errorf("tensor %q: data_offsets [%d, %d] run past the %d bytes of data in the file", t.Name, t.Begin, t.End, dataBytes)
		}
		pos = t.End
	}
	if pos != dataBytes {
		return fmt.Errorf("the tensors' data ends at byte %d but the file holds %d bytes of data", pos, dataBytes)
	}
	return nil
}

func stringToken(dec *json.Decoder) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	s, ok := tok.(string)
	if !ok {
		return "", fmt.Errorf("expected a string, found %v", tok)
	}
	return s, nil
}

// expectDelim reads the next token and checks that it is the delimiter want.
func expectDelim(dec *json.Decoder, want json.Delim, what string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("%s: expected %q, found %v", what, want, tok)
	}
	return nil
}

func parseMetadata(dec *json.Decoder) (map[string]string, error) {
	if err := expectDelim(dec, '{', "metadata"); err != nil {
		return nil, err
	}
	m := map[string]string{}
	for dec.More() {
		key, err := stringToken(dec)
		if err != nil {
			return nil, err
		}
		if _, dup := m[key]; dup {
			return nil, fmt.Errorf("key %q appears twice", key)
		}
		value, err := stringToken(dec)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w (metadata values are strings)", key, err)
		}
		m[key] = value
	}
	return m, expectDelim(dec, '}', "metadata")
}

func parseTensorInfo(dec *json.Decoder, name string) (TensorInfo, error) {
	info := TensorInfo{Name: name}
	if err := expectDelim(dec, '{', "tensor info"); err != nil {
		return info, err
	}
	have := map[string]bool{}
	var offsets []int64
	for dec.More() {
		field, err := stringToken(dec)
		if err != nil {
			return info, err
		}
		if have[field] {
			return info, fmt.Errorf("field %q appears twice", field)
		}
		have[field] = true
		switch field {
		case "dtype":
			s, err := stringToken(dec)
			if err != nil {
				return info, fmt.Errorf("dtype: %w", err)
			}
			info.DType = DType(s)
			if !info.DType.Known() {
				return info, fmt.Errorf("dtype %q is not one the format defines (%s)", s, knownDTypes())
			}
		case "shape":
			dims, err := intArray(dec, "shape", math.MaxInt)
			if err != nil {
				return info, err
			}
			info.Shape = make([]int, len(dims))
			for i, d := range dims {
				info.Shape[i] = int(d)
			}
		case "data_offsets":
			if offsets, err = intArray(dec, "data_offsets", math.MaxInt64); err != nil {
				return info, err
			}
		default:
			return info, fmt.Errorf("unknown field %q (a tensor has dtype, shape and data_offsets)", field)
		}
	}
	if err := expectDelim(dec, '}', "tensor info"); err != nil {
		return info, err
	}
	for _, field := range []string{"dtype", "shape", "data_offsets"} {
		if !have[field] {
			return info, fmt.Errorf("no %s", field)
		}
	}
	if len(offsets) != 2 || offsets[0] > offsets[1] {
		return info, fmt.Errorf("data_offsets %v must be two numbers [begin, end] with begin <= end", offsets)
	}
	info.Begin, info.End = offsets[0], offsets[1]
	elements := int64(1)
	for _, d := range info.Shape {
		if d != 0 && elements > math.MaxInt64/int64(d) {
			return info, fmt.Errorf("shape %v has more values than a file can hold", info.Shape)
		}
		elements *= int64(d)
	}
	size, err := info.DType.byteSize(elements)
	if err != nil {
		return info, fmt.Errorf("shape %v: %w", info.Shape, err)
	}
	if size != info.Bytes() {
		return info, fmt.Errorf("shape %v of %s needs %d bytes, data_offsets [%d, %d] hold %d", info.Shape, info.DType, size, info.Begin, info.End, info.Bytes())
	}
	return info, nil
}

// intArray reads a JSON array of integers in [0, limit].
func intArray(dec *json.Decoder, what string, limit int64) ([]int64, error) {
	if err := expectDelim(dec, '[', what); err != nil {
		return nil, err
	}
	var out []int64
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		num, ok := tok.(json.Number)
		if !ok {
			return nil, fmt.Errorf("%s: %v is not a number", what, tok)
		}
		v, err := strconv.ParseInt(string(num), 10, 64)
		if err != nil || v < 0 || v > limit {
			return nil, fmt.Errorf("%s: %s is not an integer in [0, %d]", what, num, limit)
		}
		out = append(out, v)
	}
	if err := expectDelim(dec, ']', what); err != nil {
		return nil, err
	}
	if out == nil {
		out = []int64{}
	}
	return out, nil
}

// readHeader reads the 8-byte length and the header of a file of fileBytes bytes from r.
func readHeader(r io.ReaderAt, fileBytes int64) (*Header, int64, error) {
	var prefix [8]byte
	if fileBytes < 8 {
		return nil, 0, fmt.Errorf("%d bytes is too short for a safetensors file (8-byte header length, header, data)", fileBytes)
	}
	if _, err := r.ReadAt(prefix[:], 0); err != nil {
		return nil, 0, err
	}
	var n uint64
	for i := 7; i >= 0; i-- {
		n = n<<8 | uint64(prefix[i])
	}
	if n > MaxHeaderBytes {
		return nil, 0, fmt.Errorf("header length %d is past the limit of %d bytes: not a safetensors file, or damaged", n, MaxHeaderBytes)
	}
	if int64(n) > fileBytes-8 {
		return nil, 0, fmt.Errorf("header length %d runs past the end of the %d-byte file: truncated or not a safetensors file", n, fileBytes)
	}
	raw := make([]byte, n)
	if _, err := r.ReadAt(raw, 8); err != nil {
		return nil, 0, err
	}
	dataStart := 8 + int64(n)
	h, err := ParseHeader(raw, fileBytes-dataStart)
	return h, dataStart, err
}
