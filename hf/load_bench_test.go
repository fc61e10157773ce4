package hf_test

import (
	"path/filepath"
	"runtime"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/hf"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/models"
)

// BenchmarkLoad loads a 14.2M-parameter bfloat16 checkpoint (28 MB) into float32 variables and
// reports, besides time and allocations, extra-B/op: the bytes allocated beyond the variables'
// own tensors, which bounds the Go memory loading needs on top of the model (the file is mapped,
// and each tensor is converted straight into its variable).
//
//	go test ./hf -run XXX -bench Load -benchtime 5x
func BenchmarkLoad(b *testing.B) {
	c := models.LlamaConfig{Vocab: 8192, Hidden: 512, Intermediate: 1408, Layers: 2, Heads: 8, KVHeads: 2, HeadDim: 64,
		SeqLen: 512, MaxPositions: 512, RopeTheta: 10000, NormEpsilon: 1e-5}
	dir := b.TempDir()
	writeRandomCheckpoint(b, dir, c)
	variableBytes := c.Params() * 4
	b.ReportAllocs()
	b.ResetTimer()
	var allocated uint64
	for range b.N {
		ctx := context.New()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		if _, err := hf.Open(ctx, dir, dtypes.Float32, 0); err != nil {
			b.Fatal(err)
		}
		runtime.ReadMemStats(&m1)
		allocated += m1.TotalAlloc - m0.TotalAlloc
	}
	b.ReportMetric(float64(int64(allocated/uint64(b.N))-variableBytes), "extra-B/op")
	b.ReportMetric(float64(variableBytes), "variable-B")
}

// writeRandomCheckpoint writes a bfloat16 model.safetensors and config.json for c, streaming.
func writeRandomCheckpoint(tb testing.TB, dir string, c models.LlamaConfig) {
	tb.Helper()
	layout, err := hf.Describe(models.Llama{Config: c})
	if err != nil {
		tb.Fatal(err)
	}
	var specs []testkit.RandomTensor
	for _, spec := range layout.Tensors() {
		specs = append(specs, testkit.RandomTensor{Name: spec.Name, Shape: spec.Shape})
	}
	testkit.WriteRandomHF(tb, dir, specs, layout.Config())
}

// BenchmarkExport writes the same 14.2M-parameter model (float32 variables) as a bfloat16
// checkpoint and reports extra-B/op, the bytes Export allocates (conversion buffers, headers):
// it never holds a file's worth of data.
//
//	go test ./hf -run XXX -bench Export -benchtime 5x
func BenchmarkExport(b *testing.B) {
	c := models.LlamaConfig{Vocab: 8192, Hidden: 512, Intermediate: 1408, Layers: 2, Heads: 8, KVHeads: 2, HeadDim: 64,
		SeqLen: 512, MaxPositions: 512, RopeTheta: 10000, NormEpsilon: 1e-5}
	dir := b.TempDir()
	writeRandomCheckpoint(b, dir, c)
	ctx := context.New()
	if _, err := hf.Open(ctx, dir, dtypes.Float32, 0); err != nil {
		b.Fatal(err)
	}
	out := filepath.Join(b.TempDir(), "out")
	b.ReportAllocs()
	b.ResetTimer()
	var allocated uint64
	for range b.N {
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		if err := hf.Export(ctx, out, models.Llama{Config: c}, hf.ExportOptions{DType: dtypes.BFloat16}); err != nil {
			b.Fatal(err)
		}
		runtime.ReadMemStats(&m1)
		allocated += m1.TotalAlloc - m0.TotalAlloc
	}
	b.ReportMetric(float64(allocated/uint64(b.N)), "extra-B/op")
	b.ReportMetric(float64(c.Params()*2), "file-B")
}
