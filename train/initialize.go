package train

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/platform"
)

// Initialize creates the train step's variables and initializes them from the config's seed,
// without running (or compiling) the step: afterwards the weights are those the first Step will
// update, ready for Export. It is optional (the first Step initializes what is missing) and must
// come before it.
//
// The step's graph is built once for this, on the trainer's context: GoMLX v0.26.0's
// context.Exec.PreCompile cannot be used, because it donates the buffers of the variables the step
// updates and resets them without running the step.
func (t *Trainer) Initialize() error {
	if t.started {
		return fmt.Errorf("initialize: the trainer has already run a step")
	}
	if err := t.prepareBase(); err != nil {
		return err
	}
	p, err := analysis.ContextProgram(t.Backend, t.Ctx, "initialize", t.StepShapes(), t.StepFn())
	if err != nil {
		return fmt.Errorf("building the train step: %w", err)
	}
	p.Graph.Finalize()
	if err := t.Ctx.InitializeVariables(t.Backend, nil); err != nil {
		return fmt.Errorf("initializing the variables: %w", err)
	}
	// The step's graph finds the variables instead of creating them, as after a checkpoint.
	t.Ctx = t.Ctx.Checked(false)
	return nil
}

// StepCompiled runs one train step like Step and also returns XLA's memory account of the compiled
// step (see graph.CompiledMemoryOf): that of the executable that runs, not of a second
// compilation. The account is nil on a backend that is not XLA (the embedded one compiles nothing).
func (t *Trainer) StepCompiled(batch []*tensors.Tensor) (StepMetrics, *analysis.CompiledMemory, error) {
	outs, g, err := t.run(batch)
	if err != nil {
		return StepMetrics{}, nil, err
	}
	m := t.metricsOf(outs)
	if t.Backend.Name() != platform.XLABackendName {
		return m, nil, nil
	}
	mem, err := analysis.CompiledMemoryOf(g)
	if err != nil {
		return m, nil, err
	}
	return m, &mem, nil
}
