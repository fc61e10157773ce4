package layers_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/plainllama"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/quant"
)

func TestParseLoRA(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want layers.LoRA
	}{
		{"rank=16,alpha=32,targets=q,k,v,o,gate,up,down,dropout=0.05,rslora", layers.LoRA{Rank: 16, Alpha: 32,
			Targets: []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}, Dropout: 0.05, RSLoRA: true}},
		{"rank=8", layers.LoRA{Rank: 8, Alpha: 8, Targets: []string{"q_proj", "v_proj"}}},
		{"rslora,r=4,targets=q_proj,my_proj,alpha=1", layers.LoRA{Rank: 4, Alpha: 1, Targets: []string{"q_proj", "my_proj"}, RSLoRA: true}},
	} {
		got, err := layers.ParseLoRA(tc.in)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) || got.RSLoRA != tc.want.RSLoRA || !slices.Equal(got.Targets, tc.want.Targets) {
			t.Errorf("ParseLoRA(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		back, err := layers.ParseLoRA(got.String())
		if err != nil || back.String() != got.String() {
			t.Errorf("%q: its text form %q reads back as %+v, %v", tc.in, got.String(), back, err)
		}
	}
	for in, want := range map[string]string{
		"alpha=4":                 "has no rank",
		"rank=-2":                 "LoRA.Rank -2 must be positive",
		"rank=4,alpha=0x":         `alpha="0x" is not a number`,
		"rank=4,dropout=1":        "LoRA.Dropout 1 must be in [0, 1)",
		"rank=4,bias=none":        `unknown key "bias"`,
		"rank=4,q":                `"q" is not key=value`,
		"rank=4,targets=q,q_proj": "once",
	} {
		if _, err := layers.ParseLoRA(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseLoRA(%q): error %v, want one saying %q", in, err, want)
		}
	}
	l := layers.LoRA{Rank: 16, Alpha: 32}
	if l.Scaling() != 2 || (layers.LoRA{Rank: 16, Alpha: 32, RSLoRA: true}).Scaling() != 8 {
		t.Errorf("scaling %g, rsLoRA %g; want 2 and 8", l.Scaling(), layers.LoRA{Rank: 16, Alpha: 32, RSLoRA: true}.Scaling())
	}
	if err := l.CheckProjection("k_proj", 64, 8); err == nil || !strings.Contains(err.Error(), "larger than k_proj's matrix [8, 64]") {
		t.Errorf("rank 16 on [8, 64]: %v", err)
	}
}

// loraRun is a projection q_proj [features, in] of x under lora, with loss Σ y·w: its output,
// and gradients with respect to x and every trainable variable (after layers.FreezeBase).
type loraRun struct {
	out   []float64
	grads map[string][]float64
}

func runLoRA(t *testing.T, backend backends.Backend, ctx *context.Context, policy mixed.Policy, lora layers.LoRA, x *tensors.Tensor, features int) loraRun {
	t.Helper()
	var names []string
	exec, err := context.NewExec(backend, ctx, func(ctx *context.Context, x *graph.Node) []*graph.Node {
		mixed.SetPolicy(ctx, policy)
		layers.SetLoRA(ctx, lora)
		y := graph.ConvertDType(layers.Linear{}.Apply(ctx.In("q_proj"), x, features), dtypes.Float64)
		w := graph.Const(x.Graph(), tensors.FromFlatDataAndDimensions(testkit.Weights(y.Shape().Size()), y.Shape().Dimensions...))
		loss := graph.ReduceAllSum(graph.Mul(y, w))
		if lora.Active() {
			layers.FreezeBase(ctx)
		}
		names = []string{"x"}
		wrt := []*graph.Node{x}
		for v := range ctx.IterVariables() {
			if v.Trainable {
				names, wrt = append(names, v.ScopeAndName()), append(wrt, v.ValueGraph(x.Graph()))
			}
		}
		return append([]*graph.Node{graph.Reshape(y, y.Shape().Size())}, graph.Gradient(loss, wrt...)...)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	outs := testkit.Call(t, exec, x)
	r := loraRun{out: testkit.Floats(outs[0]), grads: map[string][]float64{}}
	for i, name := range names {
		r.grads[name] = testkit.Floats(outs[i+1])
	}
	return r
}

// transpose returns a [n, m] (row-major) transposed.
func transpose(a []float64, n, m int) []float64 {
	out := make([]float64, n*m)
	for i := range n {
		for j := range m {
			out[j*n+i] = a[i*m+j]
		}
	}
	return out
}

// TestLoRAMatchesFloat64: a targeted projection computes x·Wᵀ + s·(x·Aᵀ)·Bᵀ and its gradients
// (x, A, B; none for the frozen W) as the plain float64 formulas do, with a float weight and with
// an NF4 one (W its dequantized values); at initialization B is zero and A within PEFT's bounds.
func TestLoRAMatchesFloat64(t *testing.T) {
	const rows, in, features, rank = 6, 64, 24, 4
	rng := rand.New(rand.NewPCG(36, 1))
	xs := testkit.NormalInput(rng, rows, in).Floats
	policy := mixed.Policy{Param: dtypes.Float64, Compute: dtypes.Float64, Output: dtypes.Float64}
	for _, quantize := range []quant.Config{{}, quant.QLoRA()} {
		lora := layers.LoRA{Rank: rank, Alpha: 12, Targets: []string{"q_proj"}, Quantize: quantize}
		for _, backend := range testkit.All() {
			name := fmt.Sprintf("%s, quantized %q", backend.Name(), quantize.Format)
			x := tensors.FromFlatDataAndDimensions(xs, rows, in) // a tensor serves one backend
			ctx := context.New()
			runLoRA(t, backend, ctx, policy, layers.LoRA{}, x, features) // the base: a float weight
			if n, err := layers.QuantizeWeights(ctx, lora); err != nil || n != int(map[bool]int{true: 1}[quantize.Format != ""]) {
				t.Fatalf("%s: QuantizeWeights: %d, %v", name, n, err)
			}
			ctx = ctx.Reuse().Checked(false)
			first := runLoRA(t, backend, ctx, policy, lora, x, features)
			a := testkit.Floats(ctx.GetVariableByScopeAndName("/q_proj/lora_A", "weight").MustValue())
			b := ctx.GetVariableByScopeAndName("/q_proj/lora_B", "weight")
			bound := 1 / math.Sqrt(in)
			if slices.ContainsFunc(a, func(v float64) bool { return math.Abs(v) > bound }) || slices.Max(a) < bound/2 {
				t.Errorf("%s: A is not uniform in ±%g: max %g", name, bound, slices.Max(a))
			}
			if slices.ContainsFunc(testkit.Floats(b.MustValue()), func(v float64) bool { return v != 0 }) {
				t.Errorf("%s: B does not start at zero", name)
			}
			if len(first.grads) != 3 {
				t.Fatalf("%s: gradients for %v, want x, A and B only", name, first.grads)
			}
			bValues := testkit.NormalInput(rng, features, rank).Floats
			if err := b.SetValue(tensors.FromFlatDataAndDimensions(bValues, features, rank)); err != nil {
				t.Fatal(err)
			}
			got := runLoRA(t, backend, ctx, policy, lora, x, features)

			var w []float64
			if quantize.Format == "" {
				w = testkit.Floats(ctx.GetVariableByScopeAndName("/q_proj", "weight").MustValue())
			} else {
				w = dequantizedWeight(t, ctx, quantize, features, in)
			}
			s := lora.Scaling()
			xa := plainllama.Linear(xs, a, in, rank)
			want := plainllama.Linear(xs, w, in, features)
			delta := plainllama.Linear(xa, bValues, rank, features)
			for i := range want {
				want[i] += s * delta[i]
			}
			dy := testkit.Weights(rows * features)
			dyB := plainllama.Linear(dy, transpose(bValues, features, rank), features, rank)
			dx := plainllama.Linear(dy, transpose(w, features, in), features, in)
			dxA := plainllama.Linear(dyB, transpose(a, rank, in), rank, in)
			for i := range dx {
				dx[i] += s * dxA[i]
			}
			dA := plainllama.Linear(transpose(dyB, rows, rank), transpose(xs, rows, in), rows, in)
			dB := plainllama.Linear(transpose(dy, rows, features), transpose(xa, rows, rank), rows, rank)
			for i := range dA {
				dA[i] *= s
			}
			for i := range dB {
				dB[i] *= s
			}
			for what, pair := range map[string][2][]float64{"output": {got.out, want}, "dx": {got.grads["x"], dx},
				"dA": {got.grads["/q_proj/lora_A/weight"], dA}, "dB": {got.grads["/q_proj/lora_B/weight"], dB}} {
				if err := testkit.RelL2(pair[0], pair[1]); !(err < 1e-12) {
					t.Errorf("%s: %s differs from the plain float64 formula by %.3g (relative L2)", name, what, err)
				}
			}
		}
	}
}

// dequantizedWeight returns the float64 values of q_proj's quantized weight in ctx, dequantized
// on the host.
func dequantizedWeight(t *testing.T, ctx *context.Context, c quant.Config, features, in int) []float64 {
	t.Helper()
	l, err := quant.NewLayout(c, features, in)
	if err != nil {
		t.Fatal(err)
	}
	q := &quant.Tensor{Layout: l}
	get := func(name string) *tensors.Tensor {
		return ctx.GetVariableByScopeAndName("/q_proj/"+layers.QuantizedScope, name).MustValue()
	}
	q.Codes = tensors.MustCopyFlatData[uint8](get(quant.CodesName))
	q.ScaleCodes = tensors.MustCopyFlatData[uint8](get(quant.ScaleCodesName))
	q.ScaleScales = tensors.MustCopyFlatData[float32](get(quant.ScaleScalesName))
	q.ScaleOffset = tensors.MustCopyFlatData[float32](get(quant.ScaleOffsetName))[0]
	out := make([]float64, features*in)
	for i, v := range q.Dequantize() {
		out[i] = float64(v)
	}
	if ctx.GetVariableByScopeAndName("/q_proj", "weight") != nil {
		t.Fatalf("the float weight was kept after quantizing")
	}
	return out
}

// TestLoRAStartsAtTheBase: with B at zero, a model's output under LoRA (every projection of a
// SwiGLU MLP targeted) equals the base model's bit for bit, in float32 and with bfloat16 compute,
// on every backend.
func TestLoRAStartsAtTheBase(t *testing.T) {
	const width, intermediate = 32, 48
	xs := testkit.NormalInput(rand.New(rand.NewPCG(2, 36)), 2, 5, width).Floats
	lora := layers.LoRA{Rank: 8, Alpha: 16, Targets: []string{"gate_proj", "up_proj", "down_proj"}, Dropout: 0.1}
	for _, policy := range []mixed.Policy{mixed.Float32, {Param: dtypes.Float32, Compute: dtypes.BFloat16, Output: dtypes.Float32}} {
		for _, backend := range testkit.All() {
			if policy == mixed.Float32 && backend != testkit.Embedded() {
				continue // XLA compiles in seconds: bfloat16 is the case where it could differ
			}
			ctx := context.New()
			var outs [2][]float64
			for i, l := range []layers.LoRA{{}, lora} {
				exec, err := context.NewExec(backend, ctx, func(ctx *context.Context, x *graph.Node) *graph.Node {
					mixed.SetPolicy(ctx, policy)
					layers.SetLoRA(ctx, l)
					ctx.SetTraining(x.Graph(), true) // dropout on: it applies to the adapters' input only
					return graph.ConvertDType(layers.SwiGLU(ctx.In("mlp"), graph.ConvertDType(x, policy.Compute), intermediate), dtypes.Float64)
				})
				if err != nil {
					t.Fatal(err)
				}
				outs[i] = testkit.Floats(testkit.Call(t, exec, tensors.FromFlatDataAndDimensions(xs, 2, 5, width))[0])
				exec.Finalize()
				ctx = ctx.Reuse().Checked(false)
			}
			if !slices.Equal(outs[0], outs[1]) {
				t.Errorf("%s, %s: the adapted model's output differs from the base's (relative L2 %.3g)", backend.Name(), policy, testkit.RelL2(outs[1], outs[0]))
			}
		}
	}
}

// TestFrozenProductKeepsNoWeight: the backward pass of a stack of quantized projections rebuilds
// each dequantized weight instead of keeping the forward pass's: the step's peak (the embedded
// backend's liveness simulation, XLA's temporaries) holds about one dequantized weight at a time, where plain
// autodiff of the same products keeps all of them from the forward pass to the backward one.
func TestFrozenProductKeepsNoWeight(t *testing.T) {
	const layersN, width, batch = 8, 256, 4
	weightBytes := int64(width * width * 4)
	lora := layers.LoRA{Rank: 2, Targets: []string{"proj"}, Quantize: quant.QLoRA()}
	peak := func(backend backends.Backend, plain bool) int64 {
		ctx := context.New()
		p, err := analysis.ContextProgram(backend, ctx, testkit.CensusPrefix+"frozen", []shapes.Shape{shapes.Make(dtypes.Float32, batch, width)}, func(ctx *context.Context, in []*graph.Node) []*graph.Node {
			layers.SetLoRA(ctx, lora)
			x := in[0]
			h := x
			for i := range layersN {
				scope := ctx.In(fmt.Sprintf("l%d", i)).In("proj")
				if plain { // the same dequantization, differentiated as is
					l, _ := quant.NewLayout(lora.Quantize, width, width)
					var parts []*graph.Node
					for _, part := range l.Parts() {
						parts = append(parts, scope.In(layers.QuantizedScope).VariableWithShape(part.Name, part.Shape).SetTrainable(false).ValueGraph(x.Graph()))
					}
					h = graph.Tanh(layers.LinearWith(scope, h, quant.NewNodes(l, parts...).Dequantize(dtypes.Float32)))
				} else {
					h = graph.Tanh(layers.Linear{}.Apply(scope, h, width))
				}
			}
			layers.FreezeBase(ctx)
			return []*graph.Node{graph.Gradient(graph.ReduceAllSum(h), x)[0]}
		})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Graph.Finalize()
		if backend == testkit.Embedded() {
			return analysis.Analyze(p).PeakTempBytes
		}
		m, err := analysis.CompileProgram(p)
		if err != nil {
			t.Fatal(err)
		}
		return m.TemporaryBytes
	}
	for _, backend := range testkit.All() {
		ours, plain := peak(backend, false), peak(backend, true)
		t.Logf("%s: %d projections [%d, %d] in NF4, gradient of the input: peak allocations %.2f MiB, plain autodiff %.2f MiB (a dequantized weight: %.2f MiB)",
			backend.Name(), layersN, width, width, float64(ours)/(1<<20), float64(plain)/(1<<20), float64(weightBytes)/(1<<20))
		if ours > 3*weightBytes || plain < layersN*weightBytes {
			t.Errorf("%s: peak %d bytes, plain %d: want at most 3 dequantized weights (%d) against at least %d", backend.Name(), ours, plain, 3*weightBytes, layersN*weightBytes)
		}
	}
}

// TestMergeAdapters: a projection's output with its adapters equals, within float32 rounding,
// the output of the plain projection after MergeAdapters folded them into its weight (a float
// weight, and an NF4 one, dequantized first); the adapters and codes are gone.
func TestMergeAdapters(t *testing.T) {
	const rows, in, features = 5, 64, 24
	xs := testkit.NormalInput(rand.New(rand.NewPCG(9, 36)), rows, in).Floats
	policy := mixed.Float32
	for _, quantize := range []quant.Config{{}, quant.QLoRA()} {
		lora := layers.LoRA{Rank: 4, Alpha: 12, Targets: []string{"q_proj"}, Quantize: quantize}
		backend := testkit.Embedded()
		x := func() *tensors.Tensor { return tensors.FromFlatDataAndDimensions(xs, rows, in) }
		ctx := context.New()
		runLoRA(t, backend, ctx, policy, layers.LoRA{}, x(), features)
		if _, err := layers.QuantizeWeights(ctx, lora); err != nil {
			t.Fatal(err)
		}
		ctx = ctx.Reuse().Checked(false)
		runLoRA(t, backend, ctx, policy, lora, x(), features)
		b := ctx.GetVariableByScopeAndName("/q_proj/lora_B", "weight")
		bValues := make([]float32, features*4)
		for i := range bValues {
			bValues[i] = float32(i%7-3) / 10
		}
		if err := b.SetValue(tensors.FromFlatDataAndDimensions(bValues, features, 4)); err != nil {
			t.Fatal(err)
		}
		adapted := runLoRA(t, backend, ctx, policy, lora, x(), features).out
		n, err := layers.MergeAdapters(ctx, lora)
		if err != nil || n != 1 {
			t.Fatalf("MergeAdapters: %d, %v", n, err)
		}
		for v := range ctx.IterVariables() {
			if layers.IsAdapter(v) || strings.Contains(v.Scope(), layers.QuantizedScope) {
				t.Errorf("%s survived the merge", v.ScopeAndName())
			}
		}
		merged := runLoRA(t, backend, ctx, policy, layers.LoRA{}, x(), features).out
		if err := testkit.RelL2(merged, adapted); !(err < 1e-6) {
			t.Errorf("quantized %q: the merged projection differs from the adapted one by %.3g (relative L2)", quantize.Format, err)
		}
	}
}

// TestChunkedLossFrozenHead: with a frozen projection the chunked loss gives the same value and
// the same gradient of x, bit for bit, as with a trainable one, without the weight's.
func TestChunkedLossFrozenHead(t *testing.T) {
	const tokens, width, vocab = 12, 16, 40
	rng := rand.New(rand.NewPCG(3, 36))
	xs, ws := testkit.NormalInput(rng, 2, 6, width).Floats, testkit.NormalInput(rng, vocab, width).Floats
	labels := make([]int32, tokens)
	for i := range labels {
		labels[i] = int32(rng.IntN(vocab))
	}
	var outs [2][]float64
	for i, frozen := range []bool{false, true} {
		got := testkit.Run(t, testkit.Embedded(), func(in []*graph.Node) []*graph.Node {
			proj := layers.Projection{Weight: in[1], ClassesFirst: true, Frozen: frozen}
			sum, _ := layers.ChunkedCrossEntropySum(in[0], proj, graph.Reshape(in[2], 2, 6), nil, 5)
			return []*graph.Node{sum, graph.Gradient(sum, in[0])[0]}
		}, tensors.FromFlatDataAndDimensions(xs, 2, 6, width), tensors.FromFlatDataAndDimensions(ws, vocab, width), tensors.FromFlatDataAndDimensions(labels, tokens))
		outs[i] = append(got[0], got[1]...)
	}
	if !slices.Equal(outs[0], outs[1]) {
		t.Errorf("a frozen head changes the loss or x's gradient (relative L2 %.3g)", testkit.RelL2(outs[1], outs[0]))
	}
}
