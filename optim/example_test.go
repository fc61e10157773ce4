package optim_test

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/platform"
)

// MultiSteps applies Adam once every 3 calls: the global step advances once per window.
func ExampleMultiSteps() {
	backend, err := platform.NewBackend("go")
	if err != nil {
		panic(err)
	}
	opt, err := optim.NewChain(optim.MultiSteps(3), optim.Apply(optimizers.Adam().Done()))
	if err != nil {
		panic(err)
	}
	ctx := context.New()
	exec, err := context.NewExec(backend, ctx, func(ctx *context.Context, x *graph.Node) *graph.Node {
		w := ctx.VariableWithValue("w", float32(1)).ValueGraph(x.Graph())
		loss := graph.ReduceAllMean(graph.Square(graph.Sub(graph.Mul(x, w), x)))
		opt.UpdateGraph(ctx, x.Graph(), loss)
		return loss
	})
	if err != nil {
		panic(err)
	}
	for call := 1; call <= 6; call++ {
		if _, err := exec.Exec([]float32{1, 2, 3}); err != nil {
			panic(err)
		}
		stats, err := optim.ReadMultiSteps(ctx)
		if err != nil {
			panic(err)
		}
		fmt.Printf("call %d: micro-step %d, global step %d\n", call, stats.MicroStep, optimizers.GetGlobalStep(ctx))
	}
	// Output:
	// call 1: micro-step 1, global step 0
	// call 2: micro-step 2, global step 0
	// call 3: micro-step 0, global step 1
	// call 4: micro-step 1, global step 1
	// call 5: micro-step 2, global step 1
	// call 6: micro-step 0, global step 2
}

// A chain that cannot work is an error when it is built, naming both links.
func ExampleNewChain() {
	_, err := optim.NewChain(optim.ClipByGlobalNorm(1), optim.LossScale(nil), optim.Apply(optimizers.Adam().Done()))
	fmt.Println(err)
	_, err = optim.NewChain(optim.LossScale(nil), optim.MicroBatches(4), optim.Apply(optimizers.Adam().Done()))
	fmt.Println(err)
	// Output:
	// LossScale(none) after ClipByGlobalNorm(1): the clip would see gradients multiplied by the loss scale; put LossScale before the clip
	// MicroBatches(4) after LossScale(none): micro-batches compute the gradients the other links transform, so MicroBatches comes first
}
