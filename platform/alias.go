package platform

import (
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/internal/gomlxcompat"
)

// AliasUpdatedState returns step for context.NewExec with one addition: on XLA, the compiled
// program declares every variable the step updates (parameters, optimizer moments, step
// counters, loss scales, accumulators) as an input/output alias, so that XLA writes each new
// value over the buffer of the old one, as JAX does with donate_argnums. context.Exec already
// donates those buffers; without the alias XLA cannot reuse them and holds the whole state twice.
//
// Results are bit-identical with and without aliasing. On the embedded backend nothing changes.
// GoMLX v0.26.0 has no API for this: internal/gomlxcompat writes the alias attribute
// (tf.aliasing_output, as JAX lowers donation) on the StableHLO entry function's arguments.
//
//	exec, err := context.NewExec(backend, ctx, AliasUpdatedState(step))
func AliasUpdatedState(step func(ctx *context.Context, inputs []*graph.Node) []*graph.Node) func(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
	return func(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
		outputs := step(ctx, inputs)
		if len(inputs) == 0 {
			return outputs
		}
		g := inputs[0].Graph()
		if err := gomlxcompat.AliasOutputs(g, gomlxcompat.ContextExecAliases(ctx, g)); err != nil {
			panic(err)
		}
		return outputs
	}
}
