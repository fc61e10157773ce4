package train

import (
	"fmt"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
)

// Staged is a Model whose loss is a sequence of stages: an embedding stage (a micro-batch to the
// first block's input), Blocks identical blocks (x to x, each with its own variables under its
// own scope, BlockScope(i)), and a head stage (the last block's output and the micro-batch to the
// loss and metrics). Its Loss must be exactly
//
//	x := m.EmbedStage(ctx, batch)
//	for i := range m.Blocks() {
//		x = m.BlockStage(ctx.In(...the elements of m.BlockScope(i)...), x, batch)
//	}
//	return m.HeadStage(ctx, x, batch)
//
// so that a run streamed stage by stage (Config.Offload OffloadParams) computes the same math as a
// whole step: models.GPT and models.Llama write their Loss that way. Every block must create the
// same variables (names relative to its scope, shapes, dtypes): one compiled program serves all.
// The embedding and head stages may share variables (tied embeddings): their gradients add up.
type Staged interface {
	Model
	// EmbedStage maps a micro-batch (Loss's inputs) to the first block's input.
	EmbedStage(ctx *context.Context, batch []*graph.Node) *graph.Node
	// Blocks is the number of blocks.
	Blocks() int
	// BlockScope is the scope of block i's variables, relative to the context Loss receives, its
	// elements separated by "/" ("block_3" for the GPT's fourth block, "model/layers/3" for the
	// Llama's).
	BlockScope(i int) string
	// BlockStage is one block, ctx at its scope: its output has x's shape and dtype. batch is the
	// micro-batch, which a block may read but not differentiate (packed documents' segments and
	// positions: models.Llama.Packed).
	BlockStage(ctx *context.Context, x *graph.Node, batch []*graph.Node) *graph.Node
	// HeadStage maps the last block's output and the micro-batch to the loss and metrics, as Loss
	// returns them.
	HeadStage(ctx *context.Context, x *graph.Node, batch []*graph.Node) (accum.Mean, []accum.Mean)
}

// inScopePath returns ctx in the relative scope path (elements separated by "/": a BlockScope).
func inScopePath(ctx *context.Context, path string) *context.Context {
	for _, element := range strings.Split(path, context.ScopeSeparator) {
		ctx = ctx.In(element)
	}
	return ctx
}

// checkStreamed refuses what a streamed run (OffloadParams) cannot do: a model that is not
// Staged, master weights other than float32, several devices.
func (c Config) checkStreamed() error {
	if _, ok := c.Model.(Staged); !ok {
		return fmt.Errorf("Config.Offload params: %s does not run as stages (train.Staged: an embedding, blocks, a head); "+
			"stream a GPT or a Llama, or use Config.Offload optimizer", describeModel(c.Model))
	}
	if p := c.Policy.Param; p != dtypes.InvalidDType && p != dtypes.Float32 {
		return fmt.Errorf("Config.Offload params with %s parameters: the host keeps float32 master weights; use Config.Policy params=float32,...", p)
	}
	if p := c.Policy.Compute; p == dtypes.Float64 {
		return fmt.Errorf("Config.Offload params with float64 compute: the streamed loss is summed in float32; use float32 or bfloat16 compute")
	}
	if c.DeviceBudget < 0 {
		return fmt.Errorf("device budget %d bytes: give a positive budget, or 0 for none", c.DeviceBudget)
	}
	if c.Devices.Distributed() {
		return fmt.Errorf("Config.Offload params with Config.Devices.Count %d: the streamed step feeds one device; use Config.Devices.Count 1", c.Devices.Count)
	}
	return nil
}
