package graph_test

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	ograph "github.com/onegpu/onegpu/graph"
)

// Estimate the peak memory of a small computation without running it.
func ExampleAnalyze() {
	backend, err := ograph.NewBackend("go")
	if err != nil {
		panic(err)
	}
	g := graph.NewGraph(backend, "example")
	x := graph.Parameter(g, "x", shapes.Make(dtypes.Float32, 1024)) // 4 KiB
	y := graph.ReduceAllSum(graph.Mul(graph.Exp(x), graph.Tanh(x)))
	m := ograph.Analyze(ograph.NewProgram(g, y))
	fmt.Printf("arguments %d bytes, peak %d bytes, %d FLOPs\n", m.ArgumentBytes, m.PeakBytes, m.FLOPs)
	// Output: arguments 4096 bytes, peak 12288 bytes, 4096 FLOPs
}

// Resolve a backend spec without creating the backend.
func ExampleResolveBackend() {
	spec, err := ograph.ResolveBackend("go:dotgeneral_large")
	fmt.Println(spec, err)
	_, err = ograph.ResolveBackend("xla")
	fmt.Println(err != nil)
	// Output:
	// go:ops_sequential,dotgeneral_large <nil>
	// true
}
