package train

import "fmt"

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
// a model without it counts as one layer). A step run a stage at a time (Mode.Staged: the
// streamed and the staged modes) holds one: each of its programs is one stage of one micro-batch.
func (c Config) UnrolledBlocks() int64 {
	if c.Offload.staged() {
		return 1
	}
	layers := int64(1)
	if m, ok := c.Model.(interface{ NumLayers() int }); ok {
		layers = int64(max(m.NumLayers(), 1))
	}
	return int64(c.microBatches()) * layers
}

// UnrolledError is Config.Validate's error for a step of more than MaxUnrolledBlocks blocks: one
// that would take minutes or hours to build, before any check of its memory could answer.
type UnrolledError struct {
	MicroBatches int
	Layers       int64
	// Most is the largest number of micro-batches that works for this model.
	Most int64
}

func (e *UnrolledError) Error() string {
	layers := fmt.Sprintf("%d layers", e.Layers)
	if e.Layers == 1 {
		layers = "1 layer"
	}
	if e.Most == 0 {
		return fmt.Sprintf("%s: the step would unroll %d blocks even with one micro-batch (GoMLX v0.26 has no loops, and building takes "+
			"time growing with their square); onegpu builds at most %d: run the model streamed, one layer at a time (Offload: OffloadParams)",
			layers, e.Layers, MaxUnrolledBlocks)
	}
	return fmt.Sprintf("%d micro-batches × %s: the step would unroll %d blocks (GoMLX v0.26 has no loops, and building takes time "+
		"growing with their square); onegpu builds at most %d: use at most %d micro-batches for this model",
		e.MicroBatches, layers, int64(e.MicroBatches)*e.Layers, MaxUnrolledBlocks, e.Most)
}

// checkUnrolled returns an *UnrolledError when c's step would unroll more than MaxUnrolledBlocks
// blocks.
func (c Config) checkUnrolled() error {
	blocks := c.UnrolledBlocks()
	if blocks <= MaxUnrolledBlocks {
		return nil
	}
	layers := blocks / int64(c.microBatches())
	return &UnrolledError{MicroBatches: c.microBatches(), Layers: layers, Most: MaxUnrolledBlocks / layers}
}
