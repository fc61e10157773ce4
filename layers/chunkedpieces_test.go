package layers_test

import (
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
)

// TestChunkedCrossEntropyFrozenPieces: a frozen output layer larger than DefaultClassChunk
// (20,000 classes: 2 pieces of 10,000) takes its products a piece at a time, none of them with
// the whole weight, and gives the plain float64 loss (within 1e-6) and gradient of x (1e-5
// relative L2) in float32, with a mask.
func TestChunkedCrossEntropyFrozenPieces(t *testing.T) {
	const vocab, width, tokens = 20000, 8, 14
	rng := rand.New(rand.NewPCG(3, 4))
	labels := make([]int32, tokens)
	for i := range labels {
		labels[i] = int32(rng.IntN(vocab))
	}
	labels[3] = 15000 // in the second piece
	inputs := []*tensors.Tensor{randomTensor(rng, 2, tokens/2, width), randomTensor(rng, vocab, width),
		tensors.FromFlatDataAndDimensions(labels, 2, tokens/2), randomTensor(rng, 2, tokens/2)}
	run := func(chunked bool, dtype dtypes.DType) [][]float64 {
		return testkit.Run(t, testkit.Embedded(), func(xs []*graph.Node) []*graph.Node {
			x, w := graph.ConvertDType(xs[0], dtype), graph.ConvertDType(xs[1], dtype)
			mask := graph.GreaterThan(xs[3], graph.ScalarZero(xs[3].Graph(), xs[3].DType()))
			var sum, count *graph.Node
			if chunked {
				sum, count = layers.ChunkedCrossEntropySum(x, layers.Projection{Weight: w, ClassesFirst: true, Frozen: true}, xs[2], mask, 4)
				for _, n := range x.Graph().Nodes() {
					if n.Type() == graph.NodeTypeDotGeneral && (n.Inputs()[1] == w || n.Inputs()[1].Shape().Dim(0) != vocab/2) {
						t.Errorf("a product takes %s, want a piece [%d, %d] of the weight", n.Inputs()[1].Shape(), vocab/2, width)
					}
				}
			} else {
				sum, count = mixed.SoftmaxCrossEntropySum(graph.DotGeneral(x, []int{2}, nil, w, []int{1}, nil), xs[2], mask)
			}
			return []*graph.Node{graph.ConvertDType(sum, dtypes.Float64), graph.ConvertDType(count, dtypes.Float64),
				graph.ConvertDType(graph.Gradient(sum, x)[0], dtypes.Float64)}
		}, inputs...)
	}
	want := run(false, dtypes.Float64)
	got := run(true, dtypes.Float32)
	compareLoss(t, "float32 frozen pieces vs float64 plain", got, want, 1e-6, 1e-5)
}

// frozenHead is a LoRA run's loss stand-in: hidden states x [1, tokens, width] in bfloat16, the
// chunked loss of a frozen bfloat16 head [vocab, width] in chunks of 128 tokens, and x's gradient.
func frozenHead(t *testing.T, backend backends.Backend, vocab, width, tokens, classChunk int) *analysis.Program {
	t.Helper()
	g := graph.NewGraph(backend, "frozen_head")
	x := graph.Parameter(g, "x", shapes.Make(dtypes.BFloat16, 1, tokens, width))
	w := graph.Parameter(g, "head", shapes.Make(dtypes.BFloat16, vocab, width))
	labels := graph.Parameter(g, "labels", shapes.Make(dtypes.Int32, 1, tokens))
	sum, _ := layers.ChunkedCrossEntropySum(x, layers.Projection{Weight: w, ClassesFirst: true, Frozen: true, ClassChunk: classChunk}, labels, nil, 128)
	p := analysis.NewProgram(g, sum, graph.Gradient(sum, x)[0])
	p.Loss = sum
	return p
}

// TestFrozenHeadPiecesMemory: on the embedded backend a frozen head's products copy a piece of it
// at a time (the piece's slice and its blocked copy) instead of the whole head for every chunk:
// the step's estimated temporaries (what the embedded backend allocates, analysis.Analyze) fall
// by at least 40% of the head's bytes with 4 pieces, at Llama 3's proportions of 32 vocabulary
// entries a unit of width. On XLA (when a plugin is set), whose products copy nothing, the
// compiled temporaries fall too (no chunk's [rows, vocab] logits whole: 24.4 -> 11.4 MiB).
func TestFrozenHeadPiecesMemory(t *testing.T) {
	const vocab, width, tokens = 16384, 512, 512
	head := int64(vocab * width * 2)
	peak, compiled := map[int]int64{}, map[int]int64{}
	for _, classChunk := range []int{vocab, vocab / 4} {
		p := frozenHead(t, testkit.Embedded(), vocab, width, tokens, classChunk)
		peak[classChunk] = analysis.Analyze(p).PeakTempBytes
		p.Graph.Finalize()
		t.Logf("pieces of %d classes: temporaries %.1f MiB (the head %.1f MiB)", classChunk, mib(peak[classChunk]), mib(head))
		if xla := testkit.XLA(); xla != nil {
			p := frozenHead(t, xla, vocab, width, tokens, classChunk)
			c, err := analysis.CompileProgram(p)
			p.Graph.Finalize()
			if err != nil {
				t.Fatal(err)
			}
			compiled[classChunk] = c.TemporaryBytes
			t.Logf("pieces of %d classes: XLA's temporaries %.1f MiB", classChunk, mib(c.TemporaryBytes))
		}
	}
	if saved := peak[vocab] - peak[vocab/4]; float64(saved) < 0.4*float64(head) {
		t.Errorf("4 pieces save %.1f MiB of %.1f MiB, want >= 40%% of the head's %.1f MiB", mib(saved), mib(peak[vocab]), mib(head))
	}
	if len(compiled) == 2 && compiled[vocab/4] >= compiled[vocab] {
		t.Errorf("XLA's temporaries with 4 pieces %.1f MiB, whole %.1f MiB: want fewer", mib(compiled[vocab/4]), mib(compiled[vocab]))
	}
}
