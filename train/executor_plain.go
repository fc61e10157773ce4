package train

import (
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/platform"
)

// plainExecutor runs the whole step (StepFn) as one program on the backend's first device, with
// the variables it updates donated to their new values (platform.AliasUpdatedState).
type plainExecutor struct {
	t    *Trainer
	exec *context.Exec
}

func (e *plainExecutor) deviceStep() accum.StepFn { return e.t.StepFn() }

func (e *plainExecutor) run(batch []*tensors.Tensor) ([]*tensors.Tensor, *graph.Graph, error) {
	if e.exec == nil {
		exec, err := context.NewExec(e.t.Backend, e.t.Ctx, platform.AliasUpdatedState(e.t.StepFn()))
		if err != nil {
			return nil, nil, err
		}
		e.exec = exec.WithName(StepName) // XLA's module name: onegpu compare finds the step's HLO by it
	}
	return e.exec.ExecWithGraph(args(batch)...)
}

func (e *plainExecutor) traffic() OffloadStats { return OffloadStats{} }

func (e *plainExecutor) close() {
	if e.exec != nil {
		e.exec.Finalize()
		e.exec = nil
	}
}
