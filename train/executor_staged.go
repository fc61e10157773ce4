package train

import (
	"fmt"
	"io"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/analysis"
)

// The staged step (Config.Offload OffloadStaged): the streamed step's programs (stagePrograms:
// one forward and one backward program per kind of stage, a block's shared by every block, the
// whole-block remat left out since the backward program recomputes the block from its kept input)
// run with every weight, gradient and optimizer state on the device, where a whole step keeps
// them: nothing crosses the bus but the batch and the step's scalars. A step runs the embedding
// and every block forward, a stage at a time, each micro-batch through the stage, keeping each
// stage's inputs; then the head (the loss and its cotangent) and every block in reverse, each
// recomputed and differentiated per micro-batch, its float32 gradients summed over the
// micro-batches; then the embedding.
//
// The optimizer updates on the device too, with the host update's engine (optim/hostengine with
// Config.OnDevice: the run's chain split across stages, Chain.Split): one update program per kind
// of stage, a block's compiled for block 0 and run for every block with its weights and optimizer
// state bound in block 0's place (hostengine.StageLike). Without a loss scale or a clip a stage
// updates as soon as its gradients are complete (its backward program is its last use), so the
// device holds one stage's gradients at a time; with them every gradient waits for the step-wide
// check (the loss scale's finite flag, the global norm: computed per stage where the gradients
// are, hostengine.Step.Check), as a whole step's update does.
//
// Compile time does not grow with the depth: every program holds one block of one micro-batch.
// The math is the whole step's (the same loss normalization, loss scale, float32 accumulation
// over micro-batches and update); dropout draws the same masks with one micro-batch, other masks
// of the same distribution otherwise. The variables are the whole step's, so checkpoints cross
// modes (whole, staged, streamed).

// OffloadStaged runs the step a stage at a time with the whole state on the device
// (executor_staged.go): compile time flat in depth, the whole step's math and memory or less.
// The model must be Staged (models.GPT, models.Llama); one device only.
const OffloadStaged Offload = "staged"

func init() {
	RegisterMode(OffloadStaged.String(), Mode{New: func(t *Trainer) Executor { return &stagedExecutor{t: t} }, Check: checkStaged,
		Stats: func() Stats { return &StagedStats{} }, Staged: true})
}

// checkStaged refuses what the staged step cannot do: a model that is not Staged, float64 compute
// (the stages sum the loss in float32), a device budget, several devices.
func checkStaged(c Config) error {
	if _, ok := c.Model.(Staged); !ok {
		return fmt.Errorf("Config.Offload staged: %s does not run as stages (train.Staged: an embedding, blocks, a head); "+
			"run a GPT or a Llama staged, or use Config.Offload none", describeModel(c.Model))
	}
	if c.Policy.Compute == dtypes.Float64 {
		return fmt.Errorf("Config.Offload staged with float64 compute: the stages sum the loss in float32; use float32 or bfloat16 compute")
	}
	if err := noBudget(c); err != nil {
		return err
	}
	if c.Devices.Distributed() {
		return fmt.Errorf("Config.Offload staged with Config.Devices.Count %d: the staged step runs on one device; use Config.Devices.Count 1", c.Devices.Count)
	}
	return nil
}

// StagedStats are a staged step's times and its largest device footprint.
type StagedStats struct {
	// DeviceSeconds is the time in the stages' programs; UpdateSeconds in the optimizer's (the
	// update programs, the gradients' partial results, the moving-average loss).
	DeviceSeconds float64 `json:"device_seconds"`
	UpdateSeconds float64 `json:"update_seconds"`
	// DevicePeakBytes is the largest device footprint of the step: at a program's run, the
	// variables (weights, optimizer state), the buffers the step holds (micro-batches, kept stage
	// inputs, cotangents, gradients) and what the program allocates besides its arguments by XLA's
	// account (outputs, temporaries, code; none on the embedded backend, which reports nothing).
	DevicePeakBytes int64 `json:"device_peak_bytes"`
	// GradientBytes is the most gradient bytes the step held at once: one stage's when the chain
	// has no step-wide part, all of them with a loss scale or a clip.
	GradientBytes int64 `json:"gradient_bytes"`
}

// Mean is the later steps' mean times and the largest footprint of all; s when there is no
// later step.
func (s *StagedStats) Mean(later []Stats) Stats {
	if len(later) == 0 {
		return s
	}
	m := meanOfLater(later, func(s *StagedStats) []*float64 { return []*float64{&s.DeviceSeconds, &s.UpdateSeconds} })
	m.DevicePeakBytes = s.DevicePeakBytes
	for _, l := range later {
		m.DevicePeakBytes = max(m.DevicePeakBytes, l.(*StagedStats).DevicePeakBytes)
	}
	return m
}

// WriteSummary writes the times of the stages and of the update, and the largest device
// footprint.
func (s *StagedStats) WriteSummary(w io.Writer) {
	fmt.Fprintf(w, "%-22s %.1f ms in the stages' programs, %.1f ms updating, on the device\n", "staged", 1e3*s.DeviceSeconds, 1e3*s.UpdateSeconds)
	fmt.Fprintf(w, "%-22s %s (gradients held at once: %s)\n", "largest device use", analysis.FormatBytes(s.DevicePeakBytes), analysis.FormatBytes(s.GradientBytes))
}

// stagedExecutor runs a staged step.
type stagedExecutor struct {
	t *Trainer
	// stageLayout holds the stage instances' variables; nil until start.
	*stageLayout
	embed, block, head *streamStage
	update             *stagedUpdate
	// resident are the bytes of the trainer's variables (on the device); compiled each program's
	// bytes besides its arguments by XLA's account, once known (-1: not XLA).
	resident int64
	compiled map[*graph.Graph]int64
	last     *StagedStats
}

// DeviceStep is the whole step's function (StepFn): the staged programs compute its math, on the
// same device.
func (e *stagedExecutor) DeviceStep() accum.StepFn { return e.t.StepFn() }

func (e *stagedExecutor) Stats() Stats {
	if e.last == nil {
		return nil
	}
	return e.last
}

// start creates the variables on the device, the update and the stages' programs.
func (e *stagedExecutor) start() error {
	t := e.t
	e.stageLayout = newStageLayout(t)
	e.compiled = map[*graph.Graph]int64{}
	if err := e.discover(); err != nil {
		return err
	}
	if err := t.Ctx.InitializeVariables(t.Backend, nil); err != nil {
		return fmt.Errorf("Config.Offload staged: initializing the weights: %w", err)
	}
	e.embed, e.block, e.head = e.newStage("embed", e.embedVars), e.newStage("block", e.blockVars[0]), e.newStage("head", e.headVars)
	for kind, st := range []*streamStage{e.embed, e.block, e.head} {
		if err := e.compile(st, stageKind(kind)); err != nil {
			return err
		}
	}
	var err error
	if e.update, err = newStagedUpdate(e); err != nil {
		return fmt.Errorf("Config.Offload staged: the update: %w", err)
	}
	for v := range t.Ctx.IterVariables() {
		if v.HasValue() {
			e.resident += int64(v.Shape().Memory())
		}
	}
	return nil
}

// Run runs one staged step.
func (e *stagedExecutor) Run(batch []*tensors.Tensor) ([]*tensors.Tensor, *graph.Graph, error) {
	if e.update == nil {
		if err := e.start(); err != nil {
			e.Close()
			return nil, nil, err
		}
	}
	p := &stagedPass{e: e, k: e.t.Config.microBatches()}
	defer p.free()
	if err := p.forward(batch); err != nil {
		return nil, nil, err
	}
	if err := p.backward(); err != nil {
		return nil, nil, err
	}
	return p.finish()
}

// bind gives st's template variables the values of sources (the trainer's tensors themselves,
// on the device: nothing is copied; the random state is set per call).
func (e *stagedExecutor) bind(st *streamStage, sources []*context.Variable) error {
	for j, src := range sources {
		if src == e.rngVar() {
			continue
		}
		value, err := src.Value()
		if err != nil {
			return err
		}
		if st.vars[j] == nil {
			err = e.setTemplate(st, j, src, value)
		} else {
			err = st.vars[j].SetValuePreservingOld(value) // the trainer's variable owns the previous one
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (e *stagedExecutor) Close() {
	for _, st := range []*streamStage{e.embed, e.block, e.head} {
		if st == nil {
			continue
		}
		for _, exec := range []*context.Exec{st.fwd, st.bwd} {
			if exec != nil {
				exec.Finalize()
			}
		}
		if st.add != nil {
			st.add.Finalize()
		}
	}
	if e.update != nil {
		e.update.close()
	}
	e.embed, e.block, e.head, e.update, e.stageLayout = nil, nil, nil, nil, nil
}
