package remat_test

import (
	"fmt"
	"os"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/platform"
	"github.com/onegpu/onegpu/remat"
)

// A checkpointed block returns the same values and gradients as the plain block.
func Example() {
	backend, err := platform.NewBackend("go")
	if err != nil {
		panic(err)
	}
	block := func(in []*graph.Node) []*graph.Node {
		h := graph.Tanh(remat.NameDot(graph.Dot(in[0], in[1]), "hidden"))
		return []*graph.Node{graph.Dot(h, in[2])}
	}
	step := func(checkpoint bool) func(x, w1, w2 *graph.Node) []*graph.Node {
		return func(x, w1, w2 *graph.Node) []*graph.Node {
			var y *graph.Node
			if checkpoint {
				y = remat.Checkpoint(block, x, w1, w2)[0]
			} else {
				y = block([]*graph.Node{x, w1, w2})[0]
			}
			loss := graph.ReduceAllSum(graph.Square(y))
			return append([]*graph.Node{loss}, graph.Gradient(loss, w1, w2)...)
		}
	}
	x := [][]float32{{1, 2}, {3, -1}}
	w1 := [][]float32{{0.5, -0.25, 0.1}, {0.3, 0.2, -0.4}}
	w2 := [][]float32{{1}, {-2}, {0.5}}
	for _, checkpoint := range []bool{false, true} {
		out := graph.MustNewExec(backend, step(checkpoint)).MustExec(x, w1, w2)
		fmt.Printf("checkpoint=%v loss=%.4f dw1=%.4f dw2=%.4f\n", checkpoint, out[0].Value(), out[1].Value(), out[2].Value())
	}
	// Output:
	// checkpoint=false loss=6.8806 dw1=[[4.9306 -14.9930 5.1076] [-1.3074 3.1674 -1.4055]] dw2=[[4.6818] [-3.8099] [2.9189]]
	// checkpoint=true loss=6.8806 dw1=[[4.9306 -14.9930 5.1076] [-1.3074 3.1674 -1.4055]] dw2=[[4.6818] [-3.8099] [2.9189]]
}

// Residuals lists what the backward pass keeps from each checkpointed block: its input, and
// the values its policy saves.
func ExampleResiduals() {
	backend, err := platform.NewBackend("go")
	if err != nil {
		panic(err)
	}
	mlp := func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		w1 := ctx.VariableWithShape("w1", shapes.Make(dtypes.Float32, 64, 256)).ValueGraph(in[0].Graph())
		w2 := ctx.VariableWithShape("w2", shapes.Make(dtypes.Float32, 256, 64)).ValueGraph(in[0].Graph())
		h := graph.Tanh(remat.NameDot(graph.Dot(in[0], w1), "hidden"))
		return []*graph.Node{graph.Add(in[0], graph.Dot(h, w2))}
	}
	step := func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		x := graph.Sin(in[0])
		for i := range 2 {
			x = remat.With(remat.DotsSaveable).CheckpointCtx(ctx.Inf("mlp%d", i), mlp, x)[0]
		}
		loss := graph.ReduceAllMean(graph.Square(x))
		return append([]*graph.Node{loss}, ctx.BuildTrainableVariablesGradientsGraph(loss)...)
	}
	p, err := analysis.ContextProgram(backend, context.New(), "example", []shapes.Shape{shapes.Make(dtypes.Float32, 32, 64)}, step)
	if err != nil {
		panic(err)
	}
	report, err := remat.Residuals(p)
	if err != nil {
		panic(err)
	}
	_ = report.WriteTable(os.Stdout)
	// Output:
	// BLOCK  POLICY         RESIDUAL              KIND   OP        SHAPE            BYTES
	// /mlp0  dots_saveable  input #0              input  Sin       Float32[32 64]   8.0 KiB
	// /mlp0  dots_saveable  hidden                saved  Dot       Float32[32 256]  32.0 KiB
	// /mlp0  dots_saveable  (total: 2 residuals)                                    40.0 KiB
	// /mlp1  dots_saveable  input #0              input  Identity  Float32[32 64]   8.0 KiB
	// /mlp1  dots_saveable  hidden                saved  Dot       Float32[32 256]  32.0 KiB
	// /mlp1  dots_saveable  (total: 2 residuals)                                    40.0 KiB
	//
	// POLICY          BLOCKS  BYTES
	// dots_saveable   2       80.0 KiB
	// all blocks      2       80.0 KiB
	// outside blocks          8.0 KiB
}

// Policies read like JAX's and combine.
func ExampleParsePolicy() {
	policy, err := remat.ParsePolicy("dots_with_no_batch_dims_saveable+save_only_these_names:attn_out")
	if err != nil {
		panic(err)
	}
	fmt.Println(policy.Saves(remat.Tag{Name: "mlp_in", Dot: true}))
	fmt.Println(policy.Saves(remat.Tag{Name: "attn_scores", Dot: true, BatchDims: true}))
	fmt.Println(policy.Saves(remat.Tag{Name: "attn_out"}))
	_, err = remat.ParsePolicy("dots")
	fmt.Println(err)
	// Output:
	// true
	// false
	// true
	// remat policy "dots": unknown policy "dots"; the policies are nothing_saveable, everything_saveable, dots_saveable, dots_with_no_batch_dims_saveable, save_only_these_names:NAME,..., save_any_names_but_these:NAME,... (join several with +)
}
