package train

import (
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/accum"
)

// An executor runs a trainer's step on its hardware. The trainer picks one from its Config the
// first time it needs one (newExecutor) and keeps it until Close:
//
//   - plainExecutor (executor_plain.go): the whole step on one device of the backend;
//   - spmdExecutor (executor_spmd.go): Config.Devices.Count > 1 devices, the batch split along
//     axis 0 and the state replicated or sharded by XLA's SPMD partitioner;
//   - offloadExecutor (executor_offload.go): Config.Offload OffloadOptimizer, the loss and gradients
//     on the device, the optimizer's state and update in host memory;
//   - streamExecutor (executor_stream.go): Config.Offload OffloadParams, the master weights and
//     the optimizer's state in host memory, the model streamed through the device a stage at a
//     time.
//
// Each builds its programs from the trainer's step functions (StepFn, and for a split step
// deviceGradientsFn and the host update, hostupdate.go), compiles them on its first run and keeps the training state
// in the trainer's context, so checkpoints, resume and the loop are the same for all. A new way to
// run the step is one more type in its own file and one more case in newExecutor.
type executor interface {
	// deviceStep is the graph function the trainer's backend runs in one step: what
	// Trainer.Program builds for analysis.
	deviceStep() accum.StepFn
	// run runs one step on batch, compiling first if needed, and returns StepFn's outputs (loss,
	// metrics, count, finite flag, moving-average loss) and the graph the backend ran.
	run(batch []*tensors.Tensor) ([]*tensors.Tensor, *graph.Graph, error)
	// traffic is the last step's traffic between host and device memory; zero when nothing crossed.
	traffic() OffloadStats
	// close releases the compiled programs and what the executor holds besides the context.
	close()
}

// newExecutor returns the executor Config asks for (Validate has refused the combinations none
// runs).
func newExecutor(t *Trainer) executor {
	switch {
	case t.Config.Offload == OffloadOptimizer:
		return &offloadExecutor{t: t}
	case t.Config.Offload == OffloadParams:
		return &streamExecutor{t: t}
	case t.Config.Devices.Distributed():
		return &spmdExecutor{t: t}
	}
	return &plainExecutor{t: t}
}

// executor returns the trainer's executor, creating it on first use.
func (t *Trainer) executor() executor {
	if t.exec == nil {
		t.exec = newExecutor(t)
	}
	return t.exec
}

// args turns a batch into executor arguments, one tensor each.
func args(batch []*tensors.Tensor) []any {
	out := make([]any, len(batch))
	for i, b := range batch {
		out[i] = b
	}
	return out
}
