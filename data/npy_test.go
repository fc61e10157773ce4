package data_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/data"
)

// venvPython is the repository's Python with NumPy and JAX (.ci/run creates it), or "" when absent.
func venvPython() string {
	p, err := filepath.Abs(filepath.Join("..", ".venv", "bin", "python"))
	if err != nil {
		return ""
	}
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// TestNPYRoundTrip: what WriteNPY writes, ReadNPY reads back bit for bit, with the header padded
// so that the data starts at a multiple of 64 bytes.
func TestNPYRoundTrip(t *testing.T) {
	for _, tc := range []*tensors.Tensor{
		tensors.FromFlatDataAndDimensions([]float32{1.5, -2, 3.25, 1e-30, 7, 8}, 2, 3),
		tensors.FromFlatDataAndDimensions([]int32{1, -2, 1 << 30}, 3),
		tensors.FromFlatDataAndDimensions([]int64{-1, 1 << 40}, 1, 2, 1),
		tensors.FromFlatDataAndDimensions([]float64{3.141592653589793}),
		tensors.FromFlatDataAndDimensions([]bool{true, false, true}, 3),
	} {
		var buf bytes.Buffer
		if err := data.WriteNPY(&buf, tc); err != nil {
			t.Fatalf("%s: %v", tc.Shape(), err)
		}
		raw := buf.Bytes()
		headerEnd := 10 + int(raw[8]) + int(raw[9])<<8
		if headerEnd%64 != 0 || raw[headerEnd-1] != '\n' {
			t.Errorf("%s: data starts at byte %d (want a multiple of 64, after a newline)", tc.Shape(), headerEnd)
		}
		if want := headerEnd + int(tc.Shape().Memory()); want != len(raw) && tc.DType().String() != "Bool" {
			t.Errorf("%s: %d bytes written, want %d", tc.Shape(), len(raw), want)
		}
		back, err := data.ReadNPY(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("%s: %v", tc.Shape(), err)
		}
		if !back.Shape().Equal(tc.Shape()) || back.String() != tc.String() {
			t.Errorf("read back %s, want %s", back, tc)
		}
	}
	if _, err := data.ReadNPY(strings.NewReader("PK\x03\x04 not npy")); err == nil {
		t.Error("ReadNPY accepted a file without the .npy magic")
	}
}

// TestNPYReadByNumPy: NumPy reads the files with the right dtype, shape and values.
func TestNPYReadByNumPy(t *testing.T) {
	python := venvPython()
	if python == "" {
		t.Skip("no ../.venv/bin/python (.ci/run creates it): NumPy's reading is not checked")
	}
	dir := t.TempDir()
	must(t, data.WriteNPYFile(filepath.Join(dir, "f.npy"), tensors.FromFlatDataAndDimensions([]float32{1.5, -2, 3.25, 1e-30, 7, 8}, 2, 3)))
	must(t, data.WriteNPYFile(filepath.Join(dir, "i.npy"), tensors.FromFlatDataAndDimensions([]int32{1, -2, 1 << 30}, 3)))
	must(t, data.WriteNPYFile(filepath.Join(dir, "s.npy"), tensors.FromFlatDataAndDimensions([]float64{0.1})))
	script := `
import sys, numpy as np
d = sys.argv[1]
f, i, s = np.load(d + "/f.npy"), np.load(d + "/i.npy"), np.load(d + "/s.npy")
assert f.dtype == np.float32 and f.shape == (2, 3), (f.dtype, f.shape)
assert f.ravel().tolist() == [1.5, -2.0, 3.25, float(np.float32(1e-30)), 7.0, 8.0], f
assert i.dtype == np.int32 and i.tolist() == [1, -2, 1 << 30], i
assert s.dtype == np.float64 and s.shape == () and s == 0.1, s
np.save(d + "/back.npy", np.arange(6, dtype=np.float32).reshape(3, 2))
print("ok")
`
	out, err := exec.Command(python, "-c", script, dir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok") {
		t.Fatalf("numpy could not read the files: %v\n%s", err, out)
	}
	back, err := data.ReadNPYFile(filepath.Join(dir, "back.npy"))
	if err != nil {
		t.Fatal(err)
	}
	if want := tensors.FromFlatDataAndDimensions([]float32{0, 1, 2, 3, 4, 5}, 3, 2); back.String() != want.String() {
		t.Errorf("ReadNPY of NumPy's file = %s, want %s", back, want)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
