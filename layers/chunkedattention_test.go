package layers_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/remat"
)

// referenceAttention is causal attention written the plain way, in q's dtype: every head gets its
// own copy of its key/value head, the whole [seq, seq] scores are masked with the lowest finite
// value and normalized by mixed.Softmax.
func referenceAttention(q, k, v *graph.Node) *graph.Node {
	b, s, heads, d := q.Shape().Dim(0), q.Shape().Dim(1), q.Shape().Dim(2), q.Shape().Dim(3)
	kvHeads := k.Shape().Dim(2)
	repeat := func(x *graph.Node) *graph.Node { // [b, s, kvH, d] -> [b, s, heads, d], head h reads kv head h/group
		x = graph.BroadcastToDims(graph.InsertAxes(x, 3), b, s, kvHeads, heads/kvHeads, d)
		return graph.Reshape(x, b, s, heads, d)
	}
	k, v = repeat(k), repeat(v)
	scores := graph.Einsum("bqhd,bkhd->bhqk", graph.MulScalar(q, 1/math.Sqrt(float64(d))), k)
	g := q.Graph()
	causal := graph.GreaterOrEqual(graph.Iota(g, shapes.Make(dtypes.Int32, s, s), 0), graph.Iota(g, shapes.Make(dtypes.Int32, s, s), 1))
	lowest := -math.MaxFloat32
	if q.DType() == dtypes.Float64 {
		lowest = -math.MaxFloat64
	}
	scores = graph.Where(graph.BroadcastPrefix(causal, b, heads), scores, graph.Scalar(g, q.DType(), lowest))
	weights := mixed.Softmax(scores, q.DType(), -1)
	return graph.Einsum("bhqk,bkhd->bqhd", weights, v)
}

// attentionGradients returns Σ attention(q, k, v)·r and its gradients with respect to q, k and v,
// computing in dtype (inputs are float64).
func attentionGradients(attention func(q, k, v *graph.Node) *graph.Node, dtype dtypes.DType) func(xs []*graph.Node) []*graph.Node {
	return func(xs []*graph.Node) []*graph.Node {
		q, k, v := graph.ConvertDType(xs[0], dtype), graph.ConvertDType(xs[1], dtype), graph.ConvertDType(xs[2], dtype)
		out := attention(q, k, v)
		loss := graph.ReduceAllSum(graph.Mul(graph.ConvertDType(out, dtypes.Float64), xs[3]))
		grads := graph.Gradient(loss, q, k, v)
		outs := []*graph.Node{loss}
		for _, g := range grads {
			outs = append(outs, graph.ConvertDType(g, dtypes.Float64))
		}
		return outs
	}
}

type attentionCase struct {
	batch, seq, heads, kvHeads, headDim int
	queryBlock, keyBlock                int
}

// inputs returns random q, k, v and the cotangent r of the output.
func (c attentionCase) inputs(rng *rand.Rand) []*tensors.Tensor {
	return []*tensors.Tensor{
		randomTensor(rng, c.batch, c.seq, c.heads, c.headDim),
		randomTensor(rng, c.batch, c.seq, c.kvHeads, c.headDim),
		randomTensor(rng, c.batch, c.seq, c.kvHeads, c.headDim),
		randomTensor(rng, c.batch, c.seq, c.heads, c.headDim),
	}
}

func (c attentionCase) String() string {
	return fmt.Sprintf("b%d_s%d_h%d_kv%d_q%d_k%d", c.batch, c.seq, c.heads, c.kvHeads, c.queryBlock, c.keyBlock)
}

// attentionCases: the first three also run on XLA (each case compiles four programs).
var attentionCases = []attentionCase{
	{2, 13, 4, 2, 8, 4, 4},    // grouped heads, seq not a multiple of the block
	{1, 13, 2, 2, 8, 5, 3},    // key blocks smaller than query blocks (rows fully masked in a block)
	{2, 13, 4, 2, 8, 4, 1000}, // queries in blocks only
	{1, 16, 2, 2, 8, 4, 4},    // multiple of the block, no grouping
	{2, 13, 4, 1, 8, 5, 5},    // one key/value head for all
	{1, 13, 2, 2, 8, 3, 5},    // key blocks larger than query blocks
	{1, 9, 2, 1, 8, 20, 20},   // one block larger than the sequence
}

const attentionCasesOnXLA = 3

// TestChunkedAttentionMatchesPlain: the chunked attention's output (through Σ out·r) and its
// gradients of q, k and v equal plain attention's: in float64 to float64 rounding, in float32
// within 1e-6 relative (loss) and 1e-5 relative L2 (gradients) of plain float64 attention written
// in the test and of layers.PlainAttention in float32.
func TestChunkedAttentionMatchesPlain(t *testing.T) {
	for _, backend := range testkit.All() {
		for i, c := range attentionCases {
			if backend != testkit.Embedded() && i >= attentionCasesOnXLA {
				break
			}
			t.Run(backend.Name()+"/"+c.String(), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(c.seq), uint64(c.queryBlock*100+c.keyBlock)))
				inputs := c.inputs(rng)
				chunked := func(q, k, v *graph.Node) *graph.Node {
					return layers.ChunkedAttentionBlocks(q, k, v, q.DType(), c.queryBlock, c.keyBlock)
				}
				want := testkit.Run(t, backend, attentionGradients(referenceAttention, dtypes.Float64), inputs...)
				compareAttention(t, "float64 chunked vs float64 plain", testkit.Run(t, backend, attentionGradients(chunked, dtypes.Float64), inputs...), want, 1e-12, 1e-12)
				got32 := testkit.Run(t, backend, attentionGradients(chunked, dtypes.Float32), inputs...)
				compareAttention(t, "float32 chunked vs float64 plain", got32, want, 1e-6, 1e-5)
				plain := func(q, k, v *graph.Node) *graph.Node { return layers.PlainAttention(q, k, v, q.DType()) }
				plain32 := testkit.Run(t, backend, attentionGradients(plain, dtypes.Float32), inputs...)
				compareAttention(t, "float32 chunked vs float32 layers.PlainAttention", got32, plain32, 1e-6, 1e-5)
			})
		}
	}
}

func compareAttention(t *testing.T, what string, got, want [][]float64, lossTol, gradTol float64) {
	t.Helper()
	if rel := math.Abs(got[0][0]-want[0][0]) / math.Abs(want[0][0]); rel > lossTol {
		t.Errorf("%s: loss %.10g vs %.10g (relative %.2g), want <= %g", what, got[0][0], want[0][0], rel, lossTol)
	}
	for i, name := range []string{"q", "k", "v"} {
		if rel := testkit.RelL2(got[i+1], want[i+1]); rel > gradTol {
			t.Errorf("%s: gradient of %s differs by %.2g relative L2, want <= %g", what, name, rel, gradTol)
		}
	}
}

// TestChunkedAttentionBFloat16: under bfloat16 compute with a float32 softmax the chunked
// attention stays as close to float64 as plain attention does (its statistics are float32).
func TestChunkedAttentionBFloat16(t *testing.T) {
	backend := testkit.Embedded()
	c := attentionCases[0]
	rng := rand.New(rand.NewPCG(3, 4))
	inputs := c.inputs(rng)
	want := testkit.Run(t, backend, attentionGradients(referenceAttention, dtypes.Float64), inputs...)
	got := testkit.Run(t, backend, attentionGradients(func(q, k, v *graph.Node) *graph.Node {
		return layers.ChunkedAttention(q, k, v, dtypes.Float32, c.queryBlock)
	}, dtypes.BFloat16), inputs...)
	for i, name := range []string{"loss", "q", "k", "v"} {
		if rel := testkit.RelL2(got[i], want[i]); rel > 2e-2 {
			t.Errorf("bfloat16 %s differs from float64 by %.2g relative L2, want <= 2e-2", name, rel)
		}
	}
}

// TestChunkedAttentionRejectsBadInput: misuse panics with a message naming the problem.
func TestChunkedAttentionRejectsBadInput(t *testing.T) {
	backend := testkit.Embedded()
	cases := map[string]struct {
		q, kv []int
		block int
	}{
		"must divide the query heads":    {[]int{1, 8, 3, 4}, []int{1, 8, 2, 4}, 4},
		"block sizes must be at least 1": {[]int{1, 8, 2, 4}, []int{1, 8, 2, 4}, 0},
		"must share batch, sequence":     {[]int{1, 8, 2, 4}, []int{1, 7, 2, 4}, 4},
	}
	for want, c := range cases {
		t.Run(want, func(t *testing.T) {
			err := catch(func() {
				g := graph.NewGraph(backend, "bad")
				defer g.Finalize()
				q := graph.Parameter(g, "q", shapes.Make(dtypes.Float32, c.q...))
				kv := graph.Parameter(g, "kv", shapes.Make(dtypes.Float32, c.kv...))
				layers.ChunkedAttention(q, kv, kv, dtypes.Float32, c.block)
			})
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("got %v, want a panic saying %q", err, want)
			}
		})
	}
}

// catch runs fn and returns what it panicked with, as an error, or nil.
func catch(fn func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	fn()
	return nil
}

// TestChunkedAttentionUnderRemat: inside remat.Checkpoint (a rematerialized block recomputes the
// chunked forward pass and differentiates it in a nested gradient) the gradients are those of the
// chunked attention without remat, bit for bit on the embedded backend.
func TestChunkedAttentionUnderRemat(t *testing.T) {
	c := attentionCases[0]
	rng := rand.New(rand.NewPCG(5, 6))
	inputs := c.inputs(rng)
	chunked := func(q, k, v *graph.Node) *graph.Node {
		return layers.ChunkedAttention(graph.Tanh(q), k, v, dtypes.Float32, c.queryBlock)
	}
	rematerialized := func(q, k, v *graph.Node) *graph.Node {
		return remat.Checkpoint(func(in []*graph.Node) []*graph.Node {
			return []*graph.Node{chunked(in[0], in[1], in[2])}
		}, q, k, v)[0]
	}
	backend := testkit.Embedded()
	want := testkit.Run(t, backend, attentionGradients(chunked, dtypes.Float32), inputs...)
	got := testkit.Run(t, backend, attentionGradients(rematerialized, dtypes.Float32), inputs...)
	for i, name := range []string{"loss", "q", "k", "v"} {
		if rel := testkit.RelL2(got[i], want[i]); rel != 0 {
			t.Errorf("%s under remat differs by %.2g relative L2, want 0", name, rel)
		}
	}
}
