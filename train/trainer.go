package train

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/panics"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/optim"
)

// Trainer trains a model on one backend, one step at a time. Its state — weights, optimizer
// moments, step counter, loss scale, random state — lives in Ctx, so checkpoints capture it all.
type Trainer struct {
	// Config is the run; New validated it (and read MicroBatches 0 as 1 and the zero Policy as
	// float32).
	Config  Config
	Backend backends.Backend
	Ctx     *context.Context
	// BaseSource says where a LoRA run's frozen base comes from, for its checkpoints' records and
	// messages (e.g. "Hugging Face folder /models/llama-3.2-1b"): set it with the weights
	// (SetWeights). Empty: "weights set by SetWeights", or the seed's when none were set.
	BaseSource string
	// base is the LoRA run's base once made (prepareBase); nil before, and without LoRA.
	base *base
	// embed says whether the input embedding is gathered on the host (hostembed.go), once known.
	embed *hostEmbedding
	// exec runs the step (see executor); created on first use, released by Close.
	exec Executor
	// started is set once a step has been compiled and run (Initialize must come before).
	started bool
	// eval runs Evaluate's program; created on first use, released by Close.
	eval *context.Exec
}

// New validates config (Config.Validate) and prepares a trainer of config.Model whose variables
// are initialized from config.Seed on the first step. The loop (Run), checkpoints and resume,
// Program and the progress lines work alike for the tutorial's models and a model of your own.
// It returns an error, not a panic, for a config that cannot work or a policy the backend cannot
// compute.
func New(backend backends.Backend, config Config) (*Trainer, error) {
	if backend == nil {
		return nil, fmt.Errorf("train.New: no backend (nil): give one, e.g. graph.NewBackend(\"go\") (see graph.ResolveBackend)")
	}
	if err := config.Validate(); err != nil {
		return nil, err
	}
	config.MicroBatches, config.Policy = config.microBatches(), config.policy()
	if err := config.Policy.Validate(backend); err != nil {
		return nil, err
	}
	if err := accum.CheckSplit(config.MicroBatches, config.Model.InputShapes(config.Batch)...); err != nil {
		return nil, err
	}
	if err := config.Devices.CheckBackend(backend); err != nil {
		return nil, err
	}
	ctx := context.New()
	if err := ctx.SetRNGStateFromSeed(int64(config.Seed)); err != nil {
		return nil, err
	}
	ctx.SetParam(layers.ParamSeed, int64(config.Seed)) // the initial weights' seed
	return &Trainer{Config: config, Backend: backend, Ctx: ctx}, nil
}

// InputShapes are the shapes of one batch, in the order the step takes them.
func (t *Trainer) InputShapes() []shapes.Shape { return t.Config.Model.InputShapes(t.Config.Batch) }

// DeviceStepFn is the part of the step that runs on the trainer's backend: StepFn itself, or with
// the optimizer offloaded the loss, metrics and count, with each parameter's float32 gradient
// written over the parameter (the device holds the parameters or their gradients, never both, and
// no optimizer state). Give it to analysis.ContextProgram to analyze what the device holds.
func (t *Trainer) DeviceStepFn() accum.StepFn { return t.executor().DeviceStep() }

// StepName names the train step's graph, and so XLA's HLO module of it.
const StepName = "train_step"

// Program builds the train step for analysis (analysis.Analyze, analysis.CompileProgram) on the trainer's
// backend, in a fresh context: nothing runs and the trainer's own state is untouched. With the
// optimizer offloaded it is the backend's part of the step (DeviceStepFn).
func (t *Trainer) Program() (*analysis.Program, error) {
	ctx := context.New()
	return analysis.ContextProgram(t.Backend, ctx, StepName, t.StepShapes(), t.DeviceStepFn())
}

// StepMetrics are one step's results.
type StepMetrics struct {
	// Step counts the steps taken, this one included: the batches trained on, whether their
	// update was applied or skipped (Trainer.Steps).
	Step     int     `json:"step"`
	Loss     float64 `json:"loss"`     // mean loss over the batch (cross-entropy for gpt and mlp)
	Accuracy float64 `json:"accuracy"` // share of predictions equal to the label (models with an "accuracy" metric)
	Count    float64 `json:"count"`    // what the loss averages over: tokens (gpt) or examples
	// Metrics are the model's metrics by name (Model.MetricNames).
	Metrics map[string]float64 `json:"metrics,omitempty"`
	// Skipped says that the step's gradients were not finite: nothing was updated.
	Skipped bool `json:"skipped,omitempty"`
	// MeanLoss is the exponential moving average of the loss (MeanLossDecay) over the steps that
	// were not skipped.
	MeanLoss float64 `json:"mean_loss"`
}

// Step runs one train step on batch (the tensors Data.Batch returns) and returns its metrics.
// The first call builds and compiles the step's graph and initializes the variables. A batch of
// other shapes than InputShapes is an error naming both, before anything runs.
func (t *Trainer) Step(batch []*tensors.Tensor) (StepMetrics, error) {
	outs, _, err := t.run(batch)
	if err != nil {
		return StepMetrics{}, err
	}
	return t.metricsOf(outs), nil
}

// run executes the step on batch with the trainer's executor, compiling it first if needed, and
// returns its outputs and the graph the device ran.
func (t *Trainer) run(batch []*tensors.Tensor) ([]*tensors.Tensor, *graph.Graph, error) {
	if err := t.checkBatch(batch); err != nil {
		return nil, nil, err
	}
	var (
		outs []*tensors.Tensor
		g    *graph.Graph
	)
	if !t.started {
		if err := t.checkPolicyReaches(); err != nil {
			return nil, nil, err
		}
		if err := t.prepareBase(); err != nil {
			return nil, nil, err
		}
	}
	batch, err := t.embedOnHost(batch)
	if err != nil {
		return nil, nil, err
	}
	before := t.Steps()
	t.started = true
	err = panics.Catch(func() {
		var err error
		if outs, g, err = t.executor().Run(batch); err != nil {
			panic(err)
		}
	})
	if err != nil {
		return nil, nil, fmt.Errorf("train step %d: %w", before+1, err)
	}
	if after := t.Steps(); after != before+1 {
		return nil, nil, fmt.Errorf("train step %d: the step count went from %d to %d: the optimizer %s must count each update it applies "+
			"(optimizers.IncrementGlobalStepGraph, as GoMLX's optimizers do), which the schedule and the loop read", before+1, before, after, t.Config.optimizer())
	}
	return outs, g, nil
}

// checkBatch returns an error unless batch has the shapes of InputShapes, in order.
func (t *Trainer) checkBatch(batch []*tensors.Tensor) error {
	want := t.InputShapes()
	if len(batch) != len(want) {
		return fmt.Errorf("train step %d: a batch of %d tensors, the model takes %d (%v)", t.Steps()+1, len(batch), len(want), want)
	}
	for i, b := range batch {
		if b == nil {
			return fmt.Errorf("train step %d: input #%d of the batch is nil, the model takes %s", t.Steps()+1, i, want[i])
		}
		if got := b.Shape(); !got.Equal(want[i]) {
			return fmt.Errorf("train step %d: input #%d of the batch is %s, the model takes %s (Config.Batch %d): give batches of the run's size",
				t.Steps()+1, i, got, want[i], t.Config.Batch)
		}
	}
	return nil
}

// metricsOf reads StepFn's outputs.
func (t *Trainer) metricsOf(outs []*tensors.Tensor) StepMetrics {
	names := t.Config.Model.MetricNames()
	m := StepMetrics{Step: t.Steps(), Loss: scalar(outs[0]), Metrics: map[string]float64{}}
	for i, name := range names {
		m.Metrics[name] = scalar(outs[1+i])
	}
	m.Accuracy = m.Metrics["accuracy"]
	rest := outs[1+len(names):]
	m.Count, m.Skipped, m.MeanLoss = scalar(rest[0]), !rest[1].Value().(bool), scalar(rest[2])
	return m
}

// GlobalStep returns the number of optimizer updates applied so far (GoMLX's global step, which
// the schedule reads).
func (t *Trainer) GlobalStep() int {
	return t.counter(context.RootScope, optimizers.GlobalStepVariableName)
}

// Steps returns the number of steps taken so far: the updates applied (GlobalStep) and the steps
// skipped because their gradients were not finite (optim.SkippedStepsVariable, under a loss
// scale). It is the index of the next batch: Run trains on batch Steps(), so a skipped step
// consumes its batch, and a resumed run continues with the batch an uninterrupted one would.
func (t *Trainer) Steps() int {
	return t.GlobalStep() + t.counter(optim.DefaultScope, optim.SkippedStepsVariable)
}

// counter reads an int64 counter of the context (0 when it does not exist yet). Reading it may
// load it from a restored checkpoint; a counter is never trainable.
func (t *Trainer) counter(scope, name string) int { return counterOf(t.Ctx, scope, name) }

// counterOf reads an int64 counter of ctx, as Trainer.counter.
func counterOf(ctx *context.Context, scope, name string) int {
	v := ctx.InspectVariable(scope, name)
	if v == nil || !v.HasValue() {
		return 0
	}
	v.SetTrainable(false)
	return int(tensors.ToScalar[int64](v.MustValue()))
}

// Close releases the compiled step and what its executor holds; a later Step compiles again, on
// the variables the trainer holds (trained weights, optimizer state, counters).
func (t *Trainer) Close() {
	if t.exec != nil {
		t.exec.Close()
		t.exec = nil
	}
	if t.eval != nil {
		t.eval.Finalize()
		t.eval = nil
	}
	t.embed.close()
	if t.started {
		t.Ctx = t.Ctx.Checked(false) // the next build finds its variables: reuse them
	}
}

func scalar(t *tensors.Tensor) float64 {
	switch v := t.Value().(type) {
	case float32:
		return float64(v)
	case float64:
		return v
	}
	panic(fmt.Sprintf("train: expected a float scalar, got %s", t.Shape()))
}
