package quant_test

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/platform"
	"github.com/onegpu/onegpu/quant"
)

// A weight [2, 64] in NF4 with double quantization: quantized on the host, dequantized to
// bfloat16 in a graph.
func Example() {
	weights := make([]float32, 2*64)
	for i := range weights {
		weights[i] = float32(i%16-8) / 100
	}
	q, err := quant.Quantize(quant.QLoRA(), weights, 2, 64)
	if err != nil {
		panic(err)
	}
	backend, err := platform.NewBackend("go")
	if err != nil {
		panic(err)
	}
	exec, err := graph.NewExec(backend, func(parts []*graph.Node) *graph.Node {
		return quant.NewNodes(q.Layout, parts...).Dequantize(dtypes.BFloat16)
	})
	if err != nil {
		panic(err)
	}
	args := []any{}
	for _, p := range q.Tensors() {
		args = append(args, p)
	}
	out, err := exec.Exec(args...)
	if err != nil {
		panic(err)
	}
	fmt.Println(out[0].Shape(), q.Bytes(), "bytes")
	fmt.Println(weights[:4])
	fmt.Println(tensors.MustCopyFlatData[bfloat16.BFloat16](out[0])[:4]) // the nearest NF4 levels times 0.08
	// Output:
	// (BFloat16)[2 64] 74 bytes
	// [-0.08 -0.07 -0.06 -0.05]
	// [-0.080078125 -0.080078125 -0.055664062 -0.055664062]
}
