package hf_test

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/hf"
	"github.com/onegpu/onegpu/hf/safetensors"
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
	r := rand.New(rand.NewPCG(1, 1))
	layout, err := hf.Describe(models.Llama{Config: c})
	if err != nil {
		tb.Fatal(err)
	}
	var ts []safetensors.Tensor
	for _, spec := range layout.Tensors() {
		n := 1
		for _, d := range spec.Shape {
			n *= d
		}
		ts = append(ts, safetensors.Tensor{Name: spec.Name, DType: safetensors.BF16, Shape: spec.Shape, Data: func(w io.Writer) error {
			buf := make([]byte, 2*1024)
			for left := n; left > 0; left -= len(buf) / 2 {
				k := min(left, len(buf)/2)
				for i := range k {
					binary.LittleEndian.PutUint16(buf[2*i:], uint16(r.IntN(2)<<15|0x3c00|r.IntN(0x100))) // ±[2^-7, 2^-6)
				}
				if _, err := w.Write(buf[:2*k]); err != nil {
					return err
				}
			}
			return nil
		}})
	}
	if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
		tb.Fatal(err)
	}
	config, _ := json.Marshal(map[string]any{"model_type": "llama", "vocab_size": c.Vocab, "hidden_size": c.Hidden,
		"intermediate_size": c.Intermediate, "num_hidden_layers": c.Layers, "num_attention_heads": c.Heads,
		"num_key_value_heads": c.KVHeads, "max_position_embeddings": c.MaxPositions})
	if err := os.WriteFile(filepath.Join(dir, "config.json"), config, 0o644); err != nil {
		tb.Fatal(err)
	}
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
