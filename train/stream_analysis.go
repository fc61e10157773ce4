package train

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/analysis"
)

// StreamedPrograms are the device programs of a streamed step (Config.Offload OffloadParams),
// built for analysis by the code that builds the ones the streamed executor compiles
// (stagePrograms), in a fresh context: the planner's streamed estimate analyzes them, and
// analysis.CompileProgram gives XLA's account and compile time of a streamed step, which does not
// grow with the number of blocks. Finalize releases them.
type StreamedPrograms struct {
	// Ctx holds the stages' variables: the embedding's, block 0's (every block has the same) and
	// the head's.
	Ctx *context.Context
	// Stages are the embedding, a block and the head, in that order.
	Stages []StreamedStage
	// Input is a block's input, one micro-batch's.
	Input shapes.Shape
}

// StreamedStage is one kind of stage of a streamed step.
type StreamedStage struct {
	// Name is "embed", "block" or "head"; Count how many of it the model has.
	Name  string
	Count int
	// Programs are its forward then its backward program; the head has one, loss and gradients.
	Programs []*analysis.Program
	// Trainable are the trainable variables its programs use, in Ctx, in the order of the
	// gradients its backward program returns; Frozen the frozen weights they read (a LoRA run's
	// base: graph's analysis.IsFrozen), which cross to the device with the stage and train not.
	Trainable, Frozen []*context.Variable
	// Narrow are those of Trainable and Frozen that cross the bus in the compute dtype (bfloat16
	// copies of float32 masters, stream_narrow.go): those its first program (the forward; the
	// head's loss and gradients) reads only rounded to the compute dtype, the executor's rule
	// (narrowVariables) on the graph it asks (the stage's forward function). The backward programs
	// read them through remat's exact barrier (x + -0.0) before the same rounding.
	Narrow map[*context.Variable]bool
}

// All lists every stage's programs in the order the step first runs them: the embedding's
// forward and backward, the block's, the head's.
func (p *StreamedPrograms) All() []*analysis.Program {
	var all []*analysis.Program
	for _, st := range p.Stages {
		all = append(all, st.Programs...)
	}
	return all
}

// Finalize releases the programs' graphs.
func (p *StreamedPrograms) Finalize() {
	for _, prog := range p.All() {
		prog.Graph.Finalize()
	}
}

// StreamedPrograms builds the streamed step's device programs for analysis on the trainer's
// backend at the run's micro-batch size. Nothing runs and the trainer's state is untouched.
func (t *Trainer) StreamedPrograms() (*StreamedPrograms, error) {
	m, ok := t.Config.Model.(Staged)
	if !ok {
		return nil, fmt.Errorf("streamed programs: %s does not run as stages (train.Staged)", describeModel(t.Config.Model))
	}
	rows := t.Config.Batch / t.Config.microBatches()
	s := newStageLayout(t)
	ctx := context.New().Checked(false)
	for _, p := range t.paramsToCopy() {
		ctx.SetParam(p.key, p.value)
	}
	out := &StreamedPrograms{Ctx: ctx, Stages: []StreamedStage{{Name: "embed", Count: 1}, {Name: "block", Count: m.Blocks()}, {Name: "head", Count: 1}}}
	inputs := t.Config.Model.InputShapes(rows)
	build := func(sp stageProgram) (*analysis.Program, error) {
		p, err := analysis.ContextProgram(t.Backend, ctx, sp.name, sp.inputs, sp.fn)
		if err != nil {
			out.Finalize()
			return nil, fmt.Errorf("streamed programs: %s: %w", sp.name, err)
		}
		return p, nil
	}
	// The embedding's forward (the first program) gives a block's input, which the others take.
	first, err := build(s.stagePrograms(inputs, shapes.Shape{})[0])
	if err != nil {
		return nil, err
	}
	out.Input = first.Outputs[0].Shape()
	for i, sp := range s.stagePrograms(inputs, out.Input) {
		p := first
		if i > 0 {
			if p, err = build(sp); err != nil {
				return nil, err
			}
		}
		st := &out.Stages[sp.kind]
		st.Programs = append(st.Programs, p)
		if sp.backward {
			st.Trainable = accum.TrainableVariables(ctx, p.Graph)
		}
	}
	for i := range out.Stages { // the base is frozen once a backward program is built
		st := &out.Stages[i]
		for v := range ctx.IterVariables() {
			if analysis.IsFrozen(ctx, v) && slices.ContainsFunc(st.Programs, func(p *analysis.Program) bool { return v.InUseByGraph(p.Graph) }) {
				st.Frozen = append(st.Frozen, v)
			}
		}
		st.Narrow = narrowVariables(st.Programs[0].Graph, append(slices.Clone(st.Trainable), st.Frozen...), t.Config.Policy.Compute)
	}
	return out, nil
}
