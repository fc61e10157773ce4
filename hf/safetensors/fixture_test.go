package safetensors_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/x448/float16"

	"github.com/onegpu/onegpu/hf/safetensors"
)

// The tensors of reference/hf/safetensors_fixture.py, in its order (tensor number k), and its
// values: a formula of the value's index and k, so that Go and Python check each other.
var fixture = []struct {
	name  string
	dtype safetensors.DType
	shape []int
}{
	{"model.embed_tokens.weight", safetensors.F32, []int{4, 3}},
	{"model.norm.weight", safetensors.BF16, []int{5}},
	{"half", safetensors.F16, []int{2, 2}},
	{"double", safetensors.F64, []int{}},
	{"ids", safetensors.I64, []int{3}},
	{"ids32", safetensors.I32, []int{2, 1}},
	{"small", safetensors.I16, []int{2}},
	{"tiny", safetensors.I8, []int{3}},
	{"bytes", safetensors.U8, []int{3}},
	{"u16", safetensors.U16, []int{1}},
	{"u32", safetensors.U32, []int{2}},
	{"u64", safetensors.U64, []int{1}},
	{"flags", safetensors.BOOL, []int{4}},
	{"empty", safetensors.F32, []int{0, 3}},
}

var fixtureMetadata = map[string]string{"format": "pt"}

// fixtureBytes is tensor k's data as the script's value(k, ...) gives it, little-endian.
func fixtureBytes(k int) []byte {
	f := fixture[k]
	n := 1
	for _, d := range f.shape {
		n *= d
	}
	var out []byte
	for i := range n {
		base := (i*7 + k*3) % 23
		x := float64(base-11) * 0.25
		switch f.dtype {
		case safetensors.F32:
			out = binary.LittleEndian.AppendUint32(out, math.Float32bits(float32(x)))
		case safetensors.F64:
			out = binary.LittleEndian.AppendUint64(out, math.Float64bits(x))
		case safetensors.BF16:
			out = binary.LittleEndian.AppendUint16(out, uint16(math.Float32bits(float32(x))>>16)) // exact: x has few bits
		case safetensors.F16:
			out = binary.LittleEndian.AppendUint16(out, float16.Fromfloat32(float32(x)).Bits())
		case safetensors.I64:
			out = binary.LittleEndian.AppendUint64(out, uint64(int64(base-11)))
		case safetensors.I32:
			out = binary.LittleEndian.AppendUint32(out, uint32(int32(base-11)))
		case safetensors.I16:
			out = binary.LittleEndian.AppendUint16(out, uint16(int16(base-11)))
		case safetensors.I8:
			out = append(out, byte(int8(base-11)))
		case safetensors.U8:
			out = append(out, byte(base))
		case safetensors.U16:
			out = binary.LittleEndian.AppendUint16(out, uint16(base))
		case safetensors.U32:
			out = binary.LittleEndian.AppendUint32(out, uint32(base))
		case safetensors.U64:
			out = binary.LittleEndian.AppendUint64(out, uint64(base))
		case safetensors.BOOL:
			if (i+k)%3 == 0 {
				out = append(out, 1)
			} else {
				out = append(out, 0)
			}
		}
	}
	return out
}

func fixtureTensors() []safetensors.Tensor {
	var ts []safetensors.Tensor
	for k, f := range fixture {
		data := fixtureBytes(k)
		ts = append(ts, safetensors.Tensor{Name: f.name, DType: f.dtype, Shape: f.shape,
			Data: func(w io.Writer) error { _, err := w.Write(data); return err }})
	}
	return ts
}

// checkFixtureFile checks that the file at path holds exactly the fixture's tensors.
func checkFixtureFile(t *testing.T, path string, open func(string) (*safetensors.File, error)) {
	t.Helper()
	f, err := open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if len(f.Tensors) != len(fixture) || len(f.Metadata) != 1 || f.Metadata["format"] != "pt" {
		t.Fatalf("%d tensors, metadata %v; want %d and %v", len(f.Tensors), f.Metadata, len(fixture), fixtureMetadata)
	}
	for k, want := range fixture {
		info, ok := f.Tensor(want.name)
		if !ok {
			t.Fatalf("no tensor %q", want.name)
		}
		if info.DType != want.dtype || !slices.Equal(info.Shape, want.shape) {
			t.Errorf("%s: %s%v, want %s%v", want.name, info.DType, info.Shape, want.dtype, want.shape)
		}
		got, err := f.ReadTensor(want.name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, fixtureBytes(k)) {
			t.Errorf("%s: bytes %v, want %v", want.name, got, fixtureBytes(k))
		}
		// Chunks of one, two and many values reassemble the same bytes, each chunk whole values.
		for _, chunk := range []int{1, 3, 8, 1 << 20} {
			var joined []byte
			err := f.Chunks(want.name, chunk, func(c []byte) error {
				if size := max(want.dtype.Bits()/8, 1); len(c)%size != 0 {
					t.Errorf("%s: chunk of %d bytes splits a %d-byte value", want.name, len(c), size)
				}
				joined = append(joined, c...)
				return nil
			})
			if err != nil || !bytes.Equal(joined, fixtureBytes(k)) {
				t.Errorf("%s in chunks of %d: %v, %v", want.name, chunk, joined, err)
			}
		}
	}
}

// TestReadsPythonFile reads the committed file written by Python's safetensors 0.8.0 (by
// reference/hf/safetensors_fixture.py), mapped and by offset.
func TestReadsPythonFile(t *testing.T) {
	path := filepath.Join("testdata", "python.safetensors")
	t.Run("mapped", func(t *testing.T) { checkFixtureFile(t, path, safetensors.Open) })
	t.Run("by offset", func(t *testing.T) { checkFixtureFile(t, path, safetensors.OpenUnmapped) })
}

// TestWriteIsPythonsFile: written from the same tensors, Go's file is Python's byte for byte
// (tensor order, header JSON, padding).
func TestWriteIsPythonsFile(t *testing.T) {
	want, err := os.ReadFile(filepath.Join("testdata", "python.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := safetensors.Write(&buf, fixtureTensors(), fixtureMetadata); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("Go wrote\n%q\nPython wrote\n%q", buf.Bytes(), want)
	}
}

// venvPython is the repository's Python (.ci/run creates it with safetensors 0.8.0), or "".
func venvPython(t *testing.T) string {
	p, err := filepath.Abs(filepath.Join("..", "..", ".venv", "bin", "python"))
	if err != nil {
		return ""
	}
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	if err := exec.Command(p, "-c", "import safetensors, ml_dtypes").Run(); err != nil {
		return ""
	}
	return p
}

// TestPythonRoundTrip runs the reference implementation now: the file it writes is Go's byte for
// byte, and it reads back Go's file (written with WriteFile) value for value.
func TestPythonRoundTrip(t *testing.T) {
	python := venvPython(t)
	if python == "" {
		t.Skip("no ../../.venv/bin/python with safetensors and ml_dtypes (.ci/run creates it): the live check against Python is not run")
	}
	script := filepath.Join("..", "..", "reference", "hf", "safetensors_fixture.py")
	dir := t.TempDir()
	pyPath, goPath := filepath.Join(dir, "python.safetensors"), filepath.Join(dir, "go.safetensors")
	if out, err := exec.Command(python, script, "write", pyPath).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if err := safetensors.WriteFile(goPath, fixtureTensors(), fixtureMetadata); err != nil {
		t.Fatal(err)
	}
	pyBytes, _ := os.ReadFile(pyPath)
	goBytes, _ := os.ReadFile(goPath)
	if !bytes.Equal(pyBytes, goBytes) {
		t.Errorf("Python's file (%d bytes) differs from Go's (%d bytes)", len(pyBytes), len(goBytes))
	}
	out, err := exec.Command(python, script, "check", goPath).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "ok") {
		t.Fatalf("Python's check of Go's file: %v: %s", err, out)
	}
	checkFixtureFile(t, pyPath, safetensors.Open)
}
