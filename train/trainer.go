package train

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/accum"
	ograph "github.com/onegpu/onegpu/graph"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
)

// Trainer trains a model on one backend, one step at a time. Its state — weights, optimizer
// moments, step counter, loss scale, random state — lives in Ctx, so checkpoints capture it all.
type Trainer struct {
	Config  Config
	Model   Model
	Backend backends.Backend
	Ctx     *context.Context
	// exec runs the step (see executor); created on first use, released by Close.
	exec executor
	// started is set once a step has been compiled and run (Initialize must come before).
	started bool
}

// New validates config and prepares a trainer of the tutorial's model config.Model whose variables
// are initialized from config.Seed on the first step. It returns an error, not a panic, for a
// config that cannot work or a policy the backend cannot compute.
func New(backend backends.Backend, config Config) (*Trainer, error) {
	if err := config.Validate(); err != nil {
		return nil, err
	}
	var model Model = Classifier{models.Classifier{Config: config.Classifier, Policy: config.Policy}}
	if config.Model == "gpt" {
		model = GPT{models.GPT{Config: config.GPT, Policy: config.Policy, Remat: config.Remat,
			RematPolicy: config.RematPolicy, SoftmaxDType: dtypes.Float32}}
	}
	return NewFor(backend, model, config)
}

// NewFor prepares a trainer of a model of your own with config's training settings (batch,
// micro-batches, policy, remat blocks, loss scale, schedule, seed; see ValidateTraining). The
// loop, checkpoints and resume, Program and the progress lines work as for the tutorial's models.
func NewFor(backend backends.Backend, model Model, config Config) (*Trainer, error) {
	if model == nil {
		return nil, fmt.Errorf("no model: give train.NewFor a train.Model (e.g. train.GPT, train.Classifier or your own)")
	}
	if err := config.ValidateTraining(); err != nil {
		return nil, err
	}
	if config.Policy == (mixed.Policy{}) {
		config.Policy = mixed.Float32
	}
	if err := config.Policy.Validate(backend); err != nil {
		return nil, err
	}
	if err := accum.CheckSplit(config.MicroBatches, model.InputShapes(config.Batch)...); err != nil {
		return nil, err
	}
	if err := config.Devices.CheckBackend(backend); err != nil {
		return nil, err
	}
	ctx := context.New()
	if err := ctx.SetRNGStateFromSeed(int64(config.Seed)); err != nil {
		return nil, err
	}
	return &Trainer{Config: config, Model: model, Backend: backend, Ctx: ctx}, nil
}

// InputShapes are the shapes of one batch, in the order the step takes them.
func (t *Trainer) InputShapes() []shapes.Shape { return t.Model.InputShapes(t.Config.Batch) }

// DeviceStepFn is the part of the step that runs on the trainer's backend: StepFn itself, or with
// the optimizer offloaded the loss, metrics and count, with each parameter's float32 gradient
// written over the parameter (the device holds the parameters or their gradients, never both, and
// no optimizer state). Give it to graph.ContextProgram to analyze what the device holds.
func (t *Trainer) DeviceStepFn() accum.StepFn { return t.executor().deviceStep() }

// StepName names the train step's graph, and so XLA's HLO module of it.
const StepName = "train_step"

// Program builds the train step for analysis (graph.Analyze, graph.CompileProgram) on the trainer's
// backend, in a fresh context: nothing runs and the trainer's own state is untouched. With the
// optimizer offloaded it is the backend's part of the step (DeviceStepFn).
func (t *Trainer) Program() (*ograph.Program, error) {
	ctx := context.New()
	return ograph.ContextProgram(t.Backend, ctx, StepName, t.InputShapes(), t.DeviceStepFn())
}

// StepMetrics are one step's results.
type StepMetrics struct {
	Step     int     `json:"step"`     // the global step after this update
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
// The first call builds and compiles the step's graph and initializes the variables.
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
	var (
		outs []*tensors.Tensor
		g    *graph.Graph
	)
	t.started = true
	err := ograph.CatchPanic(func() {
		var err error
		if outs, g, err = t.executor().run(batch); err != nil {
			panic(err)
		}
	})
	if err != nil {
		return nil, nil, fmt.Errorf("train step %d: %w", t.GlobalStep()+1, err)
	}
	return outs, g, nil
}

// metricsOf reads StepFn's outputs.
func (t *Trainer) metricsOf(outs []*tensors.Tensor) StepMetrics {
	names := t.Model.MetricNames()
	m := StepMetrics{Step: t.GlobalStep(), Loss: scalar(outs[0]), Metrics: map[string]float64{}}
	for i, name := range names {
		m.Metrics[name] = scalar(outs[1+i])
	}
	m.Accuracy = m.Metrics["accuracy"]
	rest := outs[1+len(names):]
	m.Count, m.Skipped, m.MeanLoss = scalar(rest[0]), !rest[1].Value().(bool), scalar(rest[2])
	return m
}

// GlobalStep returns the number of optimizer updates applied so far.
func (t *Trainer) GlobalStep() int {
	v := t.Ctx.InspectVariable(context.RootScope, optimizers.GlobalStepVariableName)
	if v == nil || !v.HasValue() {
		return 0
	}
	return int(tensors.ToScalar[int64](v.MustValue()))
}

// Close releases the compiled step and what its executor holds; a later Step compiles again.
func (t *Trainer) Close() {
	if t.exec != nil {
		t.exec.close()
		t.exec = nil
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
