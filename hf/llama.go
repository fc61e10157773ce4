package hf

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/onegpu/onegpu/models"
)

// The Llama family: config.json's LlamaConfig fields as a models.Llama, its tensors as
// LlamaForCausalLM names them (models.Llama names its variables the same way). Mistral's
// checkpoints hold the same tensors and, on sequences within their sliding window, the same math;
// they are read, and written back as Mistral's when they have a window (as Llama's otherwise). Qwen2 (qwen2.go) is this layout with biases on q_proj, k_proj and v_proj.

// The Llama's and Mistral's classes.
const (
	llamaClass   = "LlamaForCausalLM"
	mistralClass = "MistralForCausalLM"
)

// llamaOnlyFields are the fields of transformers' LlamaConfig that other families of the layout
// lack.
var llamaOnlyFields = map[string]any{"attention_bias": false, "mlp_bias": false}

func init() {
	RegisterFamily(Family{ModelType: "llama", Architecture: llamaClass, Read: readLlama, Describe: func(model any) (Layout, bool) {
		l, ok := model.(models.Llama)
		return llamaLayout{llama: l, modelType: "llama", class: llamaClass, fields: llamaOnlyFields}, ok && !l.Config.QKVBias && l.Config.SlidingWindow == 0
	}})
	// A Llama with a sliding window is a Mistral, written back with its window.
	RegisterFamily(Family{ModelType: "mistral", Architecture: mistralClass, Read: readMistral, Describe: func(model any) (Layout, bool) {
		l, ok := model.(models.Llama)
		return llamaLayout{llama: l, modelType: "mistral", class: mistralClass, fields: map[string]any{"sliding_window": l.Config.SlidingWindow}},
			ok && !l.Config.QKVBias && l.Config.SlidingWindow > 0
	}})
}

// readLlama reads a "llama" config.json: models.Llama has no biases, so attention_bias and
// mlp_bias must be false.
func readLlama(r *ConfigReader) (Layout, error) {
	for _, field := range []string{"attention_bias", "mlp_bias"} {
		if b, err := r.BoolOr(field, false); err != nil || b {
			if err != nil {
				return nil, err
			}
			return nil, r.Errorf(field, "true: the Llama's projections have no biases")
		}
	}
	return readLlamaLayout(r, "llama", llamaClass, llamaOnlyFields, false)
}

// readMistral reads a "mistral" config.json: the Llama's tensors and math, with Mistral's sliding
// window (none, or one as long as the run's sequences) kept as the model's SlidingWindow. The
// Llama attends to every earlier position, which is the window's attention for sequences of at
// most the window: the default sequence length is capped at it, and a longer one asked for is an
// error naming sliding_window, as is a window of 0 (null is none).
func readMistral(r *ConfigReader) (Layout, error) {
	window, err := r.IntOr("sliding_window", 0)
	if err != nil {
		return nil, err
	}
	if window == 0 && r.Value("sliding_window") != nil {
		// transformers fails on it (its mask keeps no position): damage, not "no window".
		return nil, r.Errorf("sliding_window", "0 is a window of no position: give the window's length, or null for none")
	}
	layout, err := readLlamaLayout(r, "mistral", mistralClass, nil, false)
	if err != nil || window == 0 {
		return layout, err
	}
	l := layout.(llamaLayout)
	c := l.llama.Config
	switch {
	case r.seq == 0:
		c.SeqLen = min(c.SeqLen, window)
	case r.seq > window:
		return nil, r.Errorf("sliding_window", "%d is shorter than the sequences of %d tokens asked for: the Llama attends to every earlier position, "+
			"which is the window's attention only for sequences of at most %d tokens", window, r.seq, window)
	}
	c.SlidingWindow = window
	if l.llama, err = models.NewLlama(c); err != nil {
		return nil, fmt.Errorf("%s: %w", r.Source, err)
	}
	l.fields = map[string]any{"sliding_window": window}
	return l, nil
}

// llamaLayout is a models.Llama as the family of modelType (whose class is class) holds it:
// LlamaForCausalLM's tensors (the q/k/v biases too with QKVBias) and config.json fields, with
// fields of the family's own added.
type llamaLayout struct {
	llama            models.Llama
	modelType, class string
	fields           map[string]any
}

// readLlamaLayout reads the fields a Llama-class config.json shares into a models.Llama with
// qkvBias, held as the family of modelType and class holds it with fields of its own (see
// llamaLayout): vocab_size, hidden_size, intermediate_size, num_hidden_layers,
// num_attention_heads and max_position_embeddings are required; num_key_value_heads defaults to
// the heads, head_dim to hidden_size / num_attention_heads, rms_norm_eps to 1e-6 and
// tie_word_embeddings to false, as in transformers; hidden_act must be "silu" and
// attention_dropout 0; the rotary embeddings are rope_theta (10000 by default) and rope_scaling
// (transformers 4's fields) or rope_parameters (transformers 5's), of rope_type "default" (none)
// or "llama3". The model is validated (models.NewLlama).
func readLlamaLayout(r *ConfigReader, modelType, class string, fields map[string]any, qkvBias bool) (Layout, error) {
	c := models.LlamaConfig{QKVBias: qkvBias}
	if act, present := r.fields["hidden_act"]; present && act != "silu" {
		return nil, r.Errorf("hidden_act", "%v: the Llama's MLP is SwiGLU, with silu", act)
	}
	if d, err := r.FloatOr("attention_dropout", 0); err != nil || d != 0 {
		if err != nil {
			return nil, err
		}
		return nil, r.Errorf("attention_dropout", "%g: the Llama has no attention dropout", d)
	}
	ints := []struct {
		field string
		to    *int
	}{{"vocab_size", &c.Vocab}, {"hidden_size", &c.Hidden}, {"intermediate_size", &c.Intermediate},
		{"num_hidden_layers", &c.Layers}, {"num_attention_heads", &c.Heads}, {"max_position_embeddings", &c.MaxPositions}}
	var err error
	for _, f := range ints {
		if *f.to, err = r.Int(f.field); err != nil {
			return nil, err
		}
	}
	if c.KVHeads, err = r.IntOr("num_key_value_heads", c.Heads); err != nil {
		return nil, err
	}
	defaultHeadDim := 0
	if c.Heads > 0 {
		defaultHeadDim = c.Hidden / c.Heads
	}
	if c.HeadDim, err = r.IntOr("head_dim", defaultHeadDim); err != nil {
		return nil, err
	}
	if c.NormEpsilon, err = r.FloatOr("rms_norm_eps", 1e-6); err != nil {
		return nil, err
	}
	if c.TiedEmbeddings, err = r.BoolOr("tie_word_embeddings", false); err != nil {
		return nil, err
	}
	if c.RopeTheta, c.RopeScaling, err = readRope(r); err != nil {
		return nil, err
	}
	if c.SeqLen, err = r.SeqLen(c.MaxPositions); err != nil {
		return nil, err
	}
	c.Description = fmt.Sprintf("%s from %s", class, r.Source)
	m, err := models.NewLlama(c)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.Source, err)
	}
	return llamaLayout{llama: m, modelType: modelType, class: class, fields: fields}, nil
}

// readRope reads the rotary embeddings' theta and scaling from rope_parameters (transformers 5)
// or rope_theta and rope_scaling (transformers 4).
func readRope(r *ConfigReader) (theta float64, scaling *models.RopeScaling, err error) {
	field := "rope_scaling"
	params, _ := r.fields[field].(map[string]any)
	if r.fields[field] != nil && params == nil {
		return 0, nil, r.Errorf(field, "%v is not an object", r.fields[field])
	}
	theta, err = r.FloatOr("rope_theta", 10000)
	if err != nil {
		return 0, nil, err
	}
	if v, present := r.fields["rope_parameters"]; present && v != nil {
		field = "rope_parameters"
		if params, _ = v.(map[string]any); params == nil {
			return 0, nil, r.Errorf(field, "%v is not an object", v)
		}
		if t, present := params["rope_theta"]; present {
			if theta, err = number(t); err != nil {
				return 0, nil, r.Errorf(field+".rope_theta", "%v", err)
			}
		}
	}
	if params == nil {
		return theta, nil, nil
	}
	ropeType, _ := params["rope_type"].(string)
	if ropeType == "" {
		ropeType, _ = params["type"].(string) // the older spelling
	}
	switch ropeType {
	case "default":
		return theta, nil, nil
	case "llama3":
	default:
		return 0, nil, r.Errorf(field, "rope_type %q is not supported: the Llama implements Llama 3's frequency scaling (\"llama3\") or none", ropeType)
	}
	scaling = &models.RopeScaling{}
	floats := []struct {
		key string
		to  *float64
	}{{"factor", &scaling.Factor}, {"low_freq_factor", &scaling.LowFreqFactor}, {"high_freq_factor", &scaling.HighFreqFactor}}
	for _, f := range floats {
		if *f.to, err = number(params[f.key]); err != nil {
			return 0, nil, r.Errorf(field+"."+f.key, "%v (Llama 3's scaling needs it)", err)
		}
	}
	orig, err := number(params["original_max_position_embeddings"])
	if err != nil || orig != math.Trunc(orig) || orig < 1 || orig > math.MaxInt32 {
		return 0, nil, r.Errorf(field+".original_max_position_embeddings", "%v: a positive integer (Llama 3's scaling needs it)", params["original_max_position_embeddings"])
	}
	scaling.OriginalMaxPositions = int(orig)
	var unknown []string
	for key := range params {
		switch key {
		case "rope_type", "type", "rope_theta", "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings":
		default:
			unknown = append(unknown, key)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return 0, nil, r.Errorf(field, "unknown keys %s for rope_type \"llama3\"", strings.Join(unknown, ", "))
	}
	return theta, scaling, nil
}

// Model is the models.Llama.
func (l llamaLayout) Model() any { return l.llama }

// Layers is the Llama's number of decoder layers.
func (l llamaLayout) Layers() int { return l.llama.Config.Layers }

// Params is the Llama's parameter count (models.LlamaConfig.Params).
func (l llamaLayout) Params() int64 { return l.llama.Config.Params() }

// Tensors lists the Llama's tensors in the model's order (embeddings, layers, final norm, output
// layer), as LlamaForCausalLM names and shapes them: linear weights [out_features, in_features],
// q/k/v biases after their weights with QKVBias, no lm_head.weight with tied embeddings.
func (l llamaLayout) Tensors() []TensorSpec {
	c := l.llama.Config
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	specs := []TensorSpec{{"model.embed_tokens.weight", []int{c.Vocab, c.Hidden}}}
	for i := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		specs = append(specs, TensorSpec{p + "input_layernorm.weight", []int{c.Hidden}})
		for _, proj := range []struct {
			name string
			out  int
		}{{"q_proj", q}, {"k_proj", kv}, {"v_proj", kv}} {
			specs = append(specs, TensorSpec{p + "self_attn." + proj.name + ".weight", []int{proj.out, c.Hidden}})
			if c.QKVBias {
				specs = append(specs, TensorSpec{p + "self_attn." + proj.name + ".bias", []int{proj.out}})
			}
		}
		specs = append(specs,
			TensorSpec{p + "self_attn.o_proj.weight", []int{c.Hidden, q}},
			TensorSpec{p + "post_attention_layernorm.weight", []int{c.Hidden}},
			TensorSpec{p + "mlp.gate_proj.weight", []int{c.Intermediate, c.Hidden}},
			TensorSpec{p + "mlp.up_proj.weight", []int{c.Intermediate, c.Hidden}},
			TensorSpec{p + "mlp.down_proj.weight", []int{c.Hidden, c.Intermediate}},
		)
	}
	specs = append(specs, TensorSpec{"model.norm.weight", []int{c.Hidden}})
	if !c.TiedEmbeddings {
		specs = append(specs, TensorSpec{"lm_head.weight", []int{c.Vocab, c.Hidden}})
	}
	return specs
}

// Aliases: with tied embeddings a folder may hold lm_head.weight as a copy of the embeddings.
func (l llamaLayout) Aliases() map[string]string {
	if !l.llama.Config.TiedEmbeddings {
		return nil
	}
	return map[string]string{"lm_head.weight": "model.embed_tokens.weight"}
}

// Config returns config.json's fields for the Llama (transformers 4's, which transformers 5 reads
// too), with the family's model_type and architecture and its own fields.
func (l llamaLayout) Config() map[string]any {
	c := l.llama.Config
	var scaling any
	if s := c.RopeScaling; s != nil {
		scaling = map[string]any{"rope_type": "llama3", "factor": jsonFloat(s.Factor), "low_freq_factor": jsonFloat(s.LowFreqFactor),
			"high_freq_factor": jsonFloat(s.HighFreqFactor), "original_max_position_embeddings": s.OriginalMaxPositions}
	}
	fields := map[string]any{
		"architectures": []string{l.class}, "model_type": l.modelType,
		"vocab_size": c.Vocab, "hidden_size": c.Hidden, "intermediate_size": c.Intermediate,
		"num_hidden_layers": c.Layers, "num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads,
		"head_dim": c.HeadDim, "max_position_embeddings": c.MaxPositions,
		"rope_theta": jsonFloat(c.RopeTheta), "rope_scaling": scaling, "rms_norm_eps": jsonFloat(c.NormEpsilon),
		"tie_word_embeddings": c.TiedEmbeddings, "hidden_act": "silu", "attention_dropout": jsonFloat(0),
	}
	for k, v := range l.fields {
		fields[k] = v
	}
	return fields
}
