package optim

import (
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/testkit"
)

// hugeUpdate builds (without running) Adam8bit's update of one float32 variable [rows, 2048] from
// a gradient input, on the embedded backend or XLA.
func hugeUpdate(t *testing.T, xla bool, rows int, opt *Adam8bitOptimizer) *analysis.Program {
	t.Helper()
	backend := testkit.Embedded()
	if xla {
		backend = testkit.RequireXLA(t)
	}
	shape := shapes.Make(dtypes.Float32, rows, 2048)
	p, err := analysis.ContextProgram(backend, context.New(), "update", []shapes.Shape{shape}, func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		ctx.In("embed").VariableWithShape("table", shape).ValueGraph(in[0].Graph())
		opt.UpdateGraphWithGradients(ctx, in, dtypes.Float32)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestHugeTensorUpdateIsChunked: the update of a 32768×2048 float32 table (256 MiB) allocates, in
// onegpu's estimate (the embedded backend's order, every element-wise intermediate kept until
// its last use), at most its outputs (the new table and codes) plus 16 float64 intermediates of
// one 2^22-element chunk (measured: 744 MiB), where updating the table at once holds several
// float32 and float64 copies of it (2,048 MiB; 1,024 MiB when the update computed in float32);
// and on XLA, which fuses the chain into one pass, the estimate is within 1.3x of XLA's compiled
// figure (measured 1.26x; 2.10x at once, 1.44x in float32).
func TestHugeTensorUpdateIsChunked(t *testing.T) {
	const rows = 32768
	table := int64(rows * 2048 * 4)
	chunked := analysis.Analyze(hugeUpdate(t, false, rows, Adam8bit().Done()))
	whole := analysis.Analyze(hugeUpdate(t, false, rows, Adam8bit().ChunkSize(0).Done()))
	limit := table + table/2 + 16*(DefaultChunkSize*8)
	t.Logf("temporaries: chunked %.0f MiB, at once %.0f MiB (limit %.0f MiB)", mib(chunked.PeakTempBytes), mib(whole.PeakTempBytes), mib(limit))
	if chunked.PeakTempBytes > limit {
		t.Errorf("the chunked update allocates %.0f MiB at its peak, more than the new table and codes and 16 chunk-sized float64 values (%.0f MiB)",
			mib(chunked.PeakTempBytes), mib(limit))
	}
	if testkit.XLA() == nil {
		return
	}
	p := hugeUpdate(t, true, rows, Adam8bit().Done())
	estimate := analysis.Analyze(p)
	compiled, err := analysis.CompileProgram(p)
	if err != nil {
		t.Fatal(err)
	}
	ratio := float64(estimate.PeakBytes) / float64(compiled.TotalBytes())
	t.Logf("XLA: estimate %.0f MiB, compiled %.0f MiB (temporaries %.0f MiB): %.2fx", mib(estimate.PeakBytes), mib(compiled.TotalBytes()), mib(compiled.TemporaryBytes), ratio)
	if ratio > 1.3 {
		t.Errorf("the estimate is %.2fx XLA's compiled figure, want at most 1.3x", ratio)
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
