package hf_test

import (
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
	"github.com/onegpu/onegpu/internal/testkit"
)

// logitsModel is a model that maps tokens to logits (models.Llama, which the Llama and Qwen2
// families read).
type logitsModel interface {
	Logits(ctx *context.Context, tokens *graph.Node) *graph.Node
}

// maxLogitsError runs the model a folder was opened into (float32 throughout: the policy when
// none is set) on the fixture's tokens and returns the largest absolute difference from
// transformers' logits. p.Ctx is in Reuse mode, so that a variable the checkpoint did not provide
// is an error, not a fresh random weight.
func maxLogitsError(t *testing.T, backend backends.Backend, p *hf.Pretrained, fx testkit.HFFixture) float64 {
	t.Helper()
	got := logitsOf(t, backend, p, fx)
	if len(got) != len(fx.Logits) {
		t.Fatalf("%d logits, transformers gives %d", len(got), len(fx.Logits))
	}
	worst := 0.0
	for i := range got {
		worst = max(worst, math.Abs(float64(got[i])-float64(fx.Logits[i])))
	}
	return worst
}

// logitsOf runs the model a folder was opened into on the fixture's tokens and returns its
// float32 logits.
func logitsOf(t *testing.T, backend backends.Backend, p *hf.Pretrained, fx testkit.HFFixture) []float32 {
	t.Helper()
	m, ok := p.Model.(logitsModel)
	if !ok {
		t.Fatalf("%s holds a %T, which has no Logits", p.Dir, p.Model)
	}
	exec, err := context.NewExec(backend, p.Ctx, func(ctx *context.Context, tokens *graph.Node) *graph.Node {
		return m.Logits(ctx, tokens)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	out, err := exec.Exec(tensors.FromFlatDataAndDimensions(fx.Tokens, fx.Batch, fx.Seq))
	if err != nil {
		t.Fatal(err)
	}
	return tensors.MustCopyFlatData[float32](out[0])
}

// TestLogitsMatchTransformers is the Hugging Face round trip of issue 25: the model of every
// committed fixture (Llama 3 scaling, untied, float32; a Llama tied, bfloat16, sharded; Qwen2 with
// q/k/v biases, tied), opened from transformers' own save_pretrained files, computes
// transformers' float32 logits within 1e-4 (max abs) on every backend; exported and opened again,
// it computes the same figure.
func TestLogitsMatchTransformers(t *testing.T) {
	const tolerance = 1e-4
	for _, name := range testkit.HFFixtureNames(t) {
		fx := testkit.ReadHFFixture(t, name)
		for _, backend := range testkit.All() {
			t.Run(fmt.Sprintf("%s/%s", name, backend.Name()), func(t *testing.T) {
				p, err := hf.Open(context.New(), fx.Dir, dtypes.Float32, 0)
				if err != nil {
					t.Fatal(err)
				}
				loaded := maxLogitsError(t, backend, p, fx)
				exported := filepath.Join(t.TempDir(), "exported")
				if err := hf.Export(p.Ctx, exported, p.Model, hf.ExportOptions{}); err != nil {
					t.Fatal(err)
				}
				again, err := hf.Open(context.New(), exported, dtypes.Float32, 0)
				if err != nil {
					t.Fatal(err)
				}
				reloaded := maxLogitsError(t, backend, again, fx)
				t.Logf("max |onegpu - transformers| logits: %.3g loaded, %.3g exported and reloaded", loaded, reloaded)
				if loaded > tolerance || reloaded != loaded {
					t.Errorf("logits differ from transformers' by %g (loaded) and %g (exported, reloaded); want <= %g and equal", loaded, reloaded, tolerance)
				}
			})
		}
	}
}
