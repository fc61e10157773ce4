package blocks_test

import (
	"fmt"
	"os"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/blocks"
	"github.com/onegpu/onegpu/platform"
	"github.com/onegpu/onegpu/remat"
)

// What `onegpu memory --remat mlp,attn --remat-policy dots_with_no_batch_dims_saveable` reports
// for a two-block model.
func ExampleAnalyze() {
	backend, err := platform.NewBackend("go")
	if err != nil {
		panic(err)
	}
	spec, err := blocks.ParseSpec("mlp,attn")
	if err != nil {
		panic(err)
	}
	policy, err := remat.ParsePolicy("dots_with_no_batch_dims_saveable")
	if err != nil {
		panic(err)
	}
	c := blocks.Config{Batch: 2, Seq: 64, Width: 64, Heads: 4, Blocks: 2}
	a, err := blocks.Analyze(backend, c, spec, remat.With(policy))
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d parameters; backward keeps %s in blocks\n", c.Parameters(), analysis.FormatBytes(a.Residuals.BlockBytes))
	_ = a.Residuals.WriteSummary(os.Stdout)
	// Output:
	// 99584 parameters; backward keeps 544.0 KiB in blocks
	// BLOCK           POLICY                            RESIDUALS  BYTES
	// /block_00/attn  dots_with_no_batch_dims_saveable  3          96.0 KiB
	// /block_00/mlp   dots_with_no_batch_dims_saveable  2          160.0 KiB
	// /block_01/attn  dots_with_no_batch_dims_saveable  4          128.0 KiB
	// /block_01/mlp   dots_with_no_batch_dims_saveable  2          160.0 KiB
	//
	// POLICY                            BLOCKS  BYTES
	// dots_with_no_batch_dims_saveable  4       544.0 KiB
	// all blocks                        4       544.0 KiB
	// outside blocks                            32.0 KiB
}
