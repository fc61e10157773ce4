package train_test

import (
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/remat"
	"github.com/onegpu/onegpu/train"
)

// embedded is the embedded backend in sequential mode, shared by the tests.
var embedded = testkit.Embedded

// tinyConfig is the tiny GPT with the tutorial's techniques: bfloat16 compute, remat of MLP and
// attention, 4 micro-batches.
func tinyConfig(t *testing.T) train.Config {
	p, err := mixed.ParsePolicy("params=float32,compute=bfloat16,output=float32")
	if err != nil {
		t.Fatal(err)
	}
	c := models.Presets["tiny"]
	return train.Config{Model: "gpt", GPT: c, Batch: c.Batch, MicroBatches: c.MicroBatch, Policy: p,
		Remat: remat.Spec{MLP: true, Attention: true}, LossScale: "none",
		Schedule: train.Schedule{Peak: 3e-3, WarmupSteps: 10, TransitionSteps: 1, DecayRate: 0.999}, Seed: 7}
}

// TestLossFallsOnText: the tiny GPT learns the byte statistics of the shipped corpus: the loss on a
// held-out batch falls from about ln(256) = 5.5 to well below 3.5 in 40 steps.
func TestLossFallsOnText(t *testing.T) {
	if testing.Short() {
		t.Skip("trains 40 steps")
	}
	config := tinyConfig(t)
	tr, err := train.New(embedded(), config)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	batches, err := data.NewText(data.Corpus, config.Batch, config.GPT.SeqLen, 1)
	if err != nil {
		t.Fatal(err)
	}
	h, err := tr.Run(batches, train.RunOptions{Steps: 40})
	if err != nil {
		t.Fatal(err)
	}
	first, last := h.Steps[0].Loss, h.Steps[len(h.Steps)-1].Loss
	t.Logf("training loss %.3f -> %.3f", first, last)
	if first < 5 || last > 3.5 {
		t.Errorf("training loss %.3f -> %.3f; want it to start near ln(256) and fall below 3.5", first, last)
	}
}

// TestResumeIsExact: 6 steps in one go and 3 steps, a checkpoint, a fresh trainer and 3 more
// steps give bit-identical losses.
func TestResumeIsExact(t *testing.T) {
	config := tinyConfig(t)
	config.GPT.Layers = 1
	config.LossScale = "dynamic" // its state must survive too
	batches, err := data.NewText(data.Corpus, config.Batch, config.GPT.SeqLen, 3)
	if err != nil {
		t.Fatal(err)
	}
	run := func(dir string, steps int) []train.StepMetrics {
		tr, err := train.New(embedded(), config)
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		h, err := tr.Run(batches, train.RunOptions{Steps: steps, CheckpointDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		return h.Steps
	}
	straight := run(filepath.Join(t.TempDir(), "straight"), 6)
	dir := filepath.Join(t.TempDir(), "resumed")
	resumed := append(run(dir, 3), run(dir, 6)...)
	if len(resumed) != 6 {
		t.Fatalf("the resumed run did %d steps, want 6", len(resumed))
	}
	for i := range straight {
		if !reflect.DeepEqual(straight[i], resumed[i]) {
			t.Errorf("step %d: uninterrupted %+v, resumed %+v", i+1, straight[i], resumed[i])
		}
	}
}

// TestScheduleMatchesOptax checks Schedule.At against optax's warmup_exponential_decay_schedule
// written out by hand, and the graph version against At.
func TestScheduleMatchesOptax(t *testing.T) {
	s := train.TutorialSchedule
	for step, want := range map[int]float64{0: 0, 5: 2e-4, 10: 4e-4, 11: 4e-4 * 0.99, 30: 4e-4 * math.Pow(0.99, 20)} {
		if got := s.At(step); math.Abs(got-want) > 1e-15 {
			t.Errorf("At(%d) = %g, want %g", step, got, want)
		}
	}
	// The graph version, as the optimizer reads it, over several updates.
	ctx := context.New()
	exec, err := context.NewExec(embedded(), ctx, func(ctx *context.Context, g *graph.Graph) *graph.Node {
		s.Apply(ctx, g)
		lr := optimizers.LearningRateVar(ctx, dtypes.Float32, s.Peak).ValueGraph(g)
		optimizers.IncrementGlobalStepGraph(ctx, g, dtypes.Int64)
		return lr
	})
	if err != nil {
		t.Fatal(err)
	}
	// The graph computes in float32, as optax does: its decay rate is 0.99 rounded to float32, an
	// error that grows with the exponent (4.7e-6 relative after 500 updates). Against the float64
	// reference of the same rounded constants it agrees to a few float32 roundings, over the
	// warm-up and far into the decay.
	rounded := s
	rounded.Init, rounded.Peak = float64(float32(s.Init)), float64(float32(s.Peak))
	rounded.DecayRate = float64(float32(s.DecayRate))
	check := func(step int) {
		out, err := exec.Exec()
		if err != nil {
			t.Fatal(err)
		}
		got, want := float64(out[0].Value().(float32)), rounded.At(step)
		if math.Abs(got-want) > 4e-7*want {
			t.Errorf("update %d: learning rate %g, want %g (relative error %.2g)", step, got, want, math.Abs(got-want)/want)
		}
	}
	for step := range 15 {
		check(step)
	}
	for _, step := range []int{500, 3000} {
		optimizers.GetGlobalStepVar(ctx).SetValue(tensors.FromValue(int64(step)))
		check(step)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		change func(c *train.Config)
		want   string
	}{
		{func(c *train.Config) { c.MicroBatches = 3 }, "a batch of 16 does not split into 3 equal micro-batches"},
		{func(c *train.Config) { c.Model = "resnet" }, `unknown model "resnet"`},
		{func(c *train.Config) { c.LossScale = "static=-1" }, "static needs a positive number"},
		{func(c *train.Config) { c.GPT.HeadDim = 48 }, "HeadDim = 48 does not divide Hidden = 64"},
		{func(c *train.Config) { c.Schedule.Peak = 0 }, "peak learning rate 0 must be a positive finite number"},
	} {
		c := tinyConfig(t)
		tc.change(&c)
		if _, err := train.New(embedded(), c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New: %v, want an error containing %q", err, tc.want)
		}
	}
	c := tinyConfig(t)
	c.Policy.Compute = dtypes.Float16
	if _, err := train.New(embedded(), c); err == nil || !strings.Contains(err.Error(), "bfloat16") {
		t.Errorf("float16 on the embedded backend: %v, want an error suggesting bfloat16", err)
	}
}
