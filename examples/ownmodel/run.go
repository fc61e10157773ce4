package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/platform"
	"github.com/onegpu/onegpu/remat"
	"github.com/onegpu/onegpu/train"
)

func main() {
	asJSON := flag.Bool("json", false, "print the run's measurements as one JSON object")
	steps := flag.Int("steps", 60, "training steps")
	flag.Parse()
	backend, err := platform.NewBackend("")
	if err == nil {
		err = run(backend, *steps, *asJSON)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ownmodel:", err)
		os.Exit(1)
	}
}

// Report is what --json prints: each field measured by this run.
type Report struct {
	FirstLoss float64 `json:"first_loss"`
	LastLoss  float64 `json:"last_loss"`
	// RematGradMaxAbsDiff compares the gradients of one batch with the blocks rematerialized and
	// without, at the same weights, under the run's policy: 0 means bit for bit.
	RematGradMaxAbsDiff float64 `json:"remat_grad_max_abs_diff"`
	// AccumGradMaxRelDiff compares the gradients of one batch in 4 micro-batches and in 1, in
	// float32: the largest max|g4 - g1| / max|g1| over the variables.
	AccumGradMaxRelDiff float64 `json:"accum_grad_max_rel_diff"`
	// NaNStepParamsChanged counts the trainable variables a step on a batch holding a NaN changed.
	NaNStepParamsChanged int `json:"nan_step_params_changed"`
	// MetricsFiniteAfterSkip says that the NaN step was reported skipped and the moving-average
	// loss stayed finite on it and on the step after it.
	MetricsFiniteAfterSkip bool `json:"metrics_finite_after_skip"`
	// ParamDTypes are the distinct dtypes of the trainable variables after training.
	ParamDTypes []string `json:"param_dtypes"`
	// Params counts the trainable parameters.
	Params int `json:"params"`
	// RematBlocks counts the checkpointed blocks in the trainer's step (Trainer.Program, read by
	// remat.Residuals), one per block and micro-batch: the remat the gradient comparison exercises
	// is really there.
	RematBlocks int `json:"remat_blocks"`
}

// run trains for steps steps (progress on stderr unless asJSON) and prints the report.
func run(backend backends.Backend, steps int, asJSON bool) error {
	r, err := measure(backend, steps, map[bool]io.Writer{true: nil, false: os.Stderr}[asJSON])
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(os.Stdout).Encode(r)
	}
	fmt.Printf("loss %.4f -> %.4f over %d steps; parameters %s (%d)\n", r.FirstLoss, r.LastLoss, steps, strings.Join(r.ParamDTypes, ", "), r.Params)
	return nil
}

// measure trains the Setup model and measures the Report.
func measure(backend backends.Backend, steps int, progress io.Writer) (*Report, error) {
	model, config, data := Setup()
	trainer, err := train.New(backend, config)
	if err != nil {
		return nil, err
	}
	defer trainer.Close()
	history, err := trainer.Run(data, train.RunOptions{Steps: steps, Progress: progress})
	if err != nil {
		return nil, err
	}
	r := &Report{FirstLoss: history.Steps[0].Loss, LastLoss: history.Steps[len(history.Steps)-1].Loss}
	program, err := trainer.Program()
	if err != nil {
		return nil, err
	}
	residuals, err := remat.Residuals(program)
	program.Graph.Finalize()
	if err != nil {
		return nil, err
	}
	r.RematBlocks = len(residuals.Blocks)

	// A step on a batch with a NaN input, then a normal one.
	before := trainable(trainer.Ctx)
	poisoned := data.Batch(steps)
	poisoned[0].MutableFlatData(func(flat any) { flat.([]float32)[5] = float32(math.NaN()) })
	skip, err := trainer.Step(poisoned)
	if err != nil {
		return nil, err
	}
	for name, v := range trainable(trainer.Ctx) {
		if v != before[name] {
			r.NaNStepParamsChanged++
		}
	}
	next, err := trainer.Step(data.Batch(steps + 1))
	if err != nil {
		return nil, err
	}
	r.MetricsFiniteAfterSkip = skip.Skipped && !next.Skipped && finite(skip.MeanLoss) && finite(next.MeanLoss)
	kinds := map[string]bool{}
	for v := range trainer.Ctx.IterVariables() {
		if v.Trainable {
			kinds[strings.ToLower(v.DType().String())] = true
			r.Params += v.Shape().Size()
		}
	}
	for k := range kinds {
		r.ParamDTypes = append(r.ParamDTypes, k)
	}
	slices.Sort(r.ParamDTypes)

	batch := data.Batch(0)
	remats, err := gradients(backend, model, batch, config.Policy, []int{1, 1}, []string{"block"}, nil)
	if err != nil {
		return nil, err
	}
	r.RematGradMaxAbsDiff = maxDiff(remats[0], remats[1], false)
	accums, err := gradients(backend, model, batch, mixed.Float32, []int{4, 1}, nil, nil)
	if err != nil {
		return nil, err
	}
	r.AccumGradMaxRelDiff = maxDiff(accums[0], accums[1], true)
	return r, nil
}

// gradients computes, in one context (the same initial weights), the gradients of model on batch
// under policy for two setups: ks[i] micro-batches, with blocks[i] rematerialized (the first setup
// gets first, the second second).
func gradients(backend backends.Backend, model ResMLP, batch []*tensors.Tensor, policy mixed.Policy, ks []int, first, second []string) ([][][]float32, error) {
	ctx := context.New()
	if err := ctx.SetRNGStateFromSeed(5); err != nil {
		return nil, err
	}
	var out [][][]float32
	for i, blocks := range [][]string{first, second} {
		exec, err := context.NewExec(backend, ctx, func(ctx *context.Context, in []*graph.Node) []*graph.Node {
			train.Settings{Policy: policy, Remat: train.Remat{Kinds: blocks}}.Apply(ctx, in[0].Graph()) // as a run's step sets them
			return accum.Gradients(ctx, ks[i], in, model.Loss).Gradients
		})
		if err != nil {
			return nil, err
		}
		outs, err := exec.Exec(batch[0], batch[1])
		exec.Finalize()
		if err != nil {
			return nil, err
		}
		var grads [][]float32
		for _, t := range outs {
			grads = append(grads, tensors.MustCopyFlatData[float32](t))
		}
		out = append(out, grads)
		ctx = ctx.Reuse()
	}
	return out, nil
}

// maxDiff is the largest max|a - b| over the variables, divided by max|b| when relative.
func maxDiff(a, b [][]float32, relative bool) float64 {
	worst := 0.0
	for i := range a {
		diff, scale := 0.0, 0.0
		for j := range a[i] {
			diff = max(diff, math.Abs(float64(a[i][j]-b[i][j])))
			scale = max(scale, math.Abs(float64(b[i][j])))
		}
		if relative && scale > 0 {
			diff /= scale
		}
		worst = max(worst, diff)
	}
	return worst
}

// trainable prints the values of the trainable variables (%v of float32 round-trips, and a NaN
// equals itself).
func trainable(ctx *context.Context) map[string]string {
	out := map[string]string{}
	for v := range ctx.IterVariables() {
		if v.Trainable {
			out[v.ScopeAndName()] = fmt.Sprintf("%v", v.MustValue().Value())
		}
	}
	return out
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
