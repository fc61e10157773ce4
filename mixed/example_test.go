package mixed_test

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/platform"
)

func ExampleParsePolicy() {
	for _, s := range []string{"params=float32,compute=bfloat16,output=float32", "c=bf16", "half", "p=f32,c=fp8"} {
		policy, err := mixed.ParsePolicy(s)
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Println(policy)
	}
	// Output:
	// params=float32,compute=bfloat16,output=float32
	// params=float32,compute=bfloat16,output=bfloat16
	// params=float16,compute=float16,output=float16
	// error: precision policy "p=f32,c=fp8": in "c=fp8": unknown dtype "fp8": use float32 (f32, full), bfloat16 (bf16), float16 (f16, half) or float64 (f64)
}

func ExamplePolicy_CastToCompute() {
	backend, err := platform.NewBackend("go")
	if err != nil {
		panic(err)
	}
	policy, _ := mixed.ParsePolicy("p=f32,c=bf16,o=f32")
	g := graph.NewGraph(backend, "example")
	w := graph.Parameter(g, "w", shapes.Make(dtypes.Float32, 4, 2))
	ids := graph.Parameter(g, "ids", shapes.Make(dtypes.Int32, 4))

	fmt.Println("weights:", policy.CastToCompute(w).DType())
	fmt.Println("integers are not cast:", policy.CastToCompute(ids) == ids)
	half := policy.CastToCompute(w)
	fmt.Println("casting to the same dtype adds nothing:", policy.CastToCompute(half) == half)
	fmt.Println("sum in a float32 island:", mixed.Sum(half, policy.Output).DType())
	// Output:
	// weights: BFloat16
	// integers are not cast: true
	// casting to the same dtype adds nothing: true
	// sum in a float32 island: Float32
}
