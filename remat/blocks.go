package remat

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// blocksParam is the context hyperparameter that holds the blocks SetBlocks names.
const blocksParam = "remat_blocks"

// namedBlocks is what SetBlocks stores on a scope.
type namedBlocks struct {
	names  []string
	config Config
}

// SetBlocks names the kinds of block (the names a model gives Block) that are rematerialized
// below ctx's scope, with config's policy: the trainer's way to apply remat to a model it does not
// know, and the user's way to switch it per run. No names switches it off.
//
//	remat.SetBlocks(ctx, remat.With(remat.NothingSaveable), "block")
func SetBlocks(ctx *context.Context, config Config, names ...string) {
	ctx.SetParam(blocksParam, namedBlocks{names: slices.Clone(names), config: config})
}

// Block runs fn(ctx, inputs) as the block kind name: rematerialized (CheckpointCtx, with the
// policy SetBlocks gave) when SetBlocks named it on ctx's scope or above, plainly otherwise. A model
// marks its blocks with it once, and the choice of what to rematerialize stays with the run.
//
//	for i := range layers {
//		c := ctx.In(fmt.Sprintf("block_%d", i))
//		x = graph.Add(x, remat.Block(c, "block", residualBranch, x)[0])
//	}
func Block(ctx *context.Context, name string, fn func(ctx *context.Context, inputs []*graph.Node) []*graph.Node,
	inputs ...*graph.Node) []*graph.Node {
	if name == "" {
		panic(fmt.Errorf("remat.Block: the block needs a name (the kind SetBlocks selects, e.g. \"block\")"))
	}
	blocks := context.GetParamOr(ctx, blocksParam, namedBlocks{})
	if !slices.Contains(blocks.names, name) {
		return fn(ctx, inputs)
	}
	return blocks.config.CheckpointCtx(ctx, fn, inputs...)
}
