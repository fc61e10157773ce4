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

// updateHarness applies opt's update to a 64x128 kernel and a 128 bias from fixed initial values,
// with the gradients as the program's inputs, so that the update alone is compared: the same
// gradients reach it on every backend. It returns every variable's values after each step, by
// scope and name.
func updateHarness(t *testing.T, backend backends.Backend, opt GradientsOptimizer, steps int) []map[string][]float64 {
	t.Helper()
	grads := harnessGradients(steps)
	r := rand.New(rand.NewPCG(11, 3))
	kernel := make([][]float32, 64)
	for i := range kernel {
		kernel[i] = make([]float32, 128)
		for j := range kernel[i] {
			kernel[i][j] = float32(r.NormFloat64() * 0.1)
		}
	}
	bias := make([]float32, 128)
	for j := range bias {
		bias[j] = float32(r.NormFloat64() * 0.1)
	}
	ctx := context.New()
	ctx.In("dense").VariableWithValue("kernel", kernel)
	ctx.In("dense").VariableWithValue("bias", bias)
	exec, err := context.NewExec(backend, ctx, func(ctx *context.Context, gk, gb *graph.Node) *graph.Node {
		g := gk.Graph()
		for v := range ctx.IterVariables() {
			v.ValueGraph(g) // in use, in context order: bias, kernel
		}
		opt.UpdateGraphWithGradients(ctx, []*graph.Node{gk, gb}, dtypes.Float32)
		return graph.ScalarZero(g, dtypes.Float32)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	var states []map[string][]float64
	for _, step := range grads {
		if _, err := exec.Exec(step[0], step[1]); err != nil {
			t.Fatal(err)
		}
		state := map[string][]float64{}
		for v := range ctx.IterVariables() {
			state[v.ScopeAndName()] = testkit.Floats(v.MustValue())
		}
		states = append(states, state)
	}
	return states
}

// harnessGradients returns steps pairs of gradients (kernel, bias) whose magnitudes span four
// decades and change from step to step, as a model's do.
func harnessGradients(steps int) [][2]*tensors.Tensor {
	r := rand.New(rand.NewPCG(5, 8))
	out := make([][2]*tensors.Tensor, steps)
	for s := range out {
		gk := make([][]float32, 64)
		for i := range gk {
			gk[i] = make([]float32, 128)
			for j := range gk[i] {
				gk[i][j] = float32(r.NormFloat64() * math.Pow(10, -4*r.Float64()))
			}
		}
		gb := make([]float32, 128)
		for j := range gb {
			gb[j] = float32(r.NormFloat64() * 1e-2)
		}
		out[s] = [2]*tensors.Tensor{tensors.FromValue(gk), tensors.FromValue(gb)}
	}
	return out
}

// TestAdam8bitSameBitsOnEveryBackend: given the same gradients, the embedded backend and XLA
// compute the same 8-bit codes, scales, float32 moments and parameters, bit for bit, step after
// step (the optimizer offload runs this update on the embedded backend for a device on XLA). Before
// the update was rounded the same way everywhere, XLA's fused multiply-adds changed 28% of the
// moments' last bits, which moved codes across their rounding boundaries.
func TestAdam8bitSameBitsOnEveryBackend(t *testing.T) {
	xla := testkit.RequireXLA(t)
	opt := func() GradientsOptimizer { return Adam8bit().LearningRate(1e-2).BlockSize(256).Done() }
	want := updateHarness(t, testkit.Embedded(), opt(), 12)
	got := updateHarness(t, xla, opt(), 12)
	for step := range want {
		if len(got[step]) != len(want[step]) || len(want[step]) < 8 {
			t.Fatalf("step %d: %d variables on XLA, %d embedded (want the parameters, 4 codes/scales, 2 float32 moments, 2 counters)", step+1, len(got[step]), len(want[step]))
		}
		for name, w := range want[step] {
			g := got[step][name]
			differ := 0
			for i := range w {
				if math.Float64bits(g[i]) != math.Float64bits(w[i]) {
					differ++
				}
			}
			if differ > 0 {
				t.Errorf("step %d: %s differs in %d of %d values between XLA and the embedded backend", step+1, name, differ, len(w))
			}
		}
	}
}

// TestUnquantizedIsAdam: with every tensor below the quantization threshold, Adam8bit keeps
// float32 moments and is Adam (GoMLX's formula: ε outside the square root, debiased moments): the
// parameters after 8 updates are within a float32 ulp of the parameter plus 1e-6 of the learning
// rate per update (the float32 moments' rounding) of a float64 Adam on the same gradients, on
// every backend.
func TestUnquantizedIsAdam(t *testing.T) {
	const steps, lr, beta1, beta2, eps = 8, 1e-2, 0.9, 0.999, 1e-7
	grads := harnessGradients(steps)
	for _, backend := range backendsUnderTest() {
		states := updateHarness(t, backend, Adam8bit().LearningRate(lr).MinQuantizedSize(1<<30).Done(), steps)
		initial := updateHarness(t, backend, Adam8bit().LearningRate(0).MinQuantizedSize(1<<30).Done(), 1)[0]
		for _, name := range []string{"/dense/kernel", "/dense/bias"} {
			p := append([]float64(nil), initial[name]...)
			m, s := make([]float64, len(p)), make([]float64, len(p))
			for step := range steps {
				g := testkit.Floats(grads[step][0])
				if name == "/dense/bias" {
					g = testkit.Floats(grads[step][1])
				}
				t1 := float64(step + 1)
				for i := range p {
					m[i] = beta1*m[i] + (1-beta1)*g[i]
					s[i] = beta2*s[i] + (1-beta2)*g[i]*g[i]
					p[i] -= lr * m[i] / (1 - math.Pow(beta1, t1)) / (math.Sqrt(s[i]/(1-math.Pow(beta2, t1))) + eps)
				}
			}
			got := states[steps-1][name]
			for i := range p {
				ulp := float64(math.Nextafter32(float32(math.Abs(p[i])), float32(math.Inf(1)))) - math.Abs(float64(float32(p[i])))
				if tol := steps * (ulp + 1e-6*lr); math.Abs(got[i]-p[i]) > tol {
					t.Fatalf("%s: %s[%d] = %.9g after %d updates, float64 Adam %.9g (more than %.2g apart)", backend.Name(), name, i, got[i], steps, p[i], tol)
				}
			}
		}
	}
}

// TestChunkedUpdateIsTheSame: updating a quantized tensor a few blocks at a time (chunks of 3
// blocks, the last one shorter; blocks of 256 that divide the tensor and of 300 that leave the
// last one padded) gives the same codes, scales and parameters, bit for bit, as updating it at
// once, on every backend.
func TestChunkedUpdateIsTheSame(t *testing.T) {
	for _, backend := range backendsUnderTest() {
		for _, blockSize := range []int{256, 300} {
			whole := updateHarness(t, backend, Adam8bit().LearningRate(1e-2).BlockSize(blockSize).ChunkSize(0).Done(), 4)
			chunked := updateHarness(t, backend, Adam8bit().LearningRate(1e-2).BlockSize(blockSize).ChunkSize(3*blockSize+7).Done(), 4)
			for step := range whole {
				for name, w := range whole[step] {
					g := chunked[step][name]
					for i := range w {
						if math.Float64bits(g[i]) != math.Float64bits(w[i]) {
							t.Fatalf("%s, blocks of %d, step %d: %s[%d] is %v chunked, %v at once", backend.Name(), blockSize, step+1, name, i, g[i], w[i])
						}
					}
				}
			}
		}
	}
	if err := Adam8bit().ChunkSize(-1).Validate(); err == nil {
		t.Error("a negative chunk size was accepted")
	}
}
