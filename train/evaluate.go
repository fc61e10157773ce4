package train

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// Evaluation is data a model is evaluated on whole, a fixed number of batches (data.Packed is
// one: its evaluation batches hold every sequence once).
type Evaluation interface {
	// EvalBatches is the number of batches, EvalBatch the i-th: inputs as the model takes them,
	// Config.Batch rows (rows that carry no loss may pad the last one).
	EvalBatches() int
	EvalBatch(i int) []*tensors.Tensor
}

// EvalPoint is a model's loss on evaluation data after a step.
type EvalPoint struct {
	// Step is the steps taken when the model was evaluated.
	Step int `json:"step"`
	// Loss is the mean loss over all the evaluation data's targets (not a mean of batch means),
	// Count what it averages over, Metrics the model's metrics likewise. JSON writes a non-finite
	// loss as StepMetrics does.
	Loss    float64            `json:"loss"`
	Count   float64            `json:"count"`
	Metrics map[string]float64 `json:"metrics,omitempty"`
}

// Evaluate returns the model's loss on all of d with the trainer's current weights, without
// training: evaluation mode (no dropout), the run's policy, attention and loss, nothing
// rematerialized, each batch in pieces of a micro-batch's rows. The loss is the exact mean over
// every target of d (its sums over its counts, accum.Mean), as the run's own loss is over a
// batch. The weights must be on the trainer's device, whole: a run with Offload or several
// Devices is refused (evaluate its checkpoint with Load instead). The first call compiles the
// evaluation program; Close releases it.
func (t *Trainer) Evaluate(d Evaluation) (EvalPoint, error) {
	if err := t.checkEvaluate(); err != nil {
		return EvalPoint{}, err
	}
	if !hasVariables(t.Ctx) {
		return EvalPoint{}, fmt.Errorf("evaluate: the trainer has no weights yet: run a step, Initialize or restore a checkpoint first")
	}
	if t.eval == nil {
		exec, err := context.NewExec(t.Backend, t.Ctx.Reuse(), t.evalFn)
		if err != nil {
			return EvalPoint{}, fmt.Errorf("evaluate: %w", err)
		}
		t.eval = exec.WithName("eval_loss")
	}
	names := t.Config.Model.MetricNames()
	sums := make([]float64, 2*(1+len(names))) // loss sum, count, then each metric's
	k := t.Config.microBatches()
	for i := range d.EvalBatches() {
		batch := d.EvalBatch(i)
		if err := t.checkBatch(batch); err != nil {
			return EvalPoint{}, fmt.Errorf("evaluate: batch %d: %w", i, err)
		}
		pieces := make([][]*tensors.Tensor, k)
		for _, b := range batch {
			parts, err := splitRows(b, k)
			if err != nil {
				return EvalPoint{}, err
			}
			for m, p := range parts {
				pieces[m] = append(pieces[m], p)
			}
		}
		for _, piece := range pieces {
			piece, err := t.embedOnHost(piece)
			if err != nil {
				return EvalPoint{}, fmt.Errorf("evaluate: batch %d: %w", i, err)
			}
			outs, err := t.eval.Exec(args(piece)...)
			if err != nil {
				return EvalPoint{}, fmt.Errorf("evaluate: batch %d: %w", i, err)
			}
			for j, o := range outs {
				sums[j] += scalar(o)
			}
		}
	}
	ratio := func(sum, count float64) float64 {
		if count == 0 {
			return 0
		}
		return sum / count
	}
	p := EvalPoint{Step: t.Steps(), Loss: ratio(sums[0], sums[1]), Count: sums[1], Metrics: map[string]float64{}}
	for j, name := range names {
		p.Metrics[name] = ratio(sums[2+2*j], sums[3+2*j])
	}
	return p, nil
}

// hasVariables reports whether ctx holds any variable.
func hasVariables(ctx *context.Context) bool {
	for range ctx.IterVariables() {
		return true
	}
	return false
}

// checkEvaluate refuses runs whose weights are not whole on the trainer's device.
func (t *Trainer) checkEvaluate() error { return t.Config.CanEvaluate() }

// CanEvaluate returns an error for a run that Trainer.Evaluate cannot evaluate while it trains:
// one whose weights are not whole on one device (Offload other than OffloadNone, several
// Devices).
func (c Config) CanEvaluate() error {
	if c.Offload != OffloadNone || c.Devices.Distributed() {
		return fmt.Errorf("evaluation runs the model whole on one device, and this run has Config.Offload %s and Config.Devices.Count %d: "+
			"evaluate its checkpoints instead (train.Load, onegpu eval), or train without offload on one device", c.Offload, max(1, c.Devices.Count))
	}
	return nil
}

// evalFn is the evaluation graph: the loss's sum and count, then each metric's, in float32.
func (t *Trainer) evalFn(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
	s := t.Config.Settings()
	s.Training, s.Remat = false, Remat{}
	s.Apply(ctx, inputs[0].Graph())
	loss, metrics := t.modelLoss(ctx, inputs)
	f32 := func(n *graph.Node) *graph.Node { return graph.ConvertDType(n, dtypes.Float32) }
	out := []*graph.Node{f32(loss.Sum), f32(loss.Count)}
	for _, m := range metrics {
		out = append(out, f32(m.Sum), f32(m.Count))
	}
	return out
}
