package accum_test

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/platform"
)

// A one-weight linear model scored on 8 examples, of which a mask keeps 1 of the first 4 and all
// of the last 4: however the batch is split, the loss and the gradient are those of the 5 examples
// that count. Averaging the micro-batches' means instead gives the lone example of the first
// micro-batch the weight of two, and counts the empty second micro-batch as a zero loss.
func ExampleGradients() {
	backend, err := platform.NewBackend("go")
	if err != nil {
		panic(err)
	}
	x := tensors.FromFlatDataAndDimensions([]float32{1, 2, 3, 4, 5, 6, 7, 8}, 8)
	y := tensors.FromFlatDataAndDimensions([]float32{2, 0, 0, 0, 9, 13, 13, 17}, 8)
	mask := tensors.FromFlatDataAndDimensions([]bool{true, false, false, false, true, true, true, true}, 8)
	squaredError := accum.MaskedLoss(func(ctx *context.Context, batch []*graph.Node) (losses, mask *graph.Node) {
		w := ctx.VariableWithValue("w", float32(1)).ValueGraph(batch[0].Graph())
		return graph.Square(graph.Sub(graph.Mul(batch[0], w), batch[1])), batch[2]
	})
	// The 2024 bug, for comparison: every micro-batch's mean counts the same.
	meanOfMeans := accum.MeanLoss(func(ctx *context.Context, batch []*graph.Node) *graph.Node {
		m, _ := squaredError(ctx, batch)
		return m.Value()
	})
	run := func(k int, lossFn accum.LossFn) []*tensors.Tensor {
		exec, err := context.NewExec(backend, context.New(), func(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
			r := accum.Gradients(ctx, k, inputs, lossFn)
			return []*graph.Node{r.Loss, r.Gradients[0]}
		})
		if err != nil {
			panic(err)
		}
		out, err := exec.Exec(x, y, mask)
		if err != nil {
			panic(err)
		}
		return out
	}
	for _, k := range []int{1, 2, 4, 8} {
		out := run(k, squaredError)
		fmt.Printf("%d micro-batches: loss %.2f, gradient %.2f\n", k, out[0].Value(), out[1].Value())
	}
	out := run(4, meanOfMeans)
	fmt.Printf("mean of 4 means: loss %.2f, gradient %.2f (wrong)\n", out[0].Value(), out[1].Value())
	// Output:
	// 1 micro-batches: loss 36.60, gradient -70.80
	// 2 micro-batches: loss 36.60, gradient -70.80
	// 4 micro-batches: loss 36.60, gradient -70.80
	// 8 micro-batches: loss 36.60, gradient -70.80
	// mean of 4 means: loss 23.00, gradient -44.50 (wrong)
}

// CheckSplit reports, before any graph is built, a number of micro-batches that does not divide the
// batch.
func ExampleCheckSplit() {
	inputs := []shapes.Shape{shapes.Make(dtypes.Float32, 512, 128), shapes.Make(dtypes.Int32, 512)}
	for _, k := range []int{4, 3} {
		fmt.Println(k, accum.CheckSplit(k, inputs...))
	}
	// Output:
	// 4 <nil>
	// 3 a batch of 512 examples does not split into 3 micro-batches: use a divisor of 512 (nearest: 2 or 4) or change the batch size
}
