package hf_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/hf"
	"github.com/onegpu/onegpu/hf/safetensors"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/models"
)

// reference is a fixture's tokens and transformers' float32 logits for them.
type reference struct {
	tokens []int64
	batch  int
	seq    int
	logits []float32
}

func readReference(t *testing.T, fixture string) reference {
	t.Helper()
	f, err := safetensors.Open(fixture + ".logits.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tok, _ := f.Tensor("tokens")
	raw, err := f.ReadTensor("tokens")
	if err != nil || tok.DType != safetensors.I64 || len(tok.Shape) != 2 {
		t.Fatalf("tokens %+v: %v", tok, err)
	}
	r := reference{batch: tok.Shape[0], seq: tok.Shape[1]}
	for i := 0; i < len(raw); i += 8 {
		r.tokens = append(r.tokens, int64(binary.LittleEndian.Uint64(raw[i:])))
	}
	logits, err := f.ReadTensor("logits")
	if err != nil {
		t.Fatal(err)
	}
	r.logits = rawTensor{dtype: safetensors.F32, data: logits}.float32s(t)
	return r
}

// llamaLogits runs models.Llama (float32 throughout) on the reference's tokens with the weights
// loaded into ctx, and returns the largest absolute difference from transformers' logits. The model
// is built with ctx.Reuse(), so that a variable the checkpoint did not provide is an error, not a
// fresh random weight.
func llamaLogits(t *testing.T, backend backends.Backend, ctx *context.Context, c models.LlamaConfig, ref reference) float64 {
	t.Helper()
	m, err := models.NewLlama(c) // float32 throughout: the policy when none is set
	if err != nil {
		t.Fatal(err)
	}
	exec, err := context.NewExec(backend, ctx.Reuse(), func(ctx *context.Context, tokens *graph.Node) *graph.Node {
		return m.Logits(ctx, tokens)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	out, err := exec.Exec(tensors.FromFlatDataAndDimensions(ref.tokens, ref.batch, ref.seq))
	if err != nil {
		t.Fatal(err)
	}
	got := tensors.MustCopyFlatData[float32](out[0])
	if len(got) != len(ref.logits) {
		t.Fatalf("%d logits, transformers gives %d", len(got), len(ref.logits))
	}
	worst := 0.0
	for i := range got {
		worst = max(worst, math.Abs(float64(got[i])-float64(ref.logits[i])))
	}
	return worst
}

// TestLogitsMatchTransformers is the Hugging Face round trip of issue 25: onegpu's Llama, loaded
// from transformers' own save_pretrained files, computes transformers' float32 logits within 1e-4
// (max abs) on both fixtures (Llama 3 scaling, untied, float32; tied, bfloat16, sharded), on
// every backend; exported and loaded again, it computes the same figure.
func TestLogitsMatchTransformers(t *testing.T) {
	const tolerance = 1e-4
	for _, fixture := range []string{untiedDir, tiedDir} {
		ref := readReference(t, fixture)
		for _, backend := range testkit.All() {
			t.Run(fmt.Sprintf("%s/%s", filepath.Base(fixture), backend.Name()), func(t *testing.T) {
				ctx := context.New()
				c, err := hf.Load(ctx, fixture, dtypes.Float32)
				if err != nil {
					t.Fatal(err)
				}
				loaded := llamaLogits(t, backend, ctx, c, ref)
				exported := filepath.Join(t.TempDir(), "exported")
				if err := hf.Export(ctx, exported, c, hf.ExportOptions{}); err != nil {
					t.Fatal(err)
				}
				again := context.New()
				if _, err := hf.Load(again, exported, dtypes.Float32); err != nil {
					t.Fatal(err)
				}
				reloaded := llamaLogits(t, backend, again, c, ref)
				t.Logf("max |onegpu - transformers| logits: %.3g loaded, %.3g exported and reloaded", loaded, reloaded)
				if loaded > tolerance || reloaded != loaded {
					t.Errorf("logits differ from transformers' by %g (loaded) and %g (exported, reloaded); want <= %g and equal", loaded, reloaded, tolerance)
				}
			})
		}
	}
}
