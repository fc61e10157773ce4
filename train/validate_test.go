package train_test

import (
	"math"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/train"
)

// TestConfigValidateRefusesNonFinite: non-finite learning rates, decay rates and dropouts, and
// sizes whose counts overflow, are errors naming the setting.
func TestConfigValidateRefusesNonFinite(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	base := tinyConfig(t)
	mlp := train.Config{Model: "mlp", Classifier: models.TutorialClassifier, Batch: 8, MicroBatches: 1, LossScale: "none", Schedule: base.Schedule}
	for _, tc := range []struct {
		name string
		edit func(c *train.Config)
		want string
	}{
		{"infinite peak", func(c *train.Config) { c.Schedule.Peak = inf }, "peak learning rate +Inf"},
		{"NaN peak", func(c *train.Config) { c.Schedule.Peak = nan }, "peak learning rate NaN"},
		{"NaN initial rate", func(c *train.Config) { c.Schedule.Init = nan }, "initial learning rate NaN"},
		{"NaN decay", func(c *train.Config) { c.Schedule.DecayRate = nan }, "decay rate NaN"},
		{"NaN dropout", func(c *train.Config) { c.GPT.Dropout = nan }, "Dropout = NaN"},
		{"overflowing parameter count", func(c *train.Config) { c.GPT.Hidden, c.GPT.HeadDim = 1<<31, 1<<30 }, "the parameter count would be"},
		{"overflowing logits", func(c *train.Config) { c.GPT.Vocab = 3 << 37 }, "logits"},
		{"overflowing attention", func(c *train.Config) { c.GPT.SeqLen = 1 << 25 }, "would be"},
		{"classifier NaN dropout", func(c *train.Config) { *c = mlp; c.Classifier.Dropout = nan }, "classifier config: Dropout = NaN"},
		{"classifier overflowing batch", func(c *train.Config) { *c = mlp; c.Batch = 1 << 50 }, "more values than onegpu counts"},
		{"classifier with one class", func(c *train.Config) { *c = mlp; c.Classifier.Classes = 1 }, "Classes = 1"},
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
