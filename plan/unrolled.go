package plan

import (
	"fmt"

	"github.com/onegpu/onegpu/train"
)

// MaxUnrolledBlocks bounds how many copies of the model's blocks one train step holds: GoMLX
// v0.26.0 has no loops, so the step unrolls every micro-batch through every layer, and building
// it takes time growing with the square of that count (remat's gradients walk the graph built so
// far). Measured with `onegpu memory` on two cores: 48 blocks (the tutorial's GPT, 4
// micro-batches) build in 1 s, 192 blocks (12 layers × 16, or 2 × 96) in about 20 s of CPU;
// 2048 blocks (2 × 1024) did not finish in minutes. 256 keeps every step onegpu builds under
// about half a minute, and holds the tutorial's grids (plan tries up to 16 micro-batches).
const MaxUnrolledBlocks = 256

// UnrolledBlocks returns how many copies of the model's blocks c's train step holds: its
// micro-batches times the model's layers (NumLayers, for a model that has the method: the GPT;
// a model without it counts as one layer).
func UnrolledBlocks(c train.Config) int64 {
	layers := int64(1)
	if m, ok := c.Model.(interface{ NumLayers() int }); ok {
		layers = int64(max(m.NumLayers(), 1))
	}
	return int64(max(c.MicroBatches, 1)) * layers
}

// CheckUnrolled returns an error, naming the micro-batches and the largest count that works, when
// c's step would unroll more than MaxUnrolledBlocks blocks: a step that would take minutes or
// hours to build, before any check of its memory could answer.
func CheckUnrolled(c train.Config) error {
	blocks := UnrolledBlocks(c)
	if blocks <= MaxUnrolledBlocks {
		return nil
	}
	layers := blocks / int64(max(c.MicroBatches, 1))
	layersText := fmt.Sprintf("%d layers", layers)
	if layers == 1 {
		layersText = "1 layer"
	}
	return fmt.Errorf("%d micro-batches × %s: the step would unroll %d blocks (GoMLX v0.26 has no loops, and building takes time "+
		"growing with their square); onegpu builds at most %d: use at most %d micro-batches for this model",
		c.MicroBatches, layersText, blocks, MaxUnrolledBlocks, MaxUnrolledBlocks/layers)
}
