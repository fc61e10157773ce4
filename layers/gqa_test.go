package layers_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/plainllama"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
)

// TestPlainAttentionMatchesFloat64: the attention core equals plain causal attention with keys and
// values repeated per query head (Hugging Face's repeat_kv), for multi-head, grouped and
// multi-query heads, and its gradients for q, k and v follow.
func TestPlainAttentionMatchesFloat64(t *testing.T) {
	const batch, seq, heads, headDim = 2, 9, 4, 8
	for _, kvHeads := range []int{4, 2, 1} {
		rng := rand.New(rand.NewPCG(6, uint64(kvHeads)))
		check := testkit.PlainCheck{
			Inputs: []testkit.Input{
				testkit.NormalInput(rng, batch, seq, heads, headDim),
				testkit.NormalInput(rng, batch, seq, kvHeads, headDim),
				testkit.NormalInput(rng, batch, seq, kvHeads, headDim),
			},
			Build: func(_ *context.Context, compute dtypes.DType, in []*graph.Node) *graph.Node {
				q, k, v := graph.ConvertDType(in[0], compute), graph.ConvertDType(in[1], compute), graph.ConvertDType(in[2], compute)
				return layers.PlainAttention(q, k, v, compute)
			},
			Plain: func(_ map[string][]float64, in [][]float64) []float64 {
				return plainllama.Attention(in[0], in[1], in[2], batch, seq, heads, kvHeads, headDim)
			},
		}
		for _, backend := range testkit.All() {
			t.Run(fmt.Sprintf("kv heads %d/%s", kvHeads, backend.Name()), func(t *testing.T) { check.Run(t, backend) })
		}
	}
}

// TestGroupedQueryAttentionMatchesFloat64: the whole attention layer (projections [out, in], rotary
// embeddings with Llama 3's scaling, 4 query heads on 2 key/value heads, output projection) equals
// Hugging Face's LlamaAttention written plainly in float64, and so do its gradients.
func TestGroupedQueryAttentionMatchesFloat64(t *testing.T) {
	const batch, seq, hidden = 2, 10, 24
	config := plainllama.Config{Hidden: hidden, Heads: 4, KVHeads: 2, HeadDim: 8, Theta: 10000,
		Scaling: &plainllama.Scaling{Factor: 4, Low: 1, High: 4, Original: 64}}
	rng := rand.New(rand.NewPCG(7, 8))
	check := testkit.PlainCheck{
		Inputs:  []testkit.Input{testkit.NormalInput(rng, batch, seq, hidden)},
		Perturb: 0.2,
		Build: func(ctx *context.Context, compute dtypes.DType, in []*graph.Node) *graph.Node {
			mixed.SetPolicy(ctx, float64Params(compute))
			return layers.GroupedQueryAttention(ctx.In("self_attn"), in[0], layers.GroupedQuery{
				Heads: 4, KVHeads: 2, HeadDim: 8, Rotary: llama3Rotary, SoftmaxDType: compute}, layers.Documents{})
		},
		Plain: func(p map[string][]float64, in [][]float64) []float64 {
			w := func(name string) []float64 { return p["/self_attn/"+name+"/weight"] }
			return plainllama.SelfAttention(config, in[0], w("q_proj"), w("k_proj"), w("v_proj"), w("o_proj"), batch, seq)
		},
	}
	for _, backend := range testkit.All() {
		t.Run(backend.Name(), func(t *testing.T) { check.Run(t, backend) })
	}
}

// TestGroupedQueryAttentionBiasesMatchFloat64: with QKVBias the q, k and v projections add biases
// before the rotation (Hugging Face's Qwen2Attention) and o_proj has none: the layer equals the
// plain float64 one, and so do its gradients, the biases' included.
func TestGroupedQueryAttentionBiasesMatchFloat64(t *testing.T) {
	const batch, seq, hidden = 2, 7, 16
	config := plainllama.Config{Hidden: hidden, Heads: 4, KVHeads: 2, HeadDim: 8, Theta: 1e6}
	rng := rand.New(rand.NewPCG(7, 9))
	var names []string
	check := testkit.PlainCheck{
		Inputs:  []testkit.Input{testkit.NormalInput(rng, batch, seq, hidden)},
		Perturb: 0.2, // the biases start at zero
		Build: func(ctx *context.Context, compute dtypes.DType, in []*graph.Node) *graph.Node {
			mixed.SetPolicy(ctx, float64Params(compute))
			out := layers.GroupedQueryAttention(ctx.In("self_attn"), in[0], layers.GroupedQuery{
				Heads: 4, KVHeads: 2, HeadDim: 8, Rotary: layers.Rotary{Theta: 1e6}, SoftmaxDType: compute, QKVBias: true}, layers.Documents{})
			names = names[:0]
			ctx.EnumerateVariables(func(v *context.Variable) {
				if strings.HasPrefix(v.ScopeAndName(), "/self_attn/") {
					names = append(names, v.ScopeAndName())
				}
			})
			return out
		},
		Plain: func(p map[string][]float64, in [][]float64) []float64 {
			w := func(name, kind string) []float64 { return p["/self_attn/"+name+"/"+kind] }
			return plainllama.BiasedSelfAttention(config, in[0], w("q_proj", "weight"), w("k_proj", "weight"), w("v_proj", "weight"), w("o_proj", "weight"),
				w("q_proj", "bias"), w("k_proj", "bias"), w("v_proj", "bias"), batch, seq)
		},
	}
	for _, backend := range testkit.All() {
		t.Run(backend.Name(), func(t *testing.T) { check.Run(t, backend) })
	}
	slices.Sort(names)
	want := []string{"/self_attn/k_proj/bias", "/self_attn/k_proj/weight", "/self_attn/o_proj/weight", "/self_attn/q_proj/bias",
		"/self_attn/q_proj/weight", "/self_attn/v_proj/bias", "/self_attn/v_proj/weight"}
	if !slices.Equal(names, want) {
		t.Errorf("variables %v, want %v (biases on q, k, v only)", names, want)
	}
}

// TestGroupedKeysAreNeverCopied: in the program of the attention core's forward and backward pass
// with 8 query heads on one key/value head, no value computed from the keys alone (or the values
// alone) is larger than the keys: keys and values are never repeated per query head, neither in
// the forward pass, nor in what the backward pass keeps, nor in the gradients. The same check finds
// the copies of an attention that repeats them (Hugging Face's repeat_kv).
func TestGroupedKeysAreNeverCopied(t *testing.T) {
	repeatKV := func(q, k, v *graph.Node, softmaxDType dtypes.DType) *graph.Node {
		group := q.Shape().Dim(2) / k.Shape().Dim(2)
		repeat := func(x *graph.Node) *graph.Node {
			d := x.Shape().Dimensions
			return graph.Reshape(graph.BroadcastToDims(graph.InsertAxes(x, 3), d[0], d[1], d[2], group, d[3]), d[0], d[1], d[2]*group, d[3])
		}
		return layers.PlainAttention(q, repeat(k), repeat(v), softmaxDType)
	}
	for _, compute := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
		if copies := keyCopies(t, layers.PlainAttention, compute); len(copies) > 0 {
			t.Errorf("%s: nodes computed from the keys or the values alone hold more values than they do: %v", compute, copies)
		}
		if copies := keyCopies(t, repeatKV, compute); len(copies) == 0 {
			t.Errorf("%s: the check finds no copy in an attention that repeats keys and values per query head", compute)
		}
	}
}

// keyCopies returns the nodes of attention's forward and backward program (8 query heads, 1
// key/value head) that are computed from the keys alone or the values alone and hold more values
// than they do.
func keyCopies(t *testing.T, attention func(q, k, v *graph.Node, softmaxDType dtypes.DType) *graph.Node, compute dtypes.DType) []string {
	const batch, seq, heads, kvHeads, headDim = 2, 16, 8, 1, 8
	qShape := shapes.Make(compute, batch, seq, heads, headDim)
	kvShape := shapes.Make(compute, batch, seq, kvHeads, headDim)
	var k, v *graph.Node
	p, err := analysis.ContextProgram(testkit.Embedded(), context.New(), "attention", []shapes.Shape{qShape, kvShape, kvShape},
		func(_ *context.Context, in []*graph.Node) []*graph.Node {
			k, v = in[1], in[2]
			out := attention(in[0], k, v, dtypes.Float32)
			// Weighted by q, so that the cotangents depend on q too (a constant cotangent would make
			// the gradient of the weights, v·cotangent, a value of v alone).
			loss := mixed.Sum(graph.Mul(out, in[0]), dtypes.Float32)
			return append([]*graph.Node{loss}, graph.Gradient(loss, in...)...)
		})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Graph.Finalize()
	var copies []string
	sources := map[graph.NodeId]map[graph.NodeId]bool{} // the inputs each node is computed from
	for _, n := range p.Graph.Nodes() {
		from := map[graph.NodeId]bool{}
		if n.Type() == graph.NodeTypeParameter {
			from[n.Id()] = true
		}
		for _, in := range n.Inputs() {
			for id := range sources[in.Id()] {
				from[id] = true
			}
		}
		sources[n.Id()] = from
		onlyFrom := func(x *graph.Node) bool { return len(from) == 1 && from[x.Id()] }
		if (onlyFrom(k) || onlyFrom(v)) && n.Shape().Size() > kvShape.Size() {
			copies = append(copies, fmt.Sprintf("%s %s", n.Type(), n.Shape()))
		}
	}
	return copies
}
