package models

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/onegpu/onegpu/layers"
)

// LlamaConfig is the shape of a Llama-class decoder (Llama 2 and 3, TinyLlama, Mistral on
// sequences within its sliding window, Qwen2 with QKVBias): the fields of Hugging Face's LlamaConfig (config.json) the
// model needs, by their Go names, plus the sequence length it trains at.
type LlamaConfig struct {
	Vocab          int          // vocab_size: token ids are in [0, Vocab)
	Hidden         int          // hidden_size: width of the residual stream
	Intermediate   int          // intermediate_size: the SwiGLU MLP's width
	Layers         int          // num_hidden_layers
	Heads          int          // num_attention_heads
	KVHeads        int          // num_key_value_heads (divides Heads; Heads for multi-head attention)
	HeadDim        int          // head_dim (Hugging Face's default: hidden_size / num_attention_heads)
	SeqLen         int          // training sequence length (<= MaxPositions)
	MaxPositions   int          // max_position_embeddings: the longest sequence the model reads
	RopeTheta      float64      // rope_theta: base of the rotary frequencies
	RopeScaling    *RopeScaling // nil: none; Llama 3's frequency scaling (rope_type "llama3") otherwise
	NormEpsilon    float64      // rms_norm_eps
	TiedEmbeddings bool         // tie_word_embeddings: the output layer is the embedding table
	QKVBias        bool         // q_proj, k_proj and v_proj have biases (Qwen2); o_proj has none
	SlidingWindow  int          // sliding_window (Mistral), 0 for none: SeqLen at most this (see Validate)
	Description    string       // one line for people
}

// RopeScaling is Llama 3's frequency scaling of the rotary embeddings (rope_type "llama3"): Factor,
// LowFreqFactor, HighFreqFactor and OriginalMaxPositions (original_max_position_embeddings). See
// layers.RopeScaling.
type RopeScaling = layers.RopeScaling

// Rotary returns the rotary embeddings of the config (theta and scaling).
func (c LlamaConfig) Rotary() layers.Rotary {
	return layers.Rotary{Theta: c.RopeTheta, Scaling: c.RopeScaling}
}

// Attention returns the config's grouped-query attention (heads, rotary embeddings), with the
// default softmax dtype and core.
func (c LlamaConfig) Attention() layers.GroupedQuery {
	return layers.GroupedQuery{Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: c.HeadDim, Rotary: c.Rotary(), QKVBias: c.QKVBias}
}

// Validate returns an error naming the first field that cannot work, and why.
func (c LlamaConfig) Validate() error {
	positive := []struct {
		name  string
		value int
	}{{"Vocab", c.Vocab}, {"Hidden", c.Hidden}, {"Intermediate", c.Intermediate}, {"Layers", c.Layers},
		{"Heads", c.Heads}, {"KVHeads", c.KVHeads}, {"HeadDim", c.HeadDim}, {"SeqLen", c.SeqLen}, {"MaxPositions", c.MaxPositions}}
	for _, f := range positive {
		if f.value < 1 {
			return fmt.Errorf("Llama config: %s = %d must be at least 1", f.name, f.value)
		}
	}
	if c.Heads%c.KVHeads != 0 {
		return fmt.Errorf("Llama config: KVHeads = %d does not divide Heads = %d (each key/value head serves Heads/KVHeads query heads)", c.KVHeads, c.Heads)
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("Llama config: HeadDim = %d must be even (rotary embeddings turn feature i with feature i + HeadDim/2)", c.HeadDim)
	}
	if c.SeqLen > c.MaxPositions {
		return fmt.Errorf("Llama config: SeqLen = %d exceeds MaxPositions = %d, the longest sequence the model reads", c.SeqLen, c.MaxPositions)
	}
	if c.SlidingWindow < 0 {
		return fmt.Errorf("Llama config: SlidingWindow = %d must be 0 (none) or positive", c.SlidingWindow)
	}
	// A sliding window lets each position attend to at most SlidingWindow positions, itself
	// included; the model attends to every earlier position, which is the same within the window.
	if c.SlidingWindow > 0 && c.SeqLen > c.SlidingWindow {
		return fmt.Errorf("Llama config: SeqLen = %d exceeds SlidingWindow = %d: the model attends to every earlier position, "+
			"which is the sliding window's attention only for sequences of at most %d tokens", c.SeqLen, c.SlidingWindow, c.SlidingWindow)
	}
	if !(c.RopeTheta > 1) || math.IsInf(c.RopeTheta, 0) {
		return fmt.Errorf("Llama config: RopeTheta = %g must be a finite number above 1 (e.g. 10000 or 500000)", c.RopeTheta)
	}
	if err := c.Rotary().Validate(c.HeadDim); err != nil {
		return fmt.Errorf("Llama config: RopeScaling: %w", err)
	}
	if !(c.NormEpsilon > 0) || math.IsInf(c.NormEpsilon, 0) {
		return fmt.Errorf("Llama config: NormEpsilon = %g must be a finite number above 0 (e.g. 1e-5)", c.NormEpsilon)
	}
	return checkSizes("Llama config", []tensorSize{
		{"the parameter count", llamaParamCount[float64](c)},
		{"a sequence's logits (SeqLen × Vocab)", float64(c.SeqLen) * float64(c.Vocab)},
		{"a sequence's MLP activations (SeqLen × Intermediate)", float64(c.SeqLen) * float64(c.Intermediate)},
		{"a sequence's attention scores (Heads × SeqLen²)", float64(c.Heads) * float64(c.SeqLen) * float64(c.SeqLen)},
		{"the query projection (Heads·HeadDim × Hidden)", float64(c.Heads) * float64(c.HeadDim) * float64(c.Hidden)},
	})
}

// Params returns the number of parameters of the Llama, counted from the config: the embedding
// table, per layer two RMSNorm weights, the q/k/v/o projections (and the q/k/v biases with
// QKVBias) and the three SwiGLU matrices, the final norm, and the output layer unless the
// embeddings are tied. It is exact for configs Validate accepts.
func (c LlamaConfig) Params() int64 { return llamaParamCount[int64](c) }

// llamaParamCount counts the parameters in T: int64 for the exact count, float64 to see whether
// the count would overflow.
func llamaParamCount[T int64 | float64](c LlamaConfig) T {
	h, v, i := T(c.Hidden), T(c.Vocab), T(c.Intermediate)
	q, kv := T(c.Heads)*T(c.HeadDim), T(c.KVHeads)*T(c.HeadDim)
	layer := 2*h + q*h + 2*kv*h + h*q + 3*h*i
	if c.QKVBias {
		layer += q + 2*kv
	}
	total := v*h + T(c.Layers)*layer + h
	if !c.TiedEmbeddings {
		total += v * h
	}
	return total
}

// LlamaPresets are shapes of published Llama-class models, taken from their config.json, whose
// parameter counts equal the published ones (Params), and "tiny", which trains in seconds a step on
// a CPU. Their SeqLen is a training length of the caller's choosing; MaxPositions is the model's.
var LlamaPresets = map[string]LlamaConfig{
	"tiny": {Vocab: 256, Hidden: 64, Intermediate: 192, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, SeqLen: 64, MaxPositions: 256,
		RopeTheta: 10000, RopeScaling: &RopeScaling{Factor: 4, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 64},
		NormEpsilon: 1e-5, TiedEmbeddings: true,
		Description: "2 layers, hidden 64, 4 heads of 16 on 2 key/value heads, Llama 3 rotary scaling, tied embeddings, sequence 64 (seconds on a CPU)"},
	"tinyllama-1.1b": {Vocab: 32000, Hidden: 2048, Intermediate: 5632, Layers: 22, Heads: 32, KVHeads: 4, HeadDim: 64, SeqLen: 2048, MaxPositions: 2048,
		RopeTheta: 10000, NormEpsilon: 1e-5,
		Description: "TinyLlama-1.1B: 22 layers, hidden 2048, 32 heads on 4 key/value heads, vocabulary 32000 (1,100,048,384 parameters)"},
	"llama-3.2-1b": {Vocab: 128256, Hidden: 2048, Intermediate: 8192, Layers: 16, Heads: 32, KVHeads: 8, HeadDim: 64, SeqLen: 2048, MaxPositions: 131072,
		RopeTheta: 500000, RopeScaling: &RopeScaling{Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192},
		NormEpsilon: 1e-5, TiedEmbeddings: true,
		Description: "Llama-3.2-1B: 16 layers, hidden 2048, 32 heads on 8 key/value heads, vocabulary 128256, tied embeddings (1,235,814,400 parameters)"},
	"llama-3.1-8b": {Vocab: 128256, Hidden: 4096, Intermediate: 14336, Layers: 32, Heads: 32, KVHeads: 8, HeadDim: 128, SeqLen: 2048, MaxPositions: 131072,
		RopeTheta: 500000, RopeScaling: &RopeScaling{Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192},
		NormEpsilon: 1e-5,
		Description: "Llama-3.1-8B: 32 layers, hidden 4096, 32 heads on 8 key/value heads, vocabulary 128256 (8,030,261,248 parameters)"},
	"llama-3.1-70b": llama70B("Llama-3.1-70B"),
	"llama-3.3-70b": llama70B("Llama-3.3-70B"),
}

// llama70B is the shape of Llama-3.1-70B, which Llama-3.3-70B shares (only the weights differ).
func llama70B(name string) LlamaConfig {
	return LlamaConfig{Vocab: 128256, Hidden: 8192, Intermediate: 28672, Layers: 80, Heads: 64, KVHeads: 8, HeadDim: 128, SeqLen: 2048, MaxPositions: 131072,
		RopeTheta: 500000, RopeScaling: &RopeScaling{Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192},
		NormEpsilon: 1e-5,
		Description: name + ": 80 layers, hidden 8192, 64 heads on 8 key/value heads, vocabulary 128256 (70,553,706,496 parameters)"}
}

// LlamaPreset returns the named Llama preset, or an error listing the presets. The returned config
// shares no memory with the table.
func LlamaPreset(name string) (LlamaConfig, error) {
	f, _ := LlamaFamilyOf("llama")
	return f.Preset(name)
}

// LlamaPresetNames lists the Llama presets, sorted.
func LlamaPresetNames() []string { return slices.Sorted(maps.Keys(LlamaPresets)) }
