package train_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/train"
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
		if err := train.WriteNPY(&buf, tc); err != nil {
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
		back, err := train.ReadNPY(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("%s: %v", tc.Shape(), err)
		}
		if !back.Shape().Equal(tc.Shape()) || back.String() != tc.String() {
			t.Errorf("read back %s, want %s", back, tc)
		}
	}
	if _, err := train.ReadNPY(strings.NewReader("PK\x03\x04 not npy")); err == nil {
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
	must(t, train.WriteNPYFile(filepath.Join(dir, "f.npy"), tensors.FromFlatDataAndDimensions([]float32{1.5, -2, 3.25, 1e-30, 7, 8}, 2, 3)))
	must(t, train.WriteNPYFile(filepath.Join(dir, "i.npy"), tensors.FromFlatDataAndDimensions([]int32{1, -2, 1 << 30}, 3)))
	must(t, train.WriteNPYFile(filepath.Join(dir, "s.npy"), tensors.FromFlatDataAndDimensions([]float64{0.1})))
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
	back, err := train.ReadNPYFile(filepath.Join(dir, "back.npy"))
	if err != nil {
		t.Fatal(err)
	}
	if want := tensors.FromFlatDataAndDimensions([]float32{0, 1, 2, 3, 4, 5}, 3, 2); back.String() != want.String() {
		t.Errorf("ReadNPY of NumPy's file = %s, want %s", back, want)
	}
}

// TestExportTinyGPT: Initialize compiles and initializes without updating anything; Export writes
// every parameter under its Flax path, the batches and a config; the first step starts from
// exactly the exported weights (its learning rate is 0, so they are still equal after it).
func TestExportTinyGPT(t *testing.T) {
	config := tinyConfig(t)
	config.GPT.Layers = 1
	config.Schedule.Init = 0
	tr, err := train.New(embedded(), config)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	data, err := train.NewSyntheticTokens(config.Batch, config.GPT.SeqLen, config.GPT.Vocab, 3)
	must(t, err)
	must(t, tr.Initialize())
	if tr.GlobalStep() != 0 {
		t.Fatalf("after Initialize the global step is %d, want 0", tr.GlobalStep())
	}
	dir := t.TempDir()
	ref, err := tr.Export(dir, data, 3)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	var size int64
	for _, p := range ref.Params {
		paths = append(paths, p.Path)
		n := int64(1)
		for _, d := range p.Shape {
			n *= int64(d)
		}
		size += n
	}
	for _, want := range []string{"embed/embedding", "pos_emb", "block_0/mlp/pre_norm/scale", "block_0/mlp/input_layer/kernel",
		"block_0/mlp/output_layer/bias", "block_0/attn/qkv/kernel", "block_0/attn/output_layer/kernel", "post_norm/bias", "output_layer/kernel"} {
		if !slices.Contains(paths, want) {
			t.Errorf("exported parameters %v lack %s", paths, want)
		}
	}
	if want := config.GPT.Params(); size != want {
		t.Errorf("exported %d parameter values, want %d", size, want)
	}
	qkv, err := train.ReadNPYFile(filepath.Join(dir, "params", "block_0", "attn", "qkv", "kernel.npy"))
	if err != nil {
		t.Fatal(err)
	}
	c := config.GPT
	if got, want := qkv.Shape().Dimensions, []int{c.Hidden, c.Heads(), 3 * c.HeadDim}; !slices.Equal(got, want) {
		t.Errorf("qkv kernel shape %v, want %v (Flax's DenseGeneral layout)", got, want)
	}
	inputs, err := train.ReadNPYFile(filepath.Join(dir, "inputs.npy"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := inputs.Shape().Dimensions, []int{3, config.Batch, c.SeqLen}; !slices.Equal(got, want) {
		t.Errorf("inputs shape %v, want %v", got, want)
	}
	var back train.Reference
	blob, err := os.ReadFile(filepath.Join(dir, "config.json"))
	must(t, err)
	must(t, json.Unmarshal(blob, &back))
	if back.GPT == nil || back.GPT.Heads != c.Heads() || back.Policy["compute"] != "bfloat16" || !slices.Equal(back.Remat, []string{"mlp", "attn"}) ||
		back.MicroBatches != config.MicroBatches || back.Schedule.Peak != config.Schedule.Peak {
		t.Errorf("config.json = %s", blob)
	}

	if _, err := tr.Step(data.Batch(0)); err != nil { // learning rate 0: the weights stay
		t.Fatal(err)
	}
	after := t.TempDir()
	if _, err := tr.Export(after, data, 1); err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		a, err1 := os.ReadFile(filepath.Join(dir, "params", p+".npy"))
		b, err2 := os.ReadFile(filepath.Join(after, "params", p+".npy"))
		if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
			t.Errorf("%s changed in a step of learning rate 0 (%v, %v): the step did not start from the exported weights", p, err1, err2)
		}
	}
}

// TestExportClassifierNames: the MLP's parameters carry Flax's automatic names.
func TestExportClassifierNames(t *testing.T) {
	c := models.TutorialClassifier
	c.Inputs, c.Hidden, c.Classes, c.Batch = 8, 16, 5, 4
	p := tinyConfig(t).Policy
	tr, err := train.New(embedded(), train.Config{Model: "mlp", Classifier: c, Batch: 4, MicroBatches: 1, Policy: p,
		LossScale: "none", Schedule: train.TutorialSchedule})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	data, err := train.NewClassifierBatch(4, 8, 5, 1)
	must(t, err)
	must(t, tr.Initialize())
	ref, err := tr.Export(t.TempDir(), data, 1)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, p := range ref.Params {
		paths = append(paths, p.Path)
	}
	want := []string{"Dense_0/bias", "Dense_0/kernel", "Dense_1/bias", "Dense_1/kernel", "LayerNorm_0/bias", "LayerNorm_0/scale"}
	if !slices.Equal(paths, want) {
		t.Errorf("classifier parameters %v, want %v", paths, want)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
