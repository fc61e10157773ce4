package train

import (
	"fmt"
	"strconv"
	"strings"

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
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/remat"
)

// Config is one training setup: a model, the techniques applied to it, and the optimizer.
type Config struct {
	// Model is "gpt" or "mlp" (the tutorial's classifier) for New; NewFor takes a Model of your
	// own instead and ignores Model, GPT, Classifier and Remat.
	Model      string
	GPT        models.GPTConfig
	Classifier models.ClassifierConfig
	// Batch is the number of sequences (gpt) or examples (mlp) per optimizer step, split into
	// MicroBatches micro-batches whose gradients are accumulated in the step's graph.
	Batch, MicroBatches int
	// Policy is set on the context's root scope for the model's layers (mixed.SetPolicy); the
	// zero Policy means float32 throughout.
	Policy mixed.Policy
	// Remat says which of the GPT's sub-blocks are rematerialized; RematBlocks names the kinds of
	// block (remat.Block) of any model that are; RematPolicy says what either saves.
	Remat       remat.Spec
	RematBlocks []string
	RematPolicy remat.Policy
	// LossScale is "none", "dynamic" or "static=N" (see ParseLossScale).
	LossScale string
	Schedule  Schedule
	// Optimizer is "adam" (the default, also for "") or "adam8bit": Adam with block-wise 8-bit
	// moments (optim.Adam8bit), a quarter of the state; both with the tutorial's betas and epsilon.
	Optimizer string
	// Offload is "none" (the default, also for "") or "optimizer": the optimizer's state and its
	// update live in host memory, on the embedded backend, and the backend computes the loss and
	// the gradients only (ZeRO-Offload's split; see Trainer.OffloadStats). One device only.
	Offload string
	// Seed fixes the initial weights, the dropout masks and the data.
	Seed uint64
	// Devices runs the step on several devices of an XLA backend (see Devices); zero is one device.
	Devices Devices
}

// Validate returns an error naming the setting that cannot work and how to fix it.
func (c Config) Validate() error {
	if err := c.ValidateTraining(); err != nil {
		return err
	}
	switch c.Model {
	case "gpt":
		if err := c.GPT.Validate(); err != nil {
			return err
		}
	case "mlp":
		if err := c.Classifier.Validate(); err != nil {
			return err
		}
		if width := max(c.Classifier.Inputs, c.Classifier.Hidden, c.Classifier.Classes); float64(c.Batch)*float64(width) > models.MaxTensorElements {
			return fmt.Errorf("a batch of %d examples of width %d is more values than onegpu counts (2^46): choose a smaller batch", c.Batch, width)
		}
	default:
		return fmt.Errorf("unknown model %q: use gpt or mlp, or train a model of your own with train.NewFor", c.Model)
	}
	return nil
}

// ValidateTraining checks the settings that apply to any model (batch, micro-batches, remat
// blocks, loss scale, schedule): Validate without the tutorial's models.
func (c Config) ValidateTraining() error {
	if c.Batch < 1 || c.MicroBatches < 1 {
		return fmt.Errorf("batch %d and micro-batches %d must be at least 1", c.Batch, c.MicroBatches)
	}
	if c.Batch%c.MicroBatches != 0 {
		return fmt.Errorf("a batch of %d does not split into %d equal micro-batches: choose micro-batches that divide the batch", c.Batch, c.MicroBatches)
	}
	for _, name := range c.RematBlocks {
		if strings.TrimSpace(name) == "" {
			return fmt.Errorf("remat blocks %q: a block name is empty; use the names the model gives remat.Block", c.RematBlocks)
		}
	}
	if _, err := ParseLossScale(c.LossScale); err != nil {
		return err
	}
	if err := checkOptimizer(c.Optimizer); err != nil {
		return err
	}
	if err := c.checkOffload(); err != nil {
		return err
	}
	if err := c.Devices.validate(c.Batch, c.MicroBatches); err != nil {
		return err
	}
	return c.Schedule.Validate()
}

// ParseLossScale reads "none" (or ""), "dynamic" (jmp's defaults: 2^15, ×2 every 2000 finite
// steps) or "static=N".
func ParseLossScale(s string) (mixed.LossScale, error) {
	switch {
	case s == "" || s == "none":
		return nil, nil
	case s == "dynamic":
		return mixed.NewDynamicLossScale(), nil
	case strings.HasPrefix(s, "static="):
		v, err := strconv.ParseFloat(strings.TrimPrefix(s, "static="), 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("loss scale %q: static needs a positive number, e.g. static=1024", s)
		}
		return mixed.StaticLossScale(v), nil
	}
	return nil, fmt.Errorf("unknown loss scale %q: use none, dynamic or static=N", s)
}

// Trainer trains a model on one backend, one step at a time. Its state — weights, optimizer
// moments, step counter, loss scale, random state — lives in Ctx, so checkpoints capture it all.
type Trainer struct {
	Config  Config
	Model   Model
	Backend backends.Backend
	Ctx     *context.Context
	exec    *context.Exec
	layout  *layout        // how a distributed step places its tensors; nil on one device
	offload *offloadedStep // with Config.Offload "optimizer", instead of exec
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

// StepFn is the train step's graph function: the policy and remat blocks set on the context, the
// learning rate of the schedule, the micro-batched forward and backward passes, and the gradient
// chain (loss scale with an atomic skip, Adam). It returns the loss, the model's metrics, the
// count they average over (tokens or examples), the step's finite flag and the moving-average
// loss. Give it to graph.ContextProgram to analyze the step without running it.
func (t *Trainer) StepFn() accum.StepFn {
	c := t.Config
	chain, err := t.Chain()
	if err != nil {
		panic(err) // NewFor validated the config
	}
	return func(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
		g := inputs[0].Graph()
		t.setForModel(ctx, g)
		c.Schedule.Apply(ctx, g)
		r := chain.Step(ctx, inputs, t.Model.Loss)
		finite := optim.Finite(ctx, g)
		return append(r.Outputs(), r.Count, finite, movingAverage(ctx, g, r.Loss, finite))
	}
}

// setForModel sets what the model's layers read from the context: training mode, the precision
// policy and the remat blocks.
func (t *Trainer) setForModel(ctx *context.Context, g *graph.Graph) {
	ctx.SetTraining(g, true)
	mixed.SetPolicy(ctx, t.Config.Policy)
	remat.SetBlocks(ctx, remat.With(t.Config.RematPolicy), t.Config.RematBlocks...)
}

// Names of the moving-average loss's state, in MeanLossScope.
const (
	// MeanLossScope is the absolute scope of the moving-average loss.
	MeanLossScope = "/train/mean_loss"
	// MeanLossDecay weighs the newest loss, like GoMLX's Trainer's "~loss" (an exact mean for the
	// first 100 steps).
	MeanLossDecay = 0.01
)

// movingAverage updates and returns the exponential moving average of loss. A skipped step (finite
// false) leaves it as it was: its loss is not a loss of the model that continues training.
func movingAverage(ctx *context.Context, g *graph.Graph, loss, finite *graph.Node) *graph.Node {
	state := ctx.Checked(false).InAbsPath(MeanLossScope)
	meanVar := state.VariableWithValue("mean", float32(0)).SetTrainable(false)
	countVar := state.VariableWithValue("count", float32(0)).SetTrainable(false)
	mean, count := meanVar.ValueGraph(g), countVar.ValueGraph(g)
	newCount := graph.AddScalar(count, 1)
	weight := graph.Max(graph.Scalar(g, dtypes.Float32, MeanLossDecay), graph.Reciprocal(newCount))
	newMean := graph.Add(graph.Mul(mean, graph.OneMinus(weight)), graph.Mul(graph.ConvertDType(loss, dtypes.Float32), weight))
	meanVar.SetValueGraph(graph.Where(finite, newMean, mean))
	countVar.SetValueGraph(graph.Where(finite, newCount, count))
	return graph.Where(finite, newMean, mean)
}

// The Adam hyperparameters of the step (the tutorial's, optax.adam's defaults), as optax names them.
const (
	AdamBeta1   = 0.9
	AdamBeta2   = 0.999
	AdamEpsilon = 1e-8
)

// Values of Config.Optimizer.
const (
	OptimizerAdam     = "adam"
	OptimizerAdam8bit = "adam8bit"
)

// checkOptimizer refuses a Config.Optimizer that is not one of its values.
func checkOptimizer(name string) error {
	if name != "" && name != OptimizerAdam && name != OptimizerAdam8bit {
		return fmt.Errorf("unknown optimizer %q: use %s or %s", name, OptimizerAdam, OptimizerAdam8bit)
	}
	return nil
}

// Chain returns the step's gradient chain: MicroBatches, then LossScale when the config has one,
// then Adam (or 8-bit Adam).
func (t *Trainer) Chain() (*optim.Chain, error) {
	c := t.Config
	adam := optimizers.Adam().Betas(AdamBeta1, AdamBeta2).Epsilon(AdamEpsilon).LearningRate(c.Schedule.Peak).Done()
	if err := checkOptimizer(c.Optimizer); err != nil {
		return nil, err
	}
	if c.Optimizer == OptimizerAdam8bit {
		adam = optim.Adam8bit().Betas(AdamBeta1, AdamBeta2).Epsilon(AdamEpsilon).LearningRate(c.Schedule.Peak).Done()
	}
	links := []optim.Transform{optim.MicroBatches(c.MicroBatches)}
	scale, err := ParseLossScale(c.LossScale)
	if err != nil {
		return nil, err
	}
	if scale != nil {
		links = append(links, optim.LossScale(scale))
	}
	return optim.NewChain(append(links, optim.Apply(adam))...)
}

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

// run executes the step on batch, compiling it first if needed, and returns its outputs and the
// graph that ran. With the optimizer offloaded the step is the device's and the host's programs.
func (t *Trainer) run(batch []*tensors.Tensor) ([]*tensors.Tensor, *graph.Graph, error) {
	var execute func(args ...any) ([]*tensors.Tensor, *graph.Graph, error)
	if t.Config.Offload == OffloadOptimizer {
		if t.offload == nil {
			o, err := t.newOffloadedStep()
			if err != nil {
				return nil, nil, err
			}
			t.offload = o
		}
		execute = func(args ...any) ([]*tensors.Tensor, *graph.Graph, error) {
			return t.offload.step(t.Ctx, t.Backend, args)
		}
	} else {
		if t.exec == nil {
			exec, err := t.newExec()
			if err != nil {
				return nil, nil, err
			}
			t.exec = exec.WithName(StepName) // XLA's module name: onegpu compare finds the step's HLO by it
		}
		execute = t.exec.ExecWithGraph
	}
	args, err := t.stepArgs(batch)
	if err != nil {
		return nil, nil, err
	}
	var (
		outs []*tensors.Tensor
		g    *graph.Graph
	)
	err = ograph.CatchPanic(func() {
		var err error
		if outs, g, err = execute(args...); err != nil {
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

// Close releases the compiled step.
func (t *Trainer) Close() {
	if t.exec != nil {
		t.exec.Finalize()
		t.exec = nil
	}
	if t.offload != nil {
		t.offload.finalize()
		t.offload = nil
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
