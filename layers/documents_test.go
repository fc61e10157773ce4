package layers_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
)

// packedRows are two sequences of 13 positions holding documents end to end, then padding
// (segment 0): as data.Packed lays them out.
var packedRows = [][]int32{
	{1, 1, 1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 0},
	{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2},
}

// spans returns the [start, end) of each segment of a row, in order.
func segmentSpans(row []int32) [][2]int {
	var out [][2]int
	for i := range row {
		if i == 0 || row[i] != row[i-1] {
			out = append(out, [2]int{i, i})
		}
		out[len(out)-1][1] = i + 1
	}
	return out
}

// separately computes attention of each document (and of the padding) on its own, with the
// plain causal reference, and puts the results back in place: what packed attention must equal.
func separately(q, k, v *graph.Node) *graph.Node {
	var rows []*graph.Node
	for b, row := range packedRows {
		var parts []*graph.Node
		for _, s := range segmentSpans(row) {
			slice := func(x *graph.Node) *graph.Node {
				return graph.Slice(x, graph.AxisRange(b, b+1), graph.AxisRange(s[0], s[1]))
			}
			parts = append(parts, referenceAttention(slice(q), slice(k), slice(v)))
		}
		rows = append(rows, graph.Concatenate(parts, 1))
	}
	return graph.Concatenate(rows, 0)
}

// TestAttentionKeepsDocumentsApart: attention of packed documents (plain, and chunked with blocks
// that cross document boundaries, smaller or larger than the documents) equals each document's
// attention computed on its own, output and gradients of q, k and v: in float64 to its rounding,
// in float32 within 1e-6 (loss) and 1e-5 relative L2 (gradients).
func TestAttentionKeepsDocumentsApart(t *testing.T) {
	const batch, seq, heads, kvHeads, headDim = 2, 13, 4, 2, 8
	newInputs := func() []*tensors.Tensor { // a tensor serves one backend
		return attentionCase{batch, seq, heads, kvHeads, headDim, 0, 0}.inputs(rand.New(rand.NewPCG(21, 22)))
	}
	inputs := newInputs()
	segments := func(g *graph.Graph) *graph.Node { return graph.Const(g, packedRows) }
	cores := map[string]func(q, k, v *graph.Node) *graph.Node{
		"plain": func(q, k, v *graph.Node) *graph.Node {
			return layers.PlainAttentionSegments(q, k, v, q.DType(), segments(q.Graph()))
		},
	}
	for _, blocks := range [][2]int{{4, 4}, {3, 5}, {2, 1000}, {20, 20}} {
		cores[fmt.Sprintf("chunked %dx%d", blocks[0], blocks[1])] = func(q, k, v *graph.Node) *graph.Node {
			return layers.ChunkedAttentionSegments(q, k, v, q.DType(), blocks[0], blocks[1], segments(q.Graph()))
		}
	}
	backend := testkit.Embedded()
	want := testkit.Run(t, backend, attentionGradients(separately, dtypes.Float64), inputs...)
	for name, core := range cores {
		t.Run(name, func(t *testing.T) {
			compareAttention(t, "float64", testkit.Run(t, backend, attentionGradients(core, dtypes.Float64), inputs...), want, 1e-12, 1e-12)
			compareAttention(t, "float32", testkit.Run(t, backend, attentionGradients(core, dtypes.Float32), inputs...), want, 1e-6, 1e-5)
		})
	}
	// The same through the context's choice (Attention.SegmentCore), on XLA too.
	for _, b := range testkit.All() {
		for _, a := range []layers.Attention{{}, {Chunked: true, Block: 4}} {
			t.Run(b.Name()+"/SegmentCore "+a.String(), func(t *testing.T) {
				core := func(q, k, v *graph.Node) *graph.Node { return a.SegmentCore(segments(q.Graph()))(q, k, v, q.DType()) }
				compareAttention(t, "float32", testkit.Run(t, b, attentionGradients(core, dtypes.Float32), newInputs()...), want, 1e-6, 1e-5)
			})
		}
	}
}

// TestRotaryAtDocumentPositions: rotating packed queries at their positions within their
// documents gives, bit for bit, each document rotated on its own from position 0.
func TestRotaryAtDocumentPositions(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	x := randomTensor(rng, 2, 13, 2, 16)
	positions := make([][]int32, len(packedRows))
	for b, row := range packedRows {
		for _, s := range segmentSpans(row) {
			for i := range s[1] - s[0] {
				positions[b] = append(positions[b], int32(i))
			}
		}
	}
	for _, dtype := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
		out := testkit.Run(t, testkit.Embedded(), func(xs []*graph.Node) []*graph.Node {
			x := graph.ConvertDType(xs[0], dtype)
			packed := llama3Rotary.ApplyAt(x, graph.Const(x.Graph(), positions))
			var rows []*graph.Node
			for b, row := range packedRows {
				var parts []*graph.Node
				for _, s := range segmentSpans(row) {
					parts = append(parts, llama3Rotary.Apply(graph.Slice(x, graph.AxisRange(b, b+1), graph.AxisRange(s[0], s[1]))))
				}
				rows = append(rows, graph.Concatenate(parts, 1))
			}
			return []*graph.Node{graph.ConvertDType(packed, dtypes.Float64), graph.ConvertDType(graph.Concatenate(rows, 0), dtypes.Float64)}
		}, x)
		for i := range out[0] {
			if out[0][i] != out[1][i] {
				t.Fatalf("%s: value %d rotated at its document's position is %g, on its own %g", dtype, i, out[0][i], out[1][i])
			}
		}
	}
}
