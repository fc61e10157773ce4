package train_test

import (
	"math"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/train"
)

// TestDataConstructorsRefuseBadSizes: sizes that would panic later, in Batch(), are errors at
// construction, naming the size.
func TestDataConstructorsRefuseBadSizes(t *testing.T) {
	huge := 1 << 40
	for _, tc := range []struct {
		name string
		make func() error
		want string
	}{
		{"synthetic: negative batch", func() error { _, err := train.NewSyntheticTokens(-1, 8, 16, 1); return err }, "batch -1 must be at least 1"},
		{"synthetic: zero sequence", func() error { _, err := train.NewSyntheticTokens(2, 0, 16, 1); return err }, "sequence length 0"},
		{"synthetic: vocabulary of 1", func() error { _, err := train.NewSyntheticTokens(2, 8, 1, 1); return err }, "vocabulary of 1"},
		{"synthetic: no vocabulary", func() error { _, err := train.NewSyntheticTokens(2, 8, 0, 1); return err }, "vocabulary of 0"},
		{"synthetic: overflowing batch", func() error { _, err := train.NewSyntheticTokens(huge, huge, 16, 1); return err }, "more than onegpu counts"},
		{"text: negative batch", func() error { _, err := train.NewText(train.Corpus, -4, 8, 1); return err }, "batch -4"},
		{"text: negative sequence", func() error { _, err := train.NewText(train.Corpus, 4, -8, 1); return err }, "sequence length -8"},
		{"text: too short", func() error { _, err := train.NewText(make([]byte, 90), 4, 8, 1); return err }, "too short"},
		{"classifier: zero classes", func() error { _, err := train.NewClassifierBatch(4, 8, 0, 1); return err }, "0 classes"},
		{"classifier: negative inputs", func() error { _, err := train.NewClassifierBatch(4, -8, 3, 1); return err }, "inputs -8"},
		{"classifier: zero batch", func() error { _, err := train.NewClassifierBatch(0, 8, 3, 1); return err }, "batch 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.make(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	// The smallest sizes that work give batches of those sizes.
	d, err := train.NewSyntheticTokens(1, 1, 2, 1)
	if err != nil || d.Batch(0)[1].Shape().Size() != 1 {
		t.Errorf("NewSyntheticTokens(1, 1, 2): %v", err)
	}
	c, err := train.NewClassifierBatch(1, 1, 1, 1)
	if err != nil || c.Batch(0)[1].Shape().Size() != 1 {
		t.Errorf("NewClassifierBatch(1, 1, 1): %v", err)
	}
	text, err := train.NewText(make([]byte, 100), 2, 8, 1) // a tenth of 100 bytes holds one window of 9 bytes and one more position
	if err != nil {
		t.Fatal(err)
	}
	text.Batch(0)
	text.EvalBatch()
}

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
