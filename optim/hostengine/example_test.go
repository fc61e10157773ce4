package hostengine_test

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/optim/hostengine"
	"github.com/onegpu/onegpu/platform"
)

// Two stages' variables updated by Adam in host memory, step by step: each stage's update
// returns its parameters in bfloat16; Commit ends the step. With a gradient of constant sign Adam
// moves a parameter by the learning rate each step (1 -> 0.9 -> 0.8, 2 -> 2.1 -> 2.2, in bfloat16),
// and not at all for a zero gradient.
func Example() {
	backend, err := platform.NewBackend(hostengine.Embedded) // hostengine.NewBackend() picks XLA's CPU client when there is one
	if err != nil {
		panic(err)
	}
	defer backend.Finalize()
	ctx := context.New()
	w0 := ctx.InAbsPath("/block_0").VariableWithValue("w", []float32{1, 2, 3})
	w1 := ctx.InAbsPath("/block_1").VariableWithValue("w", []float32{-1, -2})
	engine, err := hostengine.New(hostengine.Config{Backend: backend, Ctx: ctx, Optimizer: optim.Adam().Done(),
		Schedule: optim.Constant(0.1), Compute: dtypes.BFloat16})
	if err != nil {
		panic(err)
	}
	defer engine.Close()
	stage0, _ := engine.Stage("block_0", []*context.Variable{w0})
	stage1, _ := engine.Stage("block_1", []*context.Variable{w1})
	for range 2 {
		p1, err := stage1.Update([]*tensors.Tensor{tensors.FromValue([]float32{1, 1})}, hostengine.Scaling{}) // the last stage's gradients come first
		if err != nil {
			panic(err)
		}
		p0, err := stage0.Update([]*tensors.Tensor{tensors.FromValue([]float32{1, -1, 0})}, hostengine.Scaling{})
		if err != nil {
			panic(err)
		}
		if err := engine.Commit(); err != nil {
			panic(err)
		}
		fmt.Println(p0[0].DType(), p0[0].Value(), p1[0].Value())
	}
	fmt.Println("global step:", optimizers.GetGlobalStepVar(ctx).MustValue().Value())
	// Output:
	// BFloat16 [0.8984375 2.09375 3] [-1.1015625 -2.09375]
	// BFloat16 [0.80078125 2.203125 3] [-1.203125 -2.203125]
	// global step: 2
}
