package models_test

import (
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/remat"
)

// lossModel is what the chunked tests need of a model: its loss.
type lossModel interface {
	CrossEntropy(ctx *context.Context, tokens, labels, mask *graph.Node) (sum, count *graph.Node)
}

// lossAndGradients runs m's loss on tokens, labels and mask with ctx's settings and returns the
// sum, the count and the gradients of the sum with respect to every trainable variable (by name).
// The first call on a fresh ctx creates the variables.
func lossAndGradients(t *testing.T, backend backends.Backend, ctx *context.Context, m lossModel, inputs ...*tensors.Tensor) (sum, count float64, grads map[string][]float64) {
	t.Helper()
	var names []string
	exec, err := context.NewExec(backend, ctx, func(ctx *context.Context, tokens, labels, mask *graph.Node) []*graph.Node {
		s, c := m.CrossEntropy(ctx, tokens, labels, graph.GreaterThan(mask, graph.ScalarZero(mask.Graph(), mask.DType())))
		var wrt []*graph.Node
		names = names[:0]
		for v := range ctx.IterVariables() {
			if v.Trainable {
				names = append(names, v.ScopeAndName())
				wrt = append(wrt, v.ValueGraph(tokens.Graph()))
			}
		}
		return append([]*graph.Node{s, c}, graph.Gradient(s, wrt...)...)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	outs, err := exec.Exec(inputs[0], inputs[1], inputs[2])
	if err != nil {
		t.Fatal(err)
	}
	grads = map[string][]float64{}
	for i, name := range names {
		grads[name] = testkit.Floats(outs[2+i])
	}
	return testkit.Floats(outs[0])[0], testkit.Floats(outs[1])[0], grads
}

// tokenBatch returns random tokens, labels and a mask (about a quarter of the labels left out)
// of shape [batch, seq].
func tokenBatch(seed uint64, vocab, batch, seq int) []*tensors.Tensor {
	rng := rand.New(rand.NewPCG(seed, 1))
	tokens, labels, mask := make([]int32, batch*seq), make([]int32, batch*seq), make([]int32, batch*seq)
	for i := range tokens {
		tokens[i], labels[i] = int32(rng.IntN(vocab)), int32(rng.IntN(vocab))
		if rng.IntN(4) > 0 {
			mask[i] = 1
		}
	}
	return []*tensors.Tensor{tensors.FromFlatDataAndDimensions(tokens, batch, seq),
		tensors.FromFlatDataAndDimensions(labels, batch, seq), tensors.FromFlatDataAndDimensions(mask, batch, seq)}
}

// compareChunked runs m plainly on a fresh context, then with the chunked settings (and remat of
// whole blocks, as at long sequences) on the same variables, and checks the Done-when of issue 26:
// losses within 1e-6 relative, gradients within 1e-5 relative L2, in float32.
func compareChunked(t *testing.T, backend backends.Backend, m lossModel, chunked func(ctx *context.Context), inputs []*tensors.Tensor) {
	t.Helper()
	ctx := context.New()
	wantSum, wantCount, want := lossAndGradients(t, backend, ctx, m, inputs...)
	ctx = ctx.Reuse()
	chunked(ctx)
	remat.SetBlocks(ctx, remat.Config{}, "block")
	gotSum, gotCount, got := lossAndGradients(t, backend, ctx, m, inputs...)
	if rel := testkit.RelL2([]float64{gotSum}, []float64{wantSum}); rel > 1e-6 || gotCount != wantCount {
		t.Errorf("chunked loss %.9g over %g labels, plain %.9g over %g (relative %.2g), want <= 1e-6 and the same count",
			gotSum, gotCount, wantSum, wantCount, rel)
	}
	if len(got) != len(want) {
		t.Fatalf("chunked run differentiates %d variables, plain %d", len(got), len(want))
	}
	for name, w := range want {
		if rel := testkit.RelL2(got[name], w); rel > 1e-5 {
			t.Errorf("gradient of %s: chunked differs from plain by %.2g relative L2, want <= 1e-5", name, rel)
		}
	}
}

// TestLlamaChunkedMatchesPlain: the tiny Llama preset (tied embeddings, and untied), float32, at
// a sequence of 45 (not a multiple of the attention block 16 nor of the loss chunk 32), with a
// mask: chunked attention and cross-entropy set on the context give plain's loss and gradients.
func TestLlamaChunkedMatchesPlain(t *testing.T) {
	for _, tied := range []bool{true, false} {
		config, err := models.LlamaPreset("tiny")
		if err != nil {
			t.Fatal(err)
		}
		config.TiedEmbeddings = tied
		m, err := models.NewLlama(config)
		if err != nil {
			t.Fatal(err)
		}
		backends := testkit.All()
		if !tied {
			backends = backends[:1] // the embedded backend only: XLA compiles each program for seconds
		}
		for _, backend := range backends {
			compareChunked(t, backend, m, func(ctx *context.Context) {
				layers.SetAttention(ctx, layers.Attention{Chunked: true, Block: 16})
				layers.SetCrossEntropy(ctx, layers.CrossEntropy{Chunk: 32})
			}, tokenBatch(3, config.Vocab, 2, 45))
		}
	}
}

// TestGPTChunkedAttentionMatchesPlain: the tiny GPT preset without dropout, float32, sequence 45:
// chunked attention set on the context gives plain attention's loss and gradients.
func TestGPTChunkedAttentionMatchesPlain(t *testing.T) {
	config := models.Presets["tiny"]
	config.Dropout = 0
	m, err := models.NewGPT(config) // float32: no policy is set on the context
	if err != nil {
		t.Fatal(err)
	}
	compareChunked(t, testkit.Embedded(), maskedGPT{m}, func(ctx *context.Context) {
		layers.SetAttention(ctx, layers.Attention{Chunked: true, Block: 16})
	}, tokenBatch(4, config.Vocab, 2, 45))
}

// maskedGPT is the GPT's summed cross-entropy over the labels a mask keeps (the lossModel these
// tests compare); the GPT's own Loss (train.Model's) counts every label.
type maskedGPT struct{ models.GPT }

func (m maskedGPT) CrossEntropy(ctx *context.Context, tokens, labels, mask *graph.Node) (sum, count *graph.Node) {
	return mixed.SoftmaxCrossEntropySum(m.Logits(ctx, tokens), labels, mask)
}

// TestGPTChunkedLossMatchesPlain: the tiny GPT's train.Model loss (the one the trainer runs) with
// chunked attention and a chunked cross-entropy (chunk 32 of 90 tokens) set on the context gives
// plain's loss, gradients and accuracy count, float32, sequence 45, on both backends.
func TestGPTChunkedLossMatchesPlain(t *testing.T) {
	config := models.Presets["tiny"]
	config.Dropout = 0
	m, err := models.NewGPT(config)
	if err != nil {
		t.Fatal(err)
	}
	m.Config.SeqLen = 45
	chunked := func(ctx *context.Context) {
		layers.SetAttention(ctx, layers.Attention{Chunked: true, Block: 16})
		layers.SetCrossEntropy(ctx, layers.CrossEntropy{Chunk: 32})
	}
	for _, backend := range testkit.All() { // a tensor is used on one backend
		compareChunked(t, backend, trainLossGPT{m}, chunked, tokenBatch(5, config.Vocab, 2, 45))
	}
	inputs := tokenBatch(5, config.Vocab, 2, 45)
	// The accuracy: the same count of tokens predicted right, plain and chunked, with every
	// third label made the plain model's prediction so that the count is not 0.
	run := func(ctx *context.Context, fn func(ctx *context.Context, tokens, labels *graph.Node) *graph.Node, labels *tensors.Tensor) []float64 {
		exec, err := context.NewExec(testkit.Embedded(), ctx, fn)
		if err != nil {
			t.Fatal(err)
		}
		defer exec.Finalize()
		out, err := exec.Exec(inputs[0], labels)
		if err != nil {
			t.Fatal(err)
		}
		return testkit.Floats(out[0])
	}
	ctx := context.New()
	predicted := run(ctx, func(ctx *context.Context, tokens, _ *graph.Node) *graph.Node {
		return graph.ArgMax(m.Logits(ctx, tokens), -1, dtypes.Int32)
	}, inputs[1])
	labels := tensors.FromShape(inputs[1].Shape())
	tensors.MutableFlatData(labels, func(flat []int32) {
		copy(flat, tensors.MustCopyFlatData[int32](inputs[1]))
		for i := 0; i < len(flat); i += 3 {
			flat[i] = int32(predicted[i])
		}
	})
	accuracy := func(ctx *context.Context, tokens, labels *graph.Node) *graph.Node {
		_, metrics := m.Loss(ctx, []*graph.Node{tokens, labels})
		return metrics[0].Sum
	}
	ctx = ctx.Reuse()
	want := run(ctx, accuracy, labels)[0]
	chunked(ctx)
	if got := run(ctx, accuracy, labels)[0]; got != want || want < 30 {
		t.Errorf("chunked loss counts %g tokens predicted right, plain %g (want at least the 30 labels set to the prediction)", got, want)
	}
}

// trainLossGPT is the GPT's train.Model loss as a lossModel (every label counts; the mask is
// not read).
type trainLossGPT struct{ models.GPT }

func (m trainLossGPT) CrossEntropy(ctx *context.Context, tokens, labels, _ *graph.Node) (sum, count *graph.Node) {
	loss, _ := m.GPT.Loss(ctx, []*graph.Node{tokens, labels})
	return loss.Sum, loss.Count
}
