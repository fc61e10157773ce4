package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"unicode/utf8"

	"github.com/onegpu/onegpu/internal/atomicfile"
)

// Tensor is one tensor to write: its name, element type and shape, and a function that writes its
// raw bytes (little-endian, row-major, exactly shape × dtype size of them) when its turn comes.
// Writing tensor by tensor keeps no more than one tensor (or less, if Data streams) in memory.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  func(w io.Writer) error
}

// Layout orders tensors the way the reference implementation's writer does (by element type,
// widest alignment first, then by name) and returns the header that describes them in that order.
// It fails on an empty or duplicate name, an unknown dtype, a negative dimension or a size that
// does not fill whole bytes. The header round-trips: ParseHeader(h.Encode(), h.DataBytes()) gives h.
func Layout(tensors []Tensor, metadata map[string]string) (*Header, []Tensor, error) {
	ordered := append([]Tensor(nil), tensors...)
	sort.SliceStable(ordered, func(i, j int) bool {
		a, b := ordered[i], ordered[j]
		if ra, rb := dtypeRank[a.DType], dtypeRank[b.DType]; ra != rb {
			return ra > rb
		}
		return a.Name < b.Name
	})
	h := &Header{Metadata: metadata, index: map[string]int{}}
	var pos int64
	for i, t := range ordered {
		if t.Name == "" || t.Name == metadataKey || !utf8.ValidString(t.Name) {
			return nil, nil, fmt.Errorf("tensor name %q is empty, reserved or not UTF-8", t.Name)
		}
		if _, dup := h.index[t.Name]; dup {
			return nil, nil, fmt.Errorf("tensor %q given twice", t.Name)
		}
		if !t.DType.Known() {
			return nil, nil, fmt.Errorf("tensor %q: dtype %q is not one the format defines (%s)", t.Name, t.DType, knownDTypes())
		}
		info := TensorInfo{Name: t.Name, DType: t.DType, Shape: append([]int{}, t.Shape...), Begin: pos}
		for _, d := range t.Shape {
			if d < 0 {
				return nil, nil, fmt.Errorf("tensor %q: negative dimension in shape %v", t.Name, t.Shape)
			}
		}
		size, err := t.DType.byteSize(info.Elements())
		if err != nil {
			return nil, nil, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		pos += size
		info.End = pos
		h.index[t.Name] = i
		h.Tensors = append(h.Tensors, info)
	}
	return h, ordered, nil
}

// Encode returns the header as the format stores it: the JSON object ("__metadata__" first, keys
// sorted, then the tensors in data order, no spaces) padded with spaces to a multiple of 8 bytes,
// as the reference writer pads it, so that the data section starts aligned.
func (h *Header) Encode() []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	str := func(s string) {
		_ = enc.Encode(s) // a string always encodes
		buf.Truncate(buf.Len() - 1)
	}
	buf.WriteByte('{')
	if h.Metadata != nil {
		str(metadataKey)
		buf.WriteString(":{")
		keys := make([]string, 0, len(h.Metadata))
		for k := range h.Metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			str(k)
			buf.WriteByte(':')
			str(h.Metadata[k])
		}
		buf.WriteByte('}')
	}
	for i, t := range h.Tensors {
		if i > 0 || h.Metadata != nil {
			buf.WriteByte(',')
		}
		str(t.Name)
		fmt.Fprintf(&buf, `:{"dtype":"%s","shape":[`, t.DType)
		for j, d := range t.Shape {
			if j > 0 {
				buf.WriteByte(',')
			}
			fmt.Fprint(&buf, d)
		}
		fmt.Fprintf(&buf, `],"data_offsets":[%d,%d]}`, t.Begin, t.End)
	}
	buf.WriteByte('}')
	for buf.Len()%8 != 0 {
		buf.WriteByte(' ')
	}
	return buf.Bytes()
}

// Write writes a safetensors file to w: the header of Layout(tensors, metadata) and then each
// tensor's data in that order, checking that each Data function writes exactly its tensor's size.
// Give metadata {"format": "pt"} for files that Hugging Face's transformers will load (it refuses
// safetensors files without it); nil writes no "__metadata__" entry.
func Write(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	h, ordered, err := Layout(tensors, metadata)
	if err != nil {
		return err
	}
	header := h.Encode()
	if len(header) > MaxHeaderBytes {
		return fmt.Errorf("the header of %d tensors takes %d bytes, more than readers accept (%d)", len(tensors), len(header), MaxHeaderBytes)
	}
	var prefix [8]byte
	binary.LittleEndian.PutUint64(prefix[:], uint64(len(header)))
	if _, err := w.Write(prefix[:]); err != nil {
		return err
	}
	if _, err := w.Write(header); err != nil {
		return err
	}
	for i, t := range ordered {
		info := h.Tensors[i]
		if t.Data == nil {
			return fmt.Errorf("tensor %q has no Data function", t.Name)
		}
		cw := &countingWriter{w: w}
		if err := t.Data(cw); err != nil {
			return fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		if cw.n != info.Bytes() {
			return fmt.Errorf("tensor %q: Data wrote %d bytes, its shape %v of %s needs %d", t.Name, cw.n, t.Shape, t.DType, info.Bytes())
		}
	}
	return nil
}

// WriteFile writes a safetensors file at path whole or not at all: into a temporary file in the
// same folder, synced, then renamed over path.
func WriteFile(path string, tensors []Tensor, metadata map[string]string) error {
	err := atomicfile.Write(path, func(w io.Writer) error { return Write(w, tensors, metadata) })
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
