package safetensors_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/hf/safetensors"
)

// TestParseHeaderRefuses: every way a header can be wrong is an error naming the problem.
func TestParseHeaderRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		header string
		data   int64
		want   string
	}{
		{"not JSON", `hello`, 0, "does not start with '{'"},
		{"empty", ``, 0, "does not start with '{'"},
		{"an array", `[1]`, 0, "does not start with '{'"},
		{"truncated", `{"a":{"dtype":"F32"`, 0, "header"},
		{"trailing garbage", `{}x`, 0, "not space padding"},
		{"invalid UTF-8", "{\"\xff\":1}", 0, "UTF-8"},
		{"duplicate tensor", `{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2, `names "a" twice`},
		{"unknown dtype", `{"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}}`, 16, `dtype "F128" is not one`},
		{"lower-case dtype", `{"a":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}}`, 4, `dtype "f32"`},
		{"unknown field", `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"stride":[1]}}`, 4, `unknown field "stride"`},
		{"duplicate field", `{"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 4, `field "dtype" appears twice`},
		{"no shape", `{"a":{"dtype":"F32","data_offsets":[0,4]}}`, 4, "no shape"},
		{"no dtype", `{"a":{"shape":[1],"data_offsets":[0,4]}}`, 4, "no dtype"},
		{"no offsets", `{"a":{"dtype":"F32","shape":[1]}}`, 4, "no data_offsets"},
		{"negative dimension", `{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, 4, "not an integer"},
		{"fractional dimension", `{"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}`, 4, "not an integer"},
		{"string dimension", `{"a":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}}`, 4, "not a number"},
		{"huge dimensions", `{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}`, 4, "more values than"},
		{"byte count overflow", `{"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]}}`, 8, "overflow"},
		{"one offset", `{"a":{"dtype":"F32","shape":[1],"data_offsets":[4]}}`, 4, "two numbers"},
		{"reversed offsets", `{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}`, 4, "begin <= end"},
		{"size mismatch", `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 4, "needs 8 bytes, data_offsets [0, 4] hold 4"},
		{"partial byte", `{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}`, 2, "whole bytes"},
		{"gap", `{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2, "leave a gap after byte 0"},
		{"overlap", `{"a":{"dtype":"U16","shape":[1],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2, "overlap"},
		{"past the data", `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 3, "run past the 3 bytes"},
		{"bytes after the last tensor", `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 8, "ends at byte 4 but the file holds 8"},
		{"metadata not strings", `{"__metadata__":{"format":1}}`, 0, "metadata values are strings"},
		{"metadata not an object", `{"__metadata__":"pt"}`, 0, "metadata"},
		{"metadata twice", `{"__metadata__":{},"__metadata__":{}}`, 0, "twice"},
		{"metadata key twice", `{"__metadata__":{"a":"1","a":"2"}}`, 0, `key "a" appears twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := safetensors.ParseHeader([]byte(tc.header), tc.data)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestParseHeaderAccepts: padding, scalars, empty tensors sharing an offset, metadata, no tensors.
func TestParseHeaderAccepts(t *testing.T) {
	h, err := safetensors.ParseHeader([]byte(`{"z":{"dtype":"F32","shape":[0,5],"data_offsets":[4,4]},"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},`+
		`"__metadata__":{"format":"pt"},"e":{"dtype":"U8","shape":[0],"data_offsets":[4,4]},"f":{"dtype":"F4","shape":[2,1],"data_offsets":[4,5]}}   `), 5)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ti := range h.Tensors {
		names = append(names, ti.Name)
	}
	if want := []string{"s", "e", "z", "f"}; !reflect.DeepEqual(names, want) || h.Metadata["format"] != "pt" || h.DataBytes() != 5 {
		t.Fatalf("tensors %v (want %v), metadata %v, %d data bytes", names, want, h.Metadata, h.DataBytes())
	}
	if s, _ := h.Tensor("s"); s.Elements() != 1 || len(s.Shape) != 0 {
		t.Errorf("scalar: %+v", s)
	}
	if h, err := safetensors.ParseHeader([]byte(`{}`), 0); err != nil || len(h.Tensors) != 0 || h.Metadata != nil {
		t.Errorf("empty header: %+v, %v", h, err)
	}
}

// TestOpenRefuses: files too short, with a header length past the file or the limit.
func TestOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		file []byte
		want string
	}{
		{"empty file", nil, "too short"},
		{"length only", binary.LittleEndian.AppendUint64(nil, 2), "runs past the end"},
		{"huge length", binary.LittleEndian.AppendUint64(nil, 1<<40), "past the limit"},
		{"not JSON", append(binary.LittleEndian.AppendUint64(nil, 4), "abcd"...), "does not start with '{'"},
		{"data missing", withLength(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`), "run past the 0 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			if err := os.WriteFile(path, tc.file, 0o644); err != nil {
				t.Fatal(err)
			}
			for _, open := range []func(string) (*safetensors.File, error){safetensors.Open, safetensors.OpenUnmapped} {
				_, err := open(path)
				if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
					t.Errorf("error %v, want one naming %s and containing %q", err, path, tc.want)
				}
			}
		})
	}
	if _, err := safetensors.Open(filepath.Join(dir, "absent")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("absent file: %v", err)
	}
}

// withLength is a file of header alone: its 8-byte length and the header.
func withLength(header string) []byte {
	return append(binary.LittleEndian.AppendUint64(nil, uint64(len(header))), header...)
}

// TestWriteRefuses: bad tensors are refused before a byte is written; a Data function that writes
// the wrong number of bytes is an error, and WriteFile then leaves nothing behind.
func TestWriteRefuses(t *testing.T) {
	data := func(n int) func(io.Writer) error {
		return func(w io.Writer) error { _, err := w.Write(make([]byte, n)); return err }
	}
	for _, tc := range []struct {
		name    string
		tensors []safetensors.Tensor
		want    string
	}{
		{"duplicate", []safetensors.Tensor{{Name: "a", DType: safetensors.U8, Shape: []int{1}, Data: data(1)}, {Name: "a", DType: safetensors.U8, Shape: []int{1}, Data: data(1)}}, "given twice"},
		{"reserved name", []safetensors.Tensor{{Name: "__metadata__", DType: safetensors.U8, Shape: []int{1}, Data: data(1)}}, "reserved"},
		{"unknown dtype", []safetensors.Tensor{{Name: "a", DType: "X", Shape: []int{1}, Data: data(1)}}, "not one the format defines"},
		{"negative dimension", []safetensors.Tensor{{Name: "a", DType: safetensors.U8, Shape: []int{-1}, Data: data(1)}}, "negative"},
		{"short data", []safetensors.Tensor{{Name: "a", DType: safetensors.F32, Shape: []int{2}, Data: data(4)}}, "wrote 4 bytes"},
		{"long data", []safetensors.Tensor{{Name: "a", DType: safetensors.F32, Shape: []int{1}, Data: data(8)}}, "wrote 8 bytes"},
		{"no data", []safetensors.Tensor{{Name: "a", DType: safetensors.F32, Shape: []int{1}}}, "no Data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			err := safetensors.WriteFile(filepath.Join(dir, "x.safetensors"), tc.tensors, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("left %d files behind", len(entries))
			}
		})
	}
}

// TestWriteNoMetadata: nil metadata writes no __metadata__ entry, and the header is padded to 8.
func TestWriteNoMetadata(t *testing.T) {
	var buf bytes.Buffer
	err := safetensors.Write(&buf, []safetensors.Tensor{{Name: "x<y>&", DType: safetensors.U8, Shape: []int{3},
		Data: func(w io.Writer) error { _, err := w.Write([]byte{1, 2, 3}); return err }}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(buf.Bytes())
	header := buf.Bytes()[8 : 8+n]
	if n%8 != 0 || strings.Contains(string(header), "__metadata__") || !strings.Contains(string(header), `"x<y>&"`) {
		t.Fatalf("header %q (%d bytes)", header, n)
	}
	if !bytes.Equal(buf.Bytes()[8+n:], []byte{1, 2, 3}) {
		t.Fatalf("data %v", buf.Bytes()[8+n:])
	}
}
