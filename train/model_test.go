package train_test

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/remat"
	"github.com/onegpu/onegpu/train"
	"github.com/onegpu/onegpu/train/checkpoint"
)

// twoLayer is a model of a user's own: Blocks residual blocks (Blocks 0 is 1) of width Width (0 is
// 8) over a Dense layer, mean squared error, with a "close" metric (share of predictions within
// 0.5). It has no String method: a checkpoint records its type, and the trainer its variables.
type twoLayer struct{ Width, Blocks int }

func (twoLayer) InputShapes(batch int) []shapes.Shape {
	return []shapes.Shape{shapes.Make(dtypes.Float32, batch, 6), shapes.Make(dtypes.Float32, batch, 1)}
}

func (twoLayer) MetricNames() []string { return []string{"close"} }

func (m twoLayer) Loss(ctx *context.Context, b []*graph.Node) (accum.Mean, []accum.Mean) {
	width := cmp.Or(m.Width, 8)
	h := layers.Dense(ctx.In("in"), b[0], width)
	for i := range max(m.Blocks, 1) {
		name := "block"
		if i > 0 {
			name = fmt.Sprintf("block_%d", i)
		}
		h = graph.Add(h, remat.Block(ctx.In(name), "block", func(ctx *context.Context, in []*graph.Node) []*graph.Node {
			return []*graph.Node{layers.Dense(ctx.In("inner"), layers.GELU(layers.LayerNorm(ctx.In("norm"), in[0])), width)}
		}, h)[0])
	}
	y := graph.ConvertDType(layers.Dense(ctx.In("out"), h, 1), dtypes.Float32)
	diff := graph.Sub(y, b[1])
	close := graph.ConvertDType(graph.LessThan(graph.Abs(diff), graph.Scalar(diff.Graph(), dtypes.Float32, 0.5)), dtypes.Float32)
	return accum.MaskedMean(graph.Square(diff), nil), []accum.Mean{accum.MaskedMean(close, nil)}
}

type sines struct{}

func (sines) Batch(step int) []*tensors.Tensor {
	x, y := make([]float32, 8*6), make([]float32, 8)
	for i := range x {
		x[i] = float32(((step*31+i*7)%13)-6) / 6
	}
	for i := range y {
		y[i] = x[i*6] - x[i*6+3]
	}
	return []*tensors.Tensor{tensors.FromFlatDataAndDimensions(x, 8, 6), tensors.FromFlatDataAndDimensions(y, 8, 1)}
}

func (sines) Describe() string { return "sines" }

func ownConfig() train.Config {
	return train.Config{Model: twoLayer{}, Batch: 8, MicroBatches: 2, Remat: train.Remat{Kinds: []string{"block"}},
		LossScale: mixed.NewDynamicLossScale(), Schedule: optim.Constant(1e-2), Seed: 3}
}

// TestOwnModelResumes: a user's model trains through the loop with micro-batches, remat of its
// named block and a loss scale; its metric is reported by name; 4 steps in one go and 2 + a
// checkpoint + 2 give identical results; Program builds its step for Analyze with the block
// checkpointed once per micro-batch.
func TestOwnModelResumes(t *testing.T) {
	var progress bytes.Buffer
	run := func(dir string, steps int) []train.StepMetrics {
		tr, err := train.New(embedded(), ownConfig())
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		h, err := tr.Run(sines{}, train.RunOptions{Steps: steps, CheckpointDir: dir, Progress: &progress})
		if err != nil {
			t.Fatal(err)
		}
		return h.Steps
	}
	straight := run(filepath.Join(t.TempDir(), "straight"), 4)
	dir := filepath.Join(t.TempDir(), "resumed")
	resumed := append(run(dir, 2), run(dir, 4)...)
	if !reflect.DeepEqual(straight, resumed) {
		t.Errorf("uninterrupted %+v\nresumed %+v", straight, resumed)
	}
	if _, ok := straight[0].Metrics["close"]; !ok || straight[3].Loss >= straight[0].Loss || straight[3].Count != 8 {
		t.Errorf("steps %+v: want the metric \"close\", a falling loss and 8 examples counted", straight)
	}

	if out := progress.String(); !strings.Contains(out, "step    4/4  loss ") || !strings.Contains(out, "  close 0.") ||
		!strings.Contains(out, "examples/s") || !strings.Contains(out, "resuming from step 2") {
		t.Errorf("progress lines:\n%s", out)
	}

	tr, err := train.New(embedded(), ownConfig())
	if err != nil {
		t.Fatal(err)
	}
	p, err := tr.Program()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Graph.Finalize()
	report, err := remat.Residuals(p)
	if err != nil || len(report.Blocks) != 2 {
		t.Errorf("remat.Residuals of the step: %d blocks, %v; want 2 (one per micro-batch)", len(report.Blocks), err)
	}
	if m := analysis.Analyze(p); m.PeakBytes <= 0 {
		t.Errorf("Analyze: peak %d", m.PeakBytes)
	}
}

// TestNewErrors: what cannot work is an error naming it, before anything runs.
func TestNewErrors(t *testing.T) {
	odd := ownConfig()
	odd.MicroBatches = 3
	empty := ownConfig()
	empty.Remat.Kinds = []string{""}
	none := ownConfig()
	none.Model = nil
	for _, tc := range []struct {
		config train.Config
		want   string
	}{
		{none, "no model"},
		{odd, "does not split into 3"},
		{empty, "a kind is empty"},
	} {
		_, err := train.New(embedded(), tc.config)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): %v, want an error containing %q", tc.config, err, tc.want)
		}
	}
}

// TestMisspeltKindIsAnError: a kind of block the model does not mark is an error naming the kinds
// it has, when the step is built (a model without RematKinds cannot say earlier), instead of a run
// without remat.
func TestMisspeltKindIsAnError(t *testing.T) {
	c := ownConfig()
	c.Remat.Kinds = []string{"blok"}
	tr, err := train.New(embedded(), c)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	want := `remat blok: the model has no block of that kind; its kinds are block`
	if _, err := tr.Program(); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Program: %v, want an error containing %q", err, want)
	}
	if _, err := tr.Step(sines{}.Batch(0)); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Step: %v, want an error containing %q", err, want)
	}
}

// TestStepRefusesBatchOfOtherSize: a batch whose shapes are not the run's is an error naming both
// shapes, before anything runs.
func TestStepRefusesBatchOfOtherSize(t *testing.T) {
	c := ownConfig()
	c.Batch = 16
	tr, err := train.New(embedded(), c)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	_, err = tr.Step(sines{}.Batch(0)) // 8 examples
	if err == nil || !strings.Contains(err.Error(), "input #0 of the batch is (Float32)[8 6], the model takes (Float32)[16 6] (Config.Batch 16)") {
		t.Errorf("a batch of 8 for a run of 16: %v", err)
	}
	if _, err := tr.Step(sines{}.Batch(0)[:1]); err == nil || !strings.Contains(err.Error(), "a batch of 1 tensors, the model takes 2") {
		t.Errorf("a batch of one tensor: %v", err)
	}
	if tr.Steps() != 0 {
		t.Errorf("%d steps taken after refused batches", tr.Steps())
	}
}

// TestOwnModelOfOtherSizesIsRefused: resuming a checkpoint of a model of one's own with other
// sizes (a wider layer, one more block, one block fewer) is refused before anything is loaded,
// naming each variable that differs; the same sizes resume.
func TestOwnModelOfOtherSizesIsRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "own")
	run := func(m twoLayer, steps int) error {
		c := ownConfig()
		c.Model = m
		tr, err := train.New(embedded(), c)
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		_, err = tr.Run(sines{}, train.RunOptions{Steps: steps, CheckpointDir: dir})
		return err
	}
	if err := run(twoLayer{Blocks: 2}, 2); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		model twoLayer
		want  []string
	}{
		{twoLayer{Width: 12, Blocks: 2}, []string{"variable /in/kernel: this checkpoint holds (Float32)[6 8]; the model has (Float32)[6 12]"}},
		{twoLayer{Blocks: 3}, []string{"variable /block_2/inner/kernel: this checkpoint has none; the model has (Float32)[8 8]"}},
		{twoLayer{Blocks: 1}, []string{"variable /block_1/inner/kernel: this checkpoint holds (Float32)[8 8]; the model has no such variable"}},
	} {
		err := run(tc.model, 4)
		var mismatch *checkpoint.ConfigMismatchError
		if !errors.As(err, &mismatch) {
			t.Errorf("%+v: %v, want a *ConfigMismatchError", tc.model, err)
			continue
		}
		for _, want := range tc.want {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%+v: the error does not say %q:\n%v", tc.model, want, err)
			}
		}
		if strings.Contains(err.Error(), "Optimizer") {
			t.Errorf("%+v: the error lists the optimizer's state besides the parameters:\n%v", tc.model, err)
		}
	}
	if err := run(twoLayer{Blocks: 2}, 3); err != nil {
		t.Errorf("the same sizes: %v", err)
	}
}

// TestRunTakesTheOptimizerClipAndSchedule: Run trains with an optimizer value (AdamW with its weight
// decay), clipping by global norm and a schedule function (warm-up and cosine) exactly as the
// same chain assembled by hand from package optim and run with GoMLX's context.Exec: the same
// losses and weights, bit for bit.
func TestRunTakesTheOptimizerClipAndSchedule(t *testing.T) {
	const steps = 4
	schedule := optim.WarmupCosine(1e-3, 2e-2, 2, 10, 1e-3)
	adamW := func() optim.Optimizer { return optim.AdamW().WeightDecay(0.1).Done() }
	c := train.Config{Model: twoLayer{}, Batch: 8, MicroBatches: 2, Optimizer: adamW(), ClipNorm: 0.5, Schedule: schedule, Seed: 3}
	tr, err := train.New(embedded(), c)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	h, err := tr.Run(sines{}, train.RunOptions{Steps: steps})
	if err != nil {
		t.Fatal(err)
	}

	ctx := context.New()
	if err := ctx.SetRNGStateFromSeed(3); err != nil {
		t.Fatal(err)
	}
	ctx.SetParam(layers.ParamSeed, int64(3)) // the initial weights' seed, as the trainer sets it
	chain, err := optim.NewChain(optim.MicroBatches(2), optim.ClipByGlobalNorm(0.5), optim.Apply(adamW()))
	if err != nil {
		t.Fatal(err)
	}
	exec, err := context.NewExec(embedded(), ctx, func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		ctx.SetTraining(in[0].Graph(), true)
		optim.ApplySchedule(ctx, in[0].Graph(), schedule)
		return chain.StepFn(twoLayer{}.Loss)(ctx, in)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	for i := range steps {
		b := sines{}.Batch(i)
		out, err := exec.Exec(b[0], b[1])
		if err != nil {
			t.Fatal(err)
		}
		if got := float64(out[0].Value().(float32)); got != h.Steps[i].Loss {
			t.Errorf("step %d: loss %v through Run, %v through the hand-made chain", i+1, h.Steps[i].Loss, got)
		}
	}
	for v := range tr.Ctx.IterVariables() {
		if !v.Trainable {
			continue
		}
		mine := ctx.InspectVariable(v.Scope(), v.Name())
		if mine == nil || mine.MustValue().String() != v.MustValue().String() {
			t.Errorf("%s differs between Run and the hand-made chain", v.ScopeAndName())
		}
	}
	if record := train.Record(c); record.Optimizer != "adamw(b1=0.9, b2=0.999, eps=1e-08, weight_decay=0.1), loss scale none, clip by global norm 0.5" ||
		record.Schedule != "warmup_cosine_decay" {
		t.Errorf("the checkpoint records %+v", record)
	}
}

// forgetful is an optimizer that updates nothing and does not count its updates.
type forgetful struct{}

func (forgetful) String() string                                                         { return "forgetful" }
func (forgetful) Clear(*context.Context) error                                           { return nil }
func (forgetful) UpdateGraph(*context.Context, *graph.Graph, *graph.Node)                {}
func (forgetful) UpdateGraphWithGradients(*context.Context, []*graph.Node, dtypes.DType) {}

// TestOptimizerMustCountItsSteps: an optimizer of one's own that does not increment the global
// step (the schedule and the loop read it) is an error at its first step, naming it and the call.
func TestOptimizerMustCountItsSteps(t *testing.T) {
	c := ownConfig()
	c.Optimizer, c.LossScale = forgetful{}, nil
	tr, err := train.New(embedded(), c)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	_, err = tr.Step(sines{}.Batch(0))
	if err == nil || !strings.Contains(err.Error(), "the optimizer forgetful must count each update") ||
		!strings.Contains(err.Error(), "optimizers.IncrementGlobalStepGraph") {
		t.Errorf("a step of an optimizer that does not count: %v", err)
	}
}
