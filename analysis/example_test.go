package analysis_test

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/platform"
)

// Estimate the peak memory of a small computation without running it.
func ExampleAnalyze() {
	backend, err := platform.NewBackend("go")
	if err != nil {
		panic(err)
	}
	g := graph.NewGraph(backend, "example")
	x := graph.Parameter(g, "x", shapes.Make(dtypes.Float32, 1024)) // 4 KiB
	y := graph.ReduceAllSum(graph.Mul(graph.Exp(x), graph.Tanh(x)))
	m := analysis.Analyze(analysis.NewProgram(g, y))
	fmt.Printf("arguments %d bytes, peak %d bytes, %d FLOPs\n", m.ArgumentBytes, m.PeakBytes, m.FLOPs)
	// Output: arguments 4096 bytes, peak 12288 bytes, 4096 FLOPs
}
