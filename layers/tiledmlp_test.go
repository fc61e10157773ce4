package layers_test

import (
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
)

// swigluBranch is a Llama MLP branch: RMSNorm then SwiGLU to intermediate and back.
func swigluBranch(intermediate int) layers.Branch {
	return func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		return []*graph.Node{layers.SwiGLU(ctx.In("mlp"), layers.RMSNorm(ctx.In("norm"), in[0], 1e-5), intermediate)}
	}
}

// tiledStep returns the branch's output (its sum of squares as the loss) and the gradients of x
// and of every trainable variable, with the MLP computed chunk positions at a time (0: whole).
func tiledStep(chunk, intermediate int) func(ctx *context.Context, xs []*graph.Node) []*graph.Node {
	return func(ctx *context.Context, xs []*graph.Node) []*graph.Node {
		layers.SetMLP(ctx, layers.MLP{Chunk: chunk})
		x := xs[0]
		y := layers.TiledBranch(swigluBranch(intermediate))(ctx, []*graph.Node{x})[0]
		loss := graph.ReduceAllSum(graph.Mul(y, y))
		wrt := []*graph.Node{x}
		for v := range ctx.IterVariables() {
			if v.Trainable {
				wrt = append(wrt, v.ValueGraph(x.Graph()))
			}
		}
		return append([]*graph.Node{y, loss}, graph.Gradient(loss, wrt...)...)
	}
}

// TestTiledBranchMatchesWhole: the MLP branch computed 4 positions at a time (chunks of 4, 4 and
// 2 of a sequence of 10), each chunk rematerialized, gives the whole branch's output, loss and
// gradient of x bit for bit on the embedded backend, and the weights' gradients (the norm's and
// the three projections': sums over the positions, chunk by chunk) within 1e-6 relative L2; on
// XLA everything within 1e-6.
func TestTiledBranchMatchesWhole(t *testing.T) {
	for _, backend := range testkit.All() {
		x := randomTensor(rand.New(rand.NewPCG(5, 6)), 2, 10, 8) // a tensor per backend
		ctx := context.New()
		want := testkit.RunContext(t, backend, ctx, tiledStep(0, 16), x)
		got := testkit.RunContext(t, backend, ctx.Reuse(), tiledStep(4, 16), x)
		if len(got) != len(want) || len(want) != 7 {
			t.Fatalf("%s: %d and %d outputs, want 7 (output, loss, x and 4 weights' gradients)", backend.Name(), len(got), len(want))
		}
		for i := range want {
			tol := 1e-6
			if backend == testkit.Embedded() && i < 3 {
				tol = 0
			}
			if rel := testkit.RelL2(got[i], want[i]); rel > tol {
				t.Errorf("%s: output %d differs by %.2g relative L2, want <= %g", backend.Name(), i, rel, tol)
			}
		}
	}
}

// TestTiledBranchMemory: an MLP branch in bfloat16 (sequence 1024, width 64, intermediate 1024)
// computed 128 positions at a time holds, at its gradient step's peak (the embedded backend's
// estimate, analysis.Analyze), at most 40% of the whole branch's temporaries: its
// [seq, intermediate] values (and the products' blocked copies) an eighth at a time; XLA's
// compiled temporaries (when a plugin is set) at most half.
func TestTiledBranchMemory(t *testing.T) {
	peak, compiled := map[int]int64{}, map[int]int64{}
	in := []shapes.Shape{shapes.Make(dtypes.BFloat16, 1, 1024, 64)}
	for _, chunk := range []int{0, 128} {
		step := func(ctx *context.Context, xs []*graph.Node) []*graph.Node { return tiledStep(chunk, 1024)(ctx, xs)[1:] }
		p, err := analysis.ContextProgram(testkit.Embedded(), context.New(), "tiled", in, step)
		if err != nil {
			t.Fatal(err)
		}
		peak[chunk] = analysis.Analyze(p).PeakTempBytes
		p.Graph.Finalize()
		t.Logf("chunk %d: temporaries %.2f MiB", chunk, mib(peak[chunk]))
		if xla := testkit.XLA(); xla != nil {
			p, err := analysis.ContextProgram(xla, context.New(), "tiled", in, step)
			if err != nil {
				t.Fatal(err)
			}
			c, err := analysis.CompileProgram(p)
			p.Graph.Finalize()
			if err != nil {
				t.Fatal(err)
			}
			compiled[chunk] = c.TemporaryBytes
			t.Logf("chunk %d: XLA's temporaries %.2f MiB", chunk, mib(c.TemporaryBytes))
		}
	}
	if float64(peak[128]) > 0.4*float64(peak[0]) {
		t.Errorf("chunks of 128 hold %.2f MiB, the whole branch %.2f MiB: want at most 40%%", mib(peak[128]), mib(peak[0]))
	}
	if len(compiled) == 2 && float64(compiled[128]) > 0.5*float64(compiled[0]) {
		t.Errorf("XLA: chunks of 128 hold %.2f MiB, the whole branch %.2f MiB: want at most half", mib(compiled[128]), mib(compiled[0]))
	}
}
