package train_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/train"
)

// TestConfigValidateRefusesNonFinite: non-finite learning rates, decay rates and dropouts, and
// sizes whose counts overflow, are errors naming the setting.
func TestConfigValidateRefusesNonFinite(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	base := tinyConfig(t)
	mlp := train.Config{Model: models.Classifier{Config: models.TutorialClassifier}, Batch: 8, MicroBatches: 1, Schedule: base.Schedule}
	tutorial := func(edit func(s *optim.WarmupExponentialDecaySchedule)) func(c *train.Config) {
		return func(c *train.Config) {
			s := c.Schedule.(optim.WarmupExponentialDecaySchedule)
			edit(&s)
			c.Schedule = s
		}
	}
	gpt := func(edit func(g *models.GPTConfig)) func(c *train.Config) {
		return func(c *train.Config) { editGPT(c, edit) }
	}
	classifier := func(edit func(k *models.ClassifierConfig)) func(c *train.Config) {
		return func(c *train.Config) {
			*c = mlp
			k := c.Model.(models.Classifier)
			edit(&k.Config)
			c.Model = k
		}
	}
	for _, tc := range []struct {
		name string
		edit func(c *train.Config)
		want string
	}{
		{"infinite peak", tutorial(func(s *optim.WarmupExponentialDecaySchedule) { s.Peak = inf }), "peak learning rate +Inf"},
		{"NaN peak", tutorial(func(s *optim.WarmupExponentialDecaySchedule) { s.Peak = nan }), "peak learning rate NaN"},
		{"NaN initial rate", tutorial(func(s *optim.WarmupExponentialDecaySchedule) { s.Init = nan }), "initial learning rate NaN"},
		{"NaN decay", tutorial(func(s *optim.WarmupExponentialDecaySchedule) { s.DecayRate = nan }), "decay rate NaN"},
		{"NaN constant rate", func(c *train.Config) { c.Schedule = optim.Constant(nan) }, "learning rate NaN"},
		{"NaN clip", func(c *train.Config) { c.ClipNorm = nan }, "clip norm NaN"},
		{"NaN dropout", gpt(func(g *models.GPTConfig) { g.Dropout = nan }), "Dropout = NaN"},
		{"overflowing parameter count", gpt(func(g *models.GPTConfig) { g.Hidden, g.HeadDim = 1<<31, 1<<30 }), "the parameter count would be"},
		{"overflowing logits", gpt(func(g *models.GPTConfig) { g.Vocab = 3 << 37 }), "logits"},
		{"overflowing attention", gpt(func(g *models.GPTConfig) { g.SeqLen = 1 << 25 }), "would be"},
		{"classifier NaN dropout", classifier(func(k *models.ClassifierConfig) { k.Dropout = nan }), "classifier config: Dropout = NaN"},
		{"classifier overflowing batch", func(c *train.Config) { *c = mlp; c.Batch = 1 << 50 }, "more values than onegpu counts"},
		{"classifier with one class", classifier(func(k *models.ClassifierConfig) { k.Classes = 1 }), "Classes = 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.edit(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if err := mlp.Validate(); err != nil {
		t.Errorf("the tutorial MLP: %v", err)
	}
}

// TestValidateRefusesUnrolledSteps: Config.Validate (and so train.New, for a library caller as
// for the CLI) refuses a step of more than MaxUnrolledBlocks micro-batch × layer copies with an
// *UnrolledError naming the micro-batches and the most that work (main checked it in cmd only);
// the tutorial's settings pass.
func TestValidateRefusesUnrolledSteps(t *testing.T) {
	tutorial := train.Config{Model: models.GPT{Config: models.Presets["tutorial"]}, Schedule: optim.Constant(1e-3)}
	mlp := train.Config{Model: models.Classifier{Config: models.TutorialClassifier}, Schedule: optim.Constant(1e-3)}
	for _, c := range []struct {
		config       train.Config
		microBatches int
		want         string // "" when it passes
	}{
		{tutorial, 4, ""},
		{tutorial, 16, ""}, // plan's largest
		{tutorial, 21, ""},
		{tutorial, 32, "32 micro-batches × 12 layers: the step would unroll 384 blocks"},
		{tutorial, 1 << 20, "use at most 21 micro-batches"},
		{mlp, 256, ""},
		{mlp, 65536, "65536 micro-batches × 1 layer: the step would unroll 65536 blocks"},
	} {
		c.config.Batch, c.config.MicroBatches = c.microBatches, c.microBatches
		err := c.config.Validate()
		var unrolled *train.UnrolledError
		if c.want == "" && err != nil || c.want != "" && (!errors.As(err, &unrolled) || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s with %d micro-batches: %v, want %q", c.config.Model, c.microBatches, err, c.want)
		}
		if c.want != "" {
			if _, err := train.New(embedded(), c.config); !errors.As(err, &unrolled) {
				t.Errorf("train.New with %d micro-batches: %v, want an *UnrolledError", c.microBatches, err)
			}
		}
	}
}
