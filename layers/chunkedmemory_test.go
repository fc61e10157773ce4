package layers_test

import (
	"fmt"
	"math"
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

// oneLayer is a one-layer language model's gradient step, the stand-in on which the memory of the
// chunked attention and loss is measured: hidden states x [1, seq, hidden] (compute dtype), query,
// key and value projections, causal attention (plain or chunked), an output projection added to
// x, and the cross-entropy (plain or chunked) of an output layer [hidden, vocab] against labels;
// the gradients of x and of every weight.
type oneLayer struct {
	hidden, heads, kvHeads, vocab int
	compute                       dtypes.DType
	attentionBlock                int // 0: plain attention
	keyBlock                      int // 0: attentionBlock
	lossChunk                     int // 0: plain loss
}

func (m oneLayer) String() string {
	attention, loss := "plain", "plain"
	if m.attentionBlock > 0 {
		attention = fmt.Sprintf("chunked%d", m.attentionBlock)
		if m.keyBlock > 0 && m.keyBlock != m.attentionBlock {
			attention += fmt.Sprintf("x%d", m.keyBlock)
		}
	}
	if m.lossChunk > 0 {
		loss = fmt.Sprintf("chunked%d", m.lossChunk)
	}
	return "attention=" + attention + "/loss=" + loss
}

// program builds the step at sequence length seq on backend.
func (m oneLayer) program(backend backends.Backend, seq int) *analysis.Program {
	g := graph.NewGraph(backend, "one_layer")
	var params []*graph.Node
	for i, s := range m.inputShapes(seq) {
		params = append(params, graph.Parameter(g, fmt.Sprintf("input_%d", i), s))
	}
	outs := m.step(params)
	p := analysis.NewProgram(g, outs...)
	p.Loss = outs[0]
	return p
}

// inputShapes are the step's inputs: x, the query, key, value and output projections, the output
// layer and the labels.
func (m oneLayer) inputShapes(seq int) []shapes.Shape {
	d := m.hidden / m.heads
	f32 := func(dims ...int) shapes.Shape { return shapes.Make(dtypes.Float32, dims...) }
	return []shapes.Shape{f32(1, seq, m.hidden), f32(m.hidden, m.heads*d), f32(m.hidden, m.kvHeads*d), f32(m.hidden, m.kvHeads*d),
		f32(m.heads*d, m.hidden), f32(m.hidden, m.vocab), shapes.Make(dtypes.Int32, 1, seq)}
}

// step returns the summed loss and the gradients of x and every weight.
func (m oneLayer) step(xs []*graph.Node) []*graph.Node {
	x, wq, wk, wv, wo, wOut, labels := xs[0], xs[1], xs[2], xs[3], xs[4], xs[5], xs[6]
	seq, d := x.Shape().Dim(1), m.hidden/m.heads
	h := graph.ConvertDType(x, m.compute)
	project := func(w *graph.Node, heads int) *graph.Node {
		return graph.Reshape(graph.Einsum("bsh,hk->bsk", h, graph.ConvertDType(w, m.compute)), 1, seq, heads, d)
	}
	q, k, v := project(wq, m.heads), project(wk, m.kvHeads), project(wv, m.kvHeads)
	var a *graph.Node
	if m.attentionBlock > 0 {
		keyBlock := m.keyBlock
		if keyBlock == 0 {
			keyBlock = m.attentionBlock
		}
		a = layers.ChunkedAttentionBlocks(q, k, v, dtypes.Float32, m.attentionBlock, keyBlock)
	} else {
		a = layers.PlainAttention(q, k, v, dtypes.Float32)
	}
	h = graph.Add(h, graph.Einsum("bsk,kh->bsh", graph.Reshape(a, 1, seq, m.heads*d), graph.ConvertDType(wo, m.compute)))
	var sum *graph.Node
	if m.lossChunk > 0 {
		sum, _ = layers.ChunkedCrossEntropySum(h, layers.Projection{Weight: wOut}, labels, nil, m.lossChunk)
	} else {
		sum, _ = mixed.SoftmaxCrossEntropySum(graph.Einsum("bsh,hv->bsv", h, graph.ConvertDType(wOut, m.compute)), labels, nil)
	}
	return append([]*graph.Node{sum}, graph.Gradient(sum, x, wq, wk, wv, wo, wOut)...)
}

// stepInputs returns random inputs for the step at sequence length seq (weights of standard
// deviation 1/sqrt(fan-in)).
func stepInputs(seq int, m oneLayer) []any {
	rng := rand.New(rand.NewPCG(1, uint64(seq)))
	var inputs []any
	for i, s := range m.inputShapes(seq) {
		if s.DType == dtypes.Int32 {
			labels := make([]int32, s.Size())
			for j := range labels {
				labels[j] = int32(rng.IntN(m.vocab))
			}
			inputs = append(inputs, tensors.FromFlatDataAndDimensions(labels, s.Dimensions...))
			continue
		}
		values := make([]float32, s.Size())
		std := 1.0
		if i > 0 {
			std = 1 / math.Sqrt(float64(s.Dim(0)))
		}
		for j := range values {
			values[j] = float32(rng.NormFloat64() * std)
		}
		inputs = append(inputs, tensors.FromFlatDataAndDimensions(values, s.Dimensions...))
	}
	return inputs
}

// temporaries returns onegpu's estimate of the step's peak bytes above its inputs (analysis.Analyze)
// and, when compile is set, XLA's temporary bytes for the compiled step.
func (m oneLayer) temporaries(t testing.TB, backend backends.Backend, seq int, compile bool) (estimate, xla int64) {
	t.Helper()
	p := m.program(backend, seq)
	defer p.Graph.Finalize()
	estimate = analysis.Analyze(p).PeakTempBytes
	if compile {
		c, err := analysis.CompileProgram(p)
		if err != nil {
			t.Fatal(err)
		}
		xla = c.TemporaryBytes
	}
	return estimate, xla
}

// memoryStandIn is small enough to compile in seconds, with the attention's scores the largest
// plain temporaries (4 heads x seq² float32: 64 MiB at seq 2048).
var memoryStandIn = oneLayer{hidden: 64, heads: 4, kvHeads: 2, vocab: 2048, compute: dtypes.Float32}

// TestChunkedMemoryLinearInSequence: with chunked attention and loss the step's temporaries grow
// at most 2.2x per doubling of the sequence (onegpu's estimate, and XLA's compiled statistics
// when a plugin is set, which also stay within 1.5x of the estimate: XLA keeps the blocks'
// order), where plain attention's grow about 4x.
func TestChunkedMemoryLinearInSequence(t *testing.T) {
	seqs := []int{512, 1024, 2048}
	chunked, plain := memoryStandIn, memoryStandIn
	chunked.attentionBlock, chunked.lossChunk = 256, 256 // 36 block pairs at seq 2048
	xla := testkit.XLA()
	for _, m := range []oneLayer{plain, chunked} {
		var estimates, compiled []int64
		for _, seq := range seqs {
			backend := testkit.Embedded()
			if xla != nil && m.attentionBlock > 0 {
				backend = xla
			}
			e, c := m.temporaries(t, backend, seq, backend == xla)
			estimates, compiled = append(estimates, e), append(compiled, c)
			t.Logf("%s seq %d: estimate %.1f MiB, XLA %.1f MiB", m, seq, mib(e), mib(c))
		}
		for i := 1; i < len(seqs); i++ {
			growth := float64(estimates[i]) / float64(estimates[i-1])
			switch {
			case m.attentionBlock > 0 && growth > 2.2:
				t.Errorf("%s: estimated temporaries grow %.2fx from seq %d to %d, want <= 2.2x", m, growth, seqs[i-1], seqs[i])
			case m.attentionBlock == 0 && i == len(seqs)-1 && growth < 3:
				t.Errorf("%s: estimated temporaries grow %.2fx from seq %d to %d, want >= 3x (quadratic scores)", m, growth, seqs[i-1], seqs[i])
			}
			if compiled[i] == 0 {
				continue
			}
			if growth := float64(compiled[i]) / float64(compiled[i-1]); growth > 2.2 {
				t.Errorf("%s: XLA's temporaries grow %.2fx from seq %d to %d, want <= 2.2x", m, growth, seqs[i-1], seqs[i])
			}
		}
		for i, c := range compiled {
			if c > 0 && float64(c) > 1.5*float64(estimates[i]) {
				t.Errorf("%s seq %d: XLA's temporaries %.1f MiB exceed 1.5x onegpu's estimate %.1f MiB: XLA does not run the blocks in order",
					m, seqs[i], mib(c), mib(estimates[i]))
			}
		}
	}
}

func mib(bytes int64) float64 { return float64(bytes) / (1 << 20) }
