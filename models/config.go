package models

import (
	"fmt"
	"sort"
	"strings"

	"github.com/onegpu/onegpu/analysis"
)

// GPTConfig is the shape of the tutorial's GPT: its sizes and dropout rate, nothing of how a run
// trains it (batch, micro-batches, learning rate: see train.Config and recipes.Defaults).
type GPTConfig struct {
	Hidden      int     // width of the residual stream
	Layers      int     // transformer blocks
	HeadDim     int     // width of one attention head; heads = Hidden / HeadDim
	MLPFactor   int     // the MLP's hidden width is MLPFactor·Hidden
	SeqLen      int     // tokens per sequence (and learned positions)
	Vocab       int     // token ids are in [0, Vocab); also the number of outputs
	Dropout     float64 // dropout rate after each block's output projection, while training
	Description string  // one line for people
}

// Heads is Hidden / HeadDim, or 0 when HeadDim is not positive (Validate refuses such a config).
func (c GPTConfig) Heads() int {
	if c.HeadDim < 1 {
		return 0
	}
	return c.Hidden / c.HeadDim
}

// Validate returns an error naming the first field that cannot work, and why.
func (c GPTConfig) Validate() error {
	positive := []struct {
		name  string
		value int
	}{{"Hidden", c.Hidden}, {"Layers", c.Layers}, {"HeadDim", c.HeadDim}, {"MLPFactor", c.MLPFactor},
		{"SeqLen", c.SeqLen}, {"Vocab", c.Vocab}}
	for _, f := range positive {
		if f.value < 1 {
			return fmt.Errorf("GPT config: %s = %d must be at least 1", f.name, f.value)
		}
	}
	if c.Hidden%c.HeadDim != 0 {
		return fmt.Errorf("GPT config: HeadDim = %d does not divide Hidden = %d into heads", c.HeadDim, c.Hidden)
	}
	if !(c.Dropout >= 0 && c.Dropout < 1) { // NaN too
		return fmt.Errorf("GPT config: Dropout = %g must be in [0, 1)", c.Dropout)
	}
	return checkSizes("GPT config", []tensorSize{{"the parameter count", paramCount[float64](c)}})
}

// ValidateBatch returns an error when a batch of batch sequences, split into micro-batches of
// microBatch sequences, holds a tensor with more values than onegpu counts (analysis.MaxTensorElements):
// sizes that are typos, not models.
func (c GPTConfig) ValidateBatch(batch, microBatch int) error {
	micro := float64(microBatch)
	return checkSizes("GPT config", []tensorSize{
		{"a batch of tokens (batch × SeqLen)", float64(batch) * float64(c.SeqLen)},
		{"a micro-batch's logits (micro-batch × SeqLen × Vocab)", micro * float64(c.SeqLen) * float64(c.Vocab)},
		{"a micro-batch's MLP activations (micro-batch × SeqLen × MLPFactor·Hidden)", micro * float64(c.SeqLen) * float64(c.MLPFactor) * float64(c.Hidden)},
		{"a micro-batch's attention scores (micro-batch × heads × SeqLen²)", micro * float64(c.Heads()) * float64(c.SeqLen) * float64(c.SeqLen)},
	})
}

// tensorSize is the number of values of a tensor (or count) a config asks for, as a float64 so
// that it cannot overflow, and what it is, for people.
type tensorSize struct {
	what     string
	elements float64
}

// checkSizes returns an error, prefixed with model, naming the first size past analysis.MaxTensorElements.
func checkSizes(model string, sizes []tensorSize) error {
	for _, size := range sizes {
		if size.elements > analysis.MaxTensorElements {
			return fmt.Errorf("%s: %s would be %.3g values, more than onegpu counts (2^46): choose smaller sizes", model, size.what, size.elements)
		}
	}
	return nil
}

// Params returns the number of parameters of the GPT, counted from the config. It is exact for
// configs Validate accepts (their count is below analysis.MaxTensorElements).
func (c GPTConfig) Params() int64 { return paramCount[int64](c) }

// paramCount counts the parameters in T: int64 for the exact count, float64 to see whether the
// count would overflow.
func paramCount[T int64 | float64](c GPTConfig) T {
	h, f, v, t := T(c.Hidden), T(c.MLPFactor)*T(c.Hidden), T(c.Vocab), T(c.SeqLen)
	norm := 2 * h
	mlp := norm + h*f + f + f*h + h
	attn := norm + h*3*h + 3*h + h*h + h
	return v*h + t*h + T(c.Layers)*(mlp+attn) + norm + h*v + v
}

// Presets of the GPT config. "tutorial" is the tutorial's model (155,877,376 parameters); "small"
// and "tiny" train on a few CPU cores (a byte-level vocabulary of 256 fits the text corpus).
// recipes.Defaults gives the run each trains with by default.
var Presets = map[string]GPTConfig{
	"tutorial": {Hidden: 1024, Layers: 12, HeadDim: 128, MLPFactor: 4, SeqLen: 512, Vocab: 2048, Dropout: 0.1,
		Description: "the tutorial's GPT: 12 layers, hidden 1024, 8 heads of 128, sequence 512"},
	"small": {Hidden: 256, Layers: 4, HeadDim: 64, MLPFactor: 4, SeqLen: 128, Vocab: 256, Dropout: 0.1,
		Description: "4 layers, hidden 256, 4 heads of 64, sequence 128 (minutes on a CPU)"},
	"tiny": {Hidden: 64, Layers: 2, HeadDim: 32, MLPFactor: 4, SeqLen: 64, Vocab: 256, Dropout: 0.1,
		Description: "2 layers, hidden 64, 2 heads of 32, sequence 64 (seconds on a CPU)"},
}

// Preset returns the named preset, or an error listing the presets.
func Preset(name string) (GPTConfig, error) {
	c, ok := Presets[name]
	if !ok {
		return GPTConfig{}, fmt.Errorf("unknown GPT preset %q: the presets are %s", name, strings.Join(PresetNames(), ", "))
	}
	return c, nil
}

// PresetNames lists the presets, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(Presets))
	for n := range Presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
