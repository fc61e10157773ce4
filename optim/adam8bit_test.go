package optim

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/initializers"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
)

// backendsUnderTest returns the embedded backend and, when a PJRT plugin is configured, XLA.
var backendsUnderTest = testkit.All

// wideRange returns n values whose magnitudes span 1e-9..1 (and some exact zeros), as moments do.
func wideRange(n int, signed bool, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	xs := make([]float32, n)
	for i := range xs {
		if r.IntN(50) == 0 {
			continue
		}
		x := math.Pow(10, -9*r.Float64())
		if signed && r.IntN(2) == 0 {
			x = -x
		}
		xs[i] = float32(x)
	}
	return xs
}

// TestCodesFollowTheirDefinition quantizes values spanning nine decades (n not a multiple of the
// block size, so the last block is padded) and checks every code against the code's definition
// computed in float64 from the block's largest magnitude: the code is the nearest level (within
// half a level, plus float32 slack), the block's largest value decodes to itself, and a positive
// second moment never becomes 0.
func TestCodesFollowTheirDefinition(t *testing.T) {
	const n, blockSize = 1000, 64
	for _, backend := range backendsUnderTest() {
		for _, signed := range []bool{true, false} {
			xs := wideRange(n, signed, 7)
			outs := testkit.Run(t, backend, func(in []*graph.Node) []*graph.Node {
				blocks := toBlocks(in[0], blockSize)
				var codes, scales, decoded *graph.Node
				if signed {
					codes, scales = quantizeSigned(blocks)
					decoded = dequantizeSigned(codes, scales)
				} else {
					codes, scales = quantizeUnsigned(blocks)
					decoded = dequantizeUnsigned(codes, scales)
				}
				return []*graph.Node{codes, scales, fromBlocks(decoded, []int{n})}
			}, tensors.FromValue(xs))
			codes, scales, decoded := outs[0], outs[1], outs[2]
			for i, x := range xs {
				scale := scales[i/blockSize]
				var largest float64
				for _, y := range xs[i/blockSize*blockSize : min(n, (i/blockSize+1)*blockSize)] {
					largest = math.Max(largest, math.Abs(float64(y)))
				}
				if math.Abs(scale-largest) > 1e-7*largest {
					t.Fatalf("%s signed=%v block %d: scale %g, largest magnitude %g", backend.Name(), signed, i/blockSize, scale, largest)
				}
				r := math.Abs(float64(x)) / largest
				var ideal, levels float64
				if signed {
					ideal, levels = math.Sqrt(r)*signedLevels, signedLevels
				} else {
					ideal, levels = math.Sqrt(math.Sqrt(r))*unsignedLevels, unsignedLevels
				}
				q := math.Abs(codes[i])
				if !signed && x > 0 && ideal < 0.5 {
					if q != 1 {
						t.Fatalf("%s: positive second moment %g (%.3g of its block) got code %v, want the smallest positive code 1", backend.Name(), x, r, q)
					}
					continue
				}
				if math.Abs(q-ideal) > 0.5+1e-4*levels {
					t.Fatalf("%s signed=%v: value %g (ratio %.6g) got code %v, nearest level is %.3f", backend.Name(), signed, x, r, codes[i], ideal)
				}
				if signed && x != 0 && q != 0 && math.Signbit(codes[i]) != math.Signbit(float64(x)) {
					t.Fatalf("%s: value %g got code %v of the other sign", backend.Name(), x, codes[i])
				}
				if math.Abs(float64(x)) == largest && math.Abs(decoded[i]-float64(x)) > 1e-6*largest {
					t.Fatalf("%s signed=%v: the block's largest value %g decodes to %g", backend.Name(), signed, x, decoded[i])
				}
			}
		}
	}
}

// regression is a train step of a linear layer (64 inputs -> 128 outputs: 8192 weights, above the
// quantization threshold, and a bias below it) on a least-squares loss, with opt.
func regression(opt optimizers.Interface) func(ctx *context.Context, x, y *graph.Node) *graph.Node {
	return func(ctx *context.Context, x, y *graph.Node) *graph.Node {
		g := x.Graph()
		w := ctx.In("dense").WithInitializer(func(g *graph.Graph, s shapes.Shape) *graph.Node {
			return graph.MulScalar(graph.OnesLike(graph.Zeros(g, s)), 0.01)
		}).VariableWithShape("kernel", shapes.Make(dtypes.Float32, 64, 128)).ValueGraph(g)
		b := ctx.In("dense").WithInitializer(initializers.Zero).VariableWithShape("bias", shapes.Make(dtypes.Float32, 128)).ValueGraph(g)
		pred := graph.Add(graph.Dot(x, w), graph.InsertAxes(b, 0))
		loss := graph.ReduceAllMean(graph.Square(graph.Sub(pred, y)))
		opt.UpdateGraph(ctx, g, loss)
		return loss
	}
}

// regressionData is a batch of 32 examples whose targets come from a fixed random linear map.
func regressionData(seed uint64) (x, y *tensors.Tensor) {
	r := rand.New(rand.NewPCG(seed, 2))
	xs := make([][]float32, 32)
	ys := make([][]float32, 32)
	truth := make([][]float64, 64)
	for i := range truth {
		truth[i] = make([]float64, 128)
		for j := range truth[i] {
			truth[i][j] = r.NormFloat64() * 0.2
		}
	}
	for n := range xs {
		xs[n] = make([]float32, 64)
		for i := range xs[n] {
			xs[n][i] = float32(r.NormFloat64())
		}
		ys[n] = make([]float32, 128)
		for j := range ys[n] {
			var s float64
			for i := range 64 {
				s += float64(xs[n][i]) * truth[i][j]
			}
			ys[n][j] = float32(s + 0.5)
		}
	}
	return tensors.FromValue(xs), tensors.FromValue(ys)
}

// trainRegression runs steps updates with opt and returns the losses and the context.
func trainRegression(t *testing.T, backend backends.Backend, opt optimizers.Interface, steps int) ([]float64, *context.Context) {
	t.Helper()
	ctx := context.New()
	exec, err := context.NewExec(backend, ctx, regression(opt))
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	x, y := regressionData(3)
	var losses []float64
	for range steps {
		outs, err := exec.Exec(x, y)
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, testkit.Floats(outs[0])[0])
	}
	return losses, ctx
}

// TestUnquantizedIsGoMLXAdam: with every tensor below the quantization threshold, Adam8bit keeps
// float32 moments and must be GoMLX's Adam, bit for bit (same update formula, same variables read).
func TestUnquantizedIsGoMLXAdam(t *testing.T) {
	for _, backend := range backendsUnderTest() {
		adam, _ := trainRegression(t, backend, optimizers.Adam().LearningRate(1e-2).Done(), 8)
		eight, _ := trainRegression(t, backend, Adam8bit().LearningRate(1e-2).MinQuantizedSize(1<<30).Done(), 8)
		for i := range adam {
			if adam[i] != eight[i] {
				t.Fatalf("%s step %d: loss %v with float32 moments, %v with GoMLX's Adam", backend.Name(), i, eight[i], adam[i])
			}
		}
	}
}

// TestQuantizedTracksAdam: with 8-bit moments the regression trains as with float32 Adam: after
// 60 steps the loss has dropped as far (within 5% of Adam's loss, far below the start).
func TestQuantizedTracksAdam(t *testing.T) {
	for _, backend := range backendsUnderTest() {
		adam, _ := trainRegression(t, backend, optimizers.Adam().LearningRate(1e-2).Done(), 60)
		eight, ctx := trainRegression(t, backend, Adam8bit().LearningRate(1e-2).BlockSize(256).Done(), 60)
		first, last := adam[0], adam[len(adam)-1]
		got := eight[len(eight)-1]
		t.Logf("%s: loss %.5f -> Adam %.5f, Adam8bit %.5f", backend.Name(), first, last, got)
		if !(last < first/10) {
			t.Fatalf("%s: the reference Adam did not train (%.4f -> %.4f): the test problem is wrong", backend.Name(), first, last)
		}
		if math.Abs(got-last) > 0.05*last+1e-4*first {
			t.Fatalf("%s: after 60 steps Adam8bit's loss is %.5f, Adam's %.5f (start %.5f)", backend.Name(), got, last, first)
		}
		kernelCodes := ctx.GetVariableByScopeAndName("/"+Adam8bitScope+"/dense", "kernel_1st_moment_codes")
		if kernelCodes == nil || kernelCodes.Shape().DType != dtypes.Int8 {
			t.Fatalf("%s: the kernel's first moment is not stored as int8 codes: %v", backend.Name(), kernelCodes)
		}
		if bias := ctx.GetVariableByScopeAndName("/"+Adam8bitScope+"/dense", "bias_2nd_moment"); bias == nil || bias.Shape().DType != dtypes.Float32 {
			t.Fatalf("%s: the bias (128 elements) should keep a float32 second moment: %v", backend.Name(), bias)
		}
	}
}

// stateBytes sums the bytes of the variables under scope.
func stateBytes(ctx *context.Context, scope string) int {
	var n int
	for v := range ctx.IterVariables() {
		if v.Scope() == scope || strings.HasPrefix(v.Scope(), scope+context.ScopeSeparator) {
			n += int(v.Shape().Memory())
		}
	}
	return n
}

// TestStateIsAQuarter: the stored moments of a 64x128 kernel and a 128 bias take 2 bytes per
// quantized element plus a float32 scale per block, against Adam's 8 bytes per element.
func TestStateIsAQuarter(t *testing.T) {
	backend := testkit.Embedded()
	_, adamCtx := trainRegression(t, backend, optimizers.Adam().Done(), 1)
	_, eightCtx := trainRegression(t, backend, Adam8bit().Done(), 1)
	adam := stateBytes(adamCtx, "/"+optimizers.AdamDefaultScope)
	eight := stateBytes(eightCtx, "/"+Adam8bitScope)
	// Adam: (8192+128)·8 + step. Adam8bit: 8192·2 + 4 blocks·2 scales·4 + 128·8 + step.
	wantAdam, wantEight := (8192+128)*8+8, 8192*2+4*2*4+128*8+8
	if adam != wantAdam || eight != wantEight {
		t.Fatalf("state bytes: Adam %d (want %d), Adam8bit %d (want %d)", adam, wantAdam, eight, wantEight)
	}
	t.Logf("Adam8bit / Adam state: %.3f", float64(eight)/float64(adam))
}

// TestSkipKeepsCodes: in a chain with a loss scale, a step whose gradients are not finite leaves the
// 8-bit codes, their scales and the weights exactly as they were.
func TestSkipKeepsCodes(t *testing.T) {
	checkSkipKeepsState(t, Adam8bit().LearningRate(1e-2).Done(), 8)
}

// checkSkipKeepsState trains the regression two steps with optimizer in a chain with a loss scale,
// then checks that a step whose gradients are not finite leaves every variable (at least
// wantVariables of them) exactly as it was, but the loss scale and the skip counter.
func checkSkipKeepsState(t *testing.T, optimizer GradientsOptimizer, wantVariables int) {
	t.Helper()
	backend := testkit.Embedded()
	ctx := context.New()
	opt, err := NewChain(LossScale(mixed.NewDynamicLossScale()), Apply(optimizer))
	if err != nil {
		t.Fatal(err)
	}
	exec, err := context.NewExec(backend, ctx, regression(opt))
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	x, y := regressionData(3)
	for range 2 {
		if _, err := exec.Exec(x, y); err != nil {
			t.Fatal(err)
		}
	}
	before := map[string][]float64{}
	for v := range ctx.IterVariables() {
		before[v.ScopeAndName()] = testkit.Floats(v.MustValue())
	}
	bad, _ := x.Clone()
	bad.MutableFlatData(func(flat any) { flat.([]float32)[5] = float32(math.NaN()) })
	if _, err := exec.Exec(bad, y); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for v := range ctx.IterVariables() {
		if v.Scope() == mixed.DefaultLossScaleScope || v.Scope() == DefaultScope {
			continue // the loss scale halves and the skip is counted: that is the point
		}
		after := testkit.Floats(v.MustValue())
		for i := range after {
			if math.Float64bits(after[i]) != math.Float64bits(before[v.ScopeAndName()][i]) {
				t.Fatalf("%s[%d] changed on a skipped step: %v -> %v", v.ScopeAndName(), i, before[v.ScopeAndName()][i], after[i])
			}
		}
		checked++
	}
	if checked < wantVariables {
		t.Fatalf("only %d variables checked, want %d", checked, wantVariables)
	}
}
