package infer

import (
	"fmt"
	"math"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/hf"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/train"
)

// fullLogits is the reference: the model's own Logits (the training forward pass, no cache, no
// bucket) of tokens, [len(tokens)][vocab], under policy.
func fullLogits(t *testing.T, backend backends.Backend, m Model, ctx *context.Context, policy mixed.Policy, tokens []int32) [][]float32 {
	t.Helper()
	logits, ok := m.(interface {
		Logits(ctx *context.Context, tokens *graph.Node) *graph.Node
	})
	if !ok {
		t.Fatalf("%T has no Logits", m)
	}
	exec, err := context.NewExec(backend, ctx, func(ctx *context.Context, tokens *graph.Node) *graph.Node {
		train.Settings{Policy: policy}.Apply(ctx, tokens.Graph())
		return graph.ConvertDType(logits.Logits(ctx, tokens), dtypes.Float32)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	outs, err := exec.Exec(tensors.FromFlatDataAndDimensions(tokens, 1, len(tokens)))
	if err != nil {
		t.Fatal(err)
	}
	return outs[0].Value().([][][]float32)[0]
}

// stepLogits are a session's logits after tokens[:prefill], then after each further token:
// [len(tokens)-prefill+1][vocab], those of positions prefill-1 .. len(tokens)-1.
func stepLogits(t *testing.T, s session, tokens []int32, prefill int) [][]float32 {
	t.Helper()
	defer s.close()
	if err := s.compile(prefill, len(tokens)+1); err != nil {
		t.Fatal(err)
	}
	first, err := s.prefill(tokens[:prefill])
	if err != nil {
		t.Fatal(err)
	}
	out := [][]float32{first}
	for _, tok := range tokens[prefill:] {
		next, err := s.next(tok)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, next)
	}
	return out
}

// maxDifference is the largest |a - b| over rows of logits, and where.
func maxDifference(a, b [][]float32) (worst float64, at string) {
	for i := range a {
		for j := range a[i] {
			if d := math.Abs(float64(a[i][j]) - float64(b[i][j])); d > worst || d != d {
				worst, at = d, fmt.Sprintf("row %d, token %d: %g vs %g", i, j, a[i][j], b[i][j])
			}
		}
	}
	return worst, at
}

// TestCachedLogitsEqualRecomputation: on every committed fixture on the embedded backend, and on
// llama3_untied in float32 on XLA ($ONEGPU_PJRT_PLUGIN; its compilations take seconds each), the logits a KV cache gives (a prompt of 8 tokens in one pass, then
// one token a step, 16 steps) equal those of the model's own forward pass over the whole sequence
// within 1e-5 (float32), and so do those of recomputation without a cache (padded buckets).
// Under a bfloat16 compute policy (the cache in bfloat16) they agree within bfloat16's rounding.
func TestCachedLogitsEqualRecomputation(t *testing.T) {
	const prefill = 8
	for _, backend := range testkit.All() {
		for _, name := range testkit.HFFixtureNames(t) {
			if backend != testkit.Embedded() && name != "llama3_untied" {
				continue
			}
			fx := testkit.ReadHFFixture(t, name)
			tokens := make([]int32, fx.Seq)
			for i := range tokens {
				tokens[i] = int32(fx.Tokens[i])
			}
			p, err := hf.Open(context.New(), fx.Dir, dtypes.Float32, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				policy    mixed.Policy
				tolerance float64
			}{{mixed.Float32, 1e-5}, {mixed.Policy{Param: dtypes.Float32, Compute: dtypes.BFloat16, Output: dtypes.Float32}, 0.1}} {
				if c.policy.Compute == dtypes.BFloat16 && (name != "llama3_untied" || backend != testkit.Embedded()) {
					continue // one fixture is enough to see the cache's dtype follow the policy
				}
				g, err := New(backend, p.Model.(train.Model), p.Ctx, train.Settings{Policy: c.policy})
				if err != nil {
					t.Fatal(err)
				}
				m := g.Model.(CachedModel)
				want := fullLogits(t, backend, m, p.Ctx, c.policy, tokens)[prefill-1:]
				cached := stepLogits(t, &cachedSession{g: g, m: m, length: bucket(len(tokens)+1, leastCache, g.Positions())}, tokens, prefill)
				recomputed := stepLogits(t, &recomputeSession{g: g, limit: g.Positions()}, tokens, prefill)
				for _, got := range []struct {
					what   string
					logits [][]float32
				}{{"the KV cache", cached}, {"recomputation", recomputed}} {
					worst, at := maxDifference(got.logits, want)
					t.Logf("%s, %s, %s: %s's logits within %.3g of the full forward pass", backend.Name(), name, c.policy, got.what, worst)
					if !(worst <= c.tolerance) {
						t.Errorf("%s, %s, %s: %s's logits differ from the full forward pass's by %.3g (%s), more than %g",
							backend.Name(), name, c.policy, got.what, worst, at, c.tolerance)
					}
				}
				g.Close()
			}
		}
	}
}
