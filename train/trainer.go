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
	// Model is "gpt" or "mlp" (the tutorial's classifier).
	Model      string
	GPT        models.GPTConfig
	Classifier models.ClassifierConfig
	// Batch is the number of sequences (gpt) or examples (mlp) per optimizer step, split into
	// MicroBatches micro-batches whose gradients are accumulated in the step's graph.
	Batch, MicroBatches int
	Policy              mixed.Policy
	Remat               remat.Spec
	RematPolicy         remat.Policy
	// LossScale is "none", "dynamic" or "static=N" (see ParseLossScale).
	LossScale string
	Schedule  Schedule
	// Seed fixes the initial weights, the dropout masks and the data.
	Seed uint64
}

// Validate returns an error naming the setting that cannot work and how to fix it.
func (c Config) Validate() error {
	if c.Batch < 1 || c.MicroBatches < 1 {
		return fmt.Errorf("batch %d and micro-batches %d must be at least 1", c.Batch, c.MicroBatches)
	}
	if c.Batch%c.MicroBatches != 0 {
		return fmt.Errorf("a batch of %d does not split into %d equal micro-batches: choose micro-batches that divide the batch", c.Batch, c.MicroBatches)
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
		return fmt.Errorf("unknown model %q: use gpt or mlp", c.Model)
	}
	if _, err := ParseLossScale(c.LossScale); err != nil {
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
	Backend backends.Backend
	Ctx     *context.Context
	exec    *context.Exec
}

// New validates config and prepares a trainer whose variables are initialized from config.Seed on
// the first step. It returns an error, not a panic, for a config that cannot work or a policy the
// backend cannot compute.
func New(backend backends.Backend, config Config) (*Trainer, error) {
	if err := config.Validate(); err != nil {
		return nil, err
	}
	if err := config.Policy.Validate(backend); err != nil {
		return nil, err
	}
	ctx := context.New()
	if err := ctx.SetRNGStateFromSeed(int64(config.Seed)); err != nil {
		return nil, err
	}
	return &Trainer{Config: config, Backend: backend, Ctx: ctx}, nil
}

// InputShapes are the shapes of one batch, in the order the step takes them.
func (t *Trainer) InputShapes() []shapes.Shape {
	c := t.Config
	if c.Model == "gpt" {
		tokens := shapes.Make(dtypes.Int32, c.Batch, c.GPT.SeqLen)
		return []shapes.Shape{tokens, tokens}
	}
	return []shapes.Shape{shapes.Make(dtypes.Float32, c.Batch, c.Classifier.Inputs), shapes.Make(dtypes.Int32, c.Batch)}
}

// StepFn is the train step's graph function: the learning rate of the schedule, the micro-batched
// forward and backward passes, and the (loss-scaled, atomic) Adam update. It returns the loss, the
// accuracy and the number of predictions they average over (tokens or examples). Give it to
// graph.ContextProgram to analyze the step without running it.
func (t *Trainer) StepFn() accum.StepFn {
	c := t.Config
	chain, err := t.Chain()
	if err != nil {
		panic(err) // New validated the config
	}
	lossFn := t.lossFn()
	return func(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
		g := inputs[0].Graph()
		ctx.SetTraining(g, true)
		c.Schedule.Apply(ctx, g)
		r := chain.Step(ctx, inputs, lossFn)
		return append(r.Outputs(), r.Count)
	}
}

// Chain returns the step's gradient chain: MicroBatches, then LossScale when the config has one,
// then Adam.
func (t *Trainer) Chain() (*optim.Chain, error) {
	c := t.Config
	adam := optimizers.Adam().Betas(0.9, 0.999).Epsilon(1e-8).LearningRate(c.Schedule.Peak).Done()
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

// lossFn returns the model's loss and accuracy on a micro-batch, as sums and counts.
func (t *Trainer) lossFn() accum.LossFn {
	c := t.Config
	return func(ctx *context.Context, batch []*graph.Node) (accum.Mean, []accum.Mean) {
		var logits *graph.Node
		if c.Model == "gpt" {
			logits = t.gpt().Logits(ctx, batch[0])
		} else {
			logits = models.Classifier{Config: c.Classifier, Policy: c.Policy}.LogProbs(ctx, batch[0])
		}
		labels := batch[1]
		sum, count := mixed.SoftmaxCrossEntropySum(logits, labels, nil)
		hits := graph.Equal(graph.ArgMax(logits, -1, labels.DType()), labels)
		correct := graph.ReduceAllSum(graph.ConvertDType(hits, dtypes.Float32))
		return accum.Mean{Sum: sum, Count: count}, []accum.Mean{{Sum: correct, Count: count}}
	}
}

func (t *Trainer) gpt() models.GPT {
	c := t.Config
	return models.GPT{Config: c.GPT, Policy: c.Policy, Remat: c.Remat, RematPolicy: c.RematPolicy, SoftmaxDType: dtypes.Float32}
}

// Program builds the train step for analysis (graph.Analyze, graph.CompileProgram) on the trainer's
// backend, in a fresh context: nothing runs and the trainer's own state is untouched.
func (t *Trainer) Program() (*ograph.Program, error) {
	ctx := context.New()
	return ograph.ContextProgram(t.Backend, ctx, "train_step", t.InputShapes(), t.StepFn())
}

// StepMetrics are one step's results.
type StepMetrics struct {
	Step     int     `json:"step"`     // the global step after this update
	Loss     float64 `json:"loss"`     // mean cross-entropy over the batch
	Accuracy float64 `json:"accuracy"` // share of predictions equal to the label
	Count    float64 `json:"count"`    // predictions averaged: tokens (gpt) or examples (mlp)
}

// Step runs one train step on batch (the tensors Data.Batch returns) and returns its metrics.
// The first call builds and compiles the step's graph and initializes the variables.
func (t *Trainer) Step(batch []*tensors.Tensor) (StepMetrics, error) {
	if t.exec == nil {
		exec, err := context.NewExec(t.Backend, t.Ctx, ograph.AliasUpdatedState(t.StepFn()))
		if err != nil {
			return StepMetrics{}, err
		}
		t.exec = exec
	}
	args := make([]any, len(batch))
	for i, b := range batch {
		args[i] = b
	}
	var outs []*tensors.Tensor
	err := ograph.CatchPanic(func() {
		var err error
		outs, err = t.exec.Exec(args...)
		if err != nil {
			panic(err)
		}
	})
	if err != nil {
		return StepMetrics{}, fmt.Errorf("train step %d: %w", t.GlobalStep()+1, err)
	}
	return StepMetrics{Step: t.GlobalStep(), Loss: scalar(outs[0]), Accuracy: scalar(outs[1]), Count: scalar(outs[2])}, nil
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
