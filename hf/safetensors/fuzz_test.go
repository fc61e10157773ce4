package safetensors_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/onegpu/onegpu/hf/safetensors"
)

// FuzzParseHeader: whatever the header, ParseHeader never panics, and what it accepts is a layout
// that tiles the data exactly and survives Encode and a second parse unchanged.
func FuzzParseHeader(f *testing.F) {
	if file, err := os.ReadFile(filepath.Join("testdata", "python.safetensors")); err == nil {
		n := binary.LittleEndian.Uint64(file)
		f.Add(file[8:8+n], int64(len(file))-8-int64(n))
	}
	for _, seed := range []string{
		`{}`, `{"__metadata__":{"format":"pt"}}`,
		`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`,
		`{"a":{"dtype":"BF16","shape":[],"data_offsets":[0,2]},"b":{"dtype":"F4","shape":[0],"data_offsets":[2,2]}}  `,
		`{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`,
		`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}`,
	} {
		f.Add([]byte(seed), int64(8))
	}
	f.Fuzz(func(t *testing.T, header []byte, dataBytes int64) {
		h, err := safetensors.ParseHeader(header, dataBytes)
		if err != nil {
			return
		}
		var pos int64
		for _, ti := range h.Tensors {
			if ti.Begin != pos || ti.End < ti.Begin || ti.Elements()*int64(ti.DType.Bits()) != 8*ti.Bytes() {
				t.Fatalf("accepted a bad layout: %+v after byte %d", ti, pos)
			}
			if got, ok := h.Tensor(ti.Name); !ok || !reflect.DeepEqual(got, ti) {
				t.Fatalf("Tensor(%q) = %+v, %v", ti.Name, got, ok)
			}
			pos = ti.End
		}
		if pos != dataBytes {
			t.Fatalf("accepted tensors ending at %d in %d bytes of data", pos, dataBytes)
		}
		again, err := safetensors.ParseHeader(h.Encode(), dataBytes)
		if err != nil {
			t.Fatalf("re-parsing the encoded header: %v", err)
		}
		if !reflect.DeepEqual(again.Tensors, h.Tensors) || len(again.Metadata) != len(h.Metadata) {
			t.Fatalf("round trip changed the header:\n%+v\n%+v", h.Tensors, again.Tensors)
		}
		for k, v := range h.Metadata {
			if again.Metadata[k] != v {
				t.Fatalf("metadata %q: %q became %q", k, v, again.Metadata[k])
			}
		}
	})
}
