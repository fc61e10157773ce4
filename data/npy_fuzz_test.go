package data_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/data"
)

// npyFile returns a .npy file with the given header dict and data, for version 1.0.
func npyFile(header string, data []byte) []byte {
	header += strings.Repeat(" ", (64-(10+len(header)+1)%64)%64) + "\n"
	out := append([]byte("\x93NUMPY\x01\x00"), byte(len(header)), byte(len(header)>>8))
	return append(append(out, header...), data...)
}

// TestReadNPYBadHeaders: headers that cannot be right are errors naming the problem, before
// anything is allocated for the data they claim (a header asking for 2^40 float32 values with
// 8 bytes behind it must not allocate 4 TiB).
func TestReadNPYBadHeaders(t *testing.T) {
	eight := make([]byte, 8)
	for _, tc := range []struct {
		name string
		file []byte
		want string
	}{
		{"negative dimension", npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 1), }", eight), "bad shape (-2, 1)"},
		{"huge dimensions", npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1048576), }", eight), "more than onegpu counts"},
		{"a dimension past int", npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", eight), "bad shape"},
		{"data shorter than the shape", npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (1048576,), }", eight), "needs 4194304 bytes, the file holds 8"},
		{"data larger than the memory", npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }", eight), "this machine has available"},
		{"one value short", npyFile("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", eight), "needs 16 bytes, the file holds 8"},
		{"an overlong header", append([]byte("\x93NUMPY\x02\x00"), 0xff, 0xff, 0xff, 0x7f), "more than 65536"},
		{"Fortran order", npyFile("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", eight), "Fortran order"},
		{"no shape", npyFile("{'descr': '<f4', 'fortran_order': False, }", eight), `no "shape" (numpy writes descr, fortran_order, shape)`},
		{"another key", npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'order': 'C', }", eight), `unknown key "order"`},
		{"a record dtype", npyFile("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", eight), "want a string, True, False or a tuple"},
		{"text after the dict", npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } x", eight), "text after the dict"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := data.ReadNPY(bytes.NewReader(tc.file))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	// The empty shape is a scalar and a zero dimension an empty array: both fine.
	for _, shape := range []string{"()", "(0, 3)"} {
		raw := eight[:4]
		if shape != "()" {
			raw = nil
		}
		if _, err := data.ReadNPY(bytes.NewReader(npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': "+shape+", }", raw))); err != nil {
			t.Errorf("shape %s: %v", shape, err)
		}
	}
}

// FuzzReadNPY: ReadNPY never panics, and what it reads WriteNPY writes back to a file ReadNPY
// reads as the same tensor. Seeds are below and in testdata/fuzz/FuzzReadNPY; `go test` runs
// them, `go test -fuzz FuzzReadNPY ./data` searches further.
func FuzzReadNPY(f *testing.F) {
	for _, tc := range []*tensors.Tensor{
		tensors.FromFlatDataAndDimensions([]float32{1.5, -2, 3.25, 7, 8, 9}, 2, 3),
		tensors.FromFlatDataAndDimensions([]bool{true, false}, 2),
		tensors.FromFlatDataAndDimensions([]int64{-1}),
	} {
		var buf bytes.Buffer
		if err := data.WriteNPY(&buf, tc); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Add(npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", nil))
	f.Fuzz(func(t *testing.T, file []byte) {
		got, err := data.ReadNPY(bytes.NewReader(file))
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if err := data.WriteNPY(&buf, got); err != nil {
			t.Fatalf("WriteNPY of what ReadNPY read (%s): %v", got.Shape(), err)
		}
		back, err := data.ReadNPY(&buf)
		if err != nil {
			t.Fatalf("ReadNPY of what WriteNPY wrote (%s): %v", got.Shape(), err)
		}
		if !back.Shape().Equal(got.Shape()) || back.String() != got.String() {
			t.Fatalf("read back %s, want %s", back, got)
		}
	})
}
