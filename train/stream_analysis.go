package train

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
)

// StreamPrograms builds, for analysis, the device programs of the streamed step
// (Config.Offload OffloadParams) on the trainer's backend, in a fresh context, with the graph
// functions the streamed executor runs: the embedding's forward and backward, one block's
// forward and backward (which every block runs) and the head's (loss and gradients in one), at
// the run's micro-batch size. Nothing runs and the trainer's state is untouched: compile them
// with analysis.CompileProgram for XLA's memory account and the compile time of a streamed step,
// which does not grow with the number of blocks.
func (t *Trainer) StreamPrograms() ([]*analysis.Program, error) {
	m, ok := t.Config.Model.(Staged)
	if !ok {
		return nil, fmt.Errorf("stream programs: %s does not run as stages (train.Staged)", describeModel(t.Config.Model))
	}
	rows := t.Config.Batch / t.Config.microBatches()
	s := &streamExecutor{t: t, model: m, norm: lossNorm(rows)}
	ctx := context.New().Checked(false)
	for _, p := range t.paramsToCopy() {
		ctx.SetParam(p.key, p.value)
	}
	inputs := t.Config.Model.InputShapes(rows)
	var x shapes.Shape
	embedFwd, embedBwd := s.programs(embedStage)
	blockFwd, blockBwd := s.programs(blockStage)
	_, head := s.programs(headStage)
	build := func(name string, in []shapes.Shape, fn func(ctx *context.Context, in []*graph.Node) []*graph.Node) (*analysis.Program, error) {
		p, err := analysis.ContextProgram(t.Backend, ctx, name, in, fn)
		if err != nil {
			return nil, fmt.Errorf("stream programs: %s: %w", name, err)
		}
		return p, nil
	}
	var programs []*analysis.Program
	p, err := build("stream_embed_forward", inputs, embedFwd)
	if err != nil {
		return nil, err
	}
	x = p.Outputs[0].Shape()
	programs = append(programs, p)
	for _, b := range []struct {
		name   string
		inputs []shapes.Shape
		fn     func(ctx *context.Context, in []*graph.Node) []*graph.Node
	}{
		{"stream_embed_backward", append(append([]shapes.Shape{}, inputs...), x), embedBwd},
		{"stream_block_forward", append([]shapes.Shape{x}, inputs...), blockFwd},
		{"stream_block_backward", append([]shapes.Shape{x, x}, inputs...), blockBwd},
		{"stream_head", append([]shapes.Shape{x}, inputs...), head},
	} {
		if p, err = build(b.name, b.inputs, b.fn); err != nil {
			for _, done := range programs {
				done.Graph.Finalize()
			}
			return nil, err
		}
		programs = append(programs, p)
	}
	return programs, nil
}
