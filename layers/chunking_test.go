package layers_test

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
)

func TestParseAttention(t *testing.T) {
	for s, want := range map[string]layers.Attention{
		"plain":            {},
		"chunked":          {Chunked: true},
		"chunked=256":      {Chunked: true, Block: 256},
		"chunked=512x8192": {Chunked: true, Block: 512, KeyBlock: 8192},
	} {
		got, err := layers.ParseAttention(s)
		if err != nil || got != want {
			t.Errorf("ParseAttention(%q) = %+v, %v; want %+v", s, got, err, want)
		}
		if again, err := layers.ParseAttention(got.String()); err != nil || again != got {
			t.Errorf("ParseAttention(%q.String() = %q) = %+v, %v", s, got.String(), again, err)
		}
	}
	for _, s := range []string{"", "flash", "plain=4", "chunked=", "chunked=0", "chunked=-2", "chunked=4x", "chunked=axb"} {
		if _, err := layers.ParseAttention(s); err == nil || !strings.Contains(err.Error(), "attention") {
			t.Errorf("ParseAttention(%q): got %v, want an error naming the attention", s, err)
		}
	}
}

func TestParseMLP(t *testing.T) {
	for s, want := range map[string]layers.MLP{"plain": {}, "chunked": {Chunk: layers.DefaultMLPChunk}, "chunked=100": {Chunk: 100}} {
		got, err := layers.ParseMLP(s)
		if err != nil || got != want {
			t.Errorf("ParseMLP(%q) = %+v, %v; want %+v", s, got, err, want)
		}
		if again, err := layers.ParseMLP(got.String()); err != nil || again != got {
			t.Errorf("ParseMLP(%q.String() = %q) = %+v, %v", s, got.String(), again, err)
		}
	}
	for _, s := range []string{"tiled", "chunked=0", "chunked=", "plain=3"} {
		if _, err := layers.ParseMLP(s); err == nil || !strings.Contains(err.Error(), "mlp") {
			t.Errorf("ParseMLP(%q): got %v, want an error naming the mlp", s, err)
		}
	}
	if err := (layers.MLP{Chunk: -1}).Validate(); err == nil {
		t.Error("MLP{Chunk: -1}.Validate() = nil, want an error")
	}
}

func TestParseCrossEntropy(t *testing.T) {
	for s, want := range map[string]layers.CrossEntropy{
		"plain": {}, "chunked": {Chunk: layers.DefaultCrossEntropyChunk}, "chunked=100": {Chunk: 100},
	} {
		got, err := layers.ParseCrossEntropy(s)
		if err != nil || got != want {
			t.Errorf("ParseCrossEntropy(%q) = %+v, %v; want %+v", s, got, err, want)
		}
		if again, err := layers.ParseCrossEntropy(got.String()); err != nil || again != got {
			t.Errorf("ParseCrossEntropy(%q.String() = %q) = %+v, %v", s, got.String(), again, err)
		}
	}
	for _, s := range []string{"fused", "chunked=0", "chunked=1x2", "plain=3"} {
		if _, err := layers.ParseCrossEntropy(s); err == nil || !strings.Contains(err.Error(), "cross-entropy") {
			t.Errorf("ParseCrossEntropy(%q): got %v, want an error naming the cross-entropy", s, err)
		}
	}
	if err := (layers.CrossEntropy{Chunk: -1}).Validate(); err == nil {
		t.Error("CrossEntropy{Chunk: -1}.Validate() = nil, want an error")
	}
	for _, bad := range []layers.Attention{{Chunked: true, KeyBlock: 4}, {Block: 4}, {Chunked: true, Block: -1}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v.Validate() = nil, want an error", bad)
		}
	}
	for seq, want := range map[int][2]int{100: {1024, 1024}, 8192: {1024, 1024}, 16384: {2048, 2048}, 20000: {2560, 2560}} {
		if q, k := (layers.Attention{Chunked: true}).Blocks(seq); q != want[0] || k != want[1] {
			t.Errorf("automatic blocks at seq %d: %d x %d, want %v", seq, q, k, want)
		}
	}
	if q, k := (layers.Attention{Chunked: true, Block: 64, KeyBlock: 256}).Blocks(1000); q != 64 || k != 256 {
		t.Errorf("blocks 64x256 at seq 1000: %d x %d", q, k)
	}
}

// TestSetAttention: the tutorial's attention layer (CausalSelfAttention) computes with the
// Attention set on its context: chunked, its loss and gradients (input and every weight) equal the
// plain layer's within float32 rounding.
func TestSetAttention(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	const seq = 13
	x, r := randomTensor(rng, 2, seq, attnWidth), randomTensor(rng, 2, seq, attnWidth)
	ctx := context.New()
	// A fixed seed: the chunked/plain difference depends on the initial weights (a function of
	// the seed, 0 when unset, and the variables' names: layers.NormalVariable).
	ctx.SetParam(layers.ParamSeed, int64(42))
	run := func(a layers.Attention) [][]float64 {
		layers.SetAttention(ctx, a)
		return testkit.RunContext(t, testkit.Embedded(), ctx, func(ctx *context.Context, xs []*graph.Node) []*graph.Node {
			return attentionLoss(ctx, dtypes.Float32, xs[0], xs[1])
		}, x, r)
	}
	want := run(layers.Attention{})
	ctx = ctx.Reuse()
	got := run(layers.Attention{Chunked: true, Block: 4})
	got = got[:len(want)] // the second run also differentiates the random state the first one created
	if slices.EqualFunc(got, want, slices.Equal) {
		t.Error("the chunked layer's results are bit for bit the plain layer's: the Attention set on the context was not used")
	}
	for i := range want {
		limit := 1e-5
		if i == 0 {
			limit = 1e-6
		}
		if rel := testkit.RelL2(got[i], want[i]); rel > limit {
			t.Errorf("output %d: chunked differs from plain by %.2g relative L2, want <= %g", i, rel, limit)
		}
	}
}
