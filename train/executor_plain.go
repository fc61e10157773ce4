package train

import (
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/platform"
)

// The mode "none" (OffloadNone): the whole step on the device, or on several (Config.Devices)
// through XLA's SPMD partitioner (executor_spmd.go).
func init() {
	RegisterMode(OffloadNone.String(), Mode{Check: noBudget, New: func(t *Trainer) Executor {
		if t.Config.Devices.Distributed() {
			return &spmdExecutor{t: t}
		}
		return &plainExecutor{t: t}
	}})
}

// plainExecutor runs the whole step (StepFn) as one program on the backend's first device, with
// the variables it updates donated to their new values (platform.AliasUpdatedState).
type plainExecutor struct {
	t    *Trainer
	exec *context.Exec
}

func (e *plainExecutor) DeviceStep() accum.StepFn { return e.t.StepFn() }

func (e *plainExecutor) Run(batch []*tensors.Tensor) ([]*tensors.Tensor, *graph.Graph, error) {
	if e.exec == nil {
		exec, err := context.NewExec(e.t.Backend, e.t.Ctx, platform.AliasUpdatedState(e.t.StepFn()))
		if err != nil {
			return nil, nil, err
		}
		e.exec = exec.WithName(StepName) // XLA's module name: onegpu compare finds the step's HLO by it
	}
	return e.exec.ExecWithGraph(args(batch)...)
}

func (e *plainExecutor) Stats() Stats { return nil }

func (e *plainExecutor) Close() {
	if e.exec != nil {
		e.exec.Finalize()
		e.exec = nil
	}
}
