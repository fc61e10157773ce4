package hf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/onegpu/onegpu/internal/regularfile"
	"github.com/onegpu/onegpu/models"
)

// ConfigFile is the name of a checkpoint's model configuration.
const ConfigFile = "config.json"

// DefaultSeqLen is the training sequence length ReadConfig gives a config (capped at the model's
// max_position_embeddings): config.json says how far the model reads, not how long a run trains.
const DefaultSeqLen = 2048

// ReadConfig reads dir/config.json into a models.LlamaConfig. See ParseConfig; the file must be
// a regular file (or a link to one) of at most regularfile.MaxSmallBytes.
func ReadConfig(dir string) (models.LlamaConfig, error) {
	path := filepath.Join(dir, ConfigFile)
	raw, err := readJSON(path)
	if err != nil {
		return models.LlamaConfig{}, err
	}
	return ParseConfig(raw, path)
}

// readJSON reads a JSON file of a checkpoint folder whole: a regular file, or a link to one (a
// Hugging Face cache's snapshot is links into its blobs), of at most regularfile.MaxSmallBytes,
// in valid UTF-8.
func readJSON(path string) ([]byte, error) {
	raw, err := regularfile.ReadLinked(path, regularfile.MaxSmallBytes)
	if err != nil {
		return nil, err
	}
	return raw, validUTF8(raw, path)
}

// validUTF8 refuses JSON text that is not valid UTF-8, which Go's decoder would read with the bad
// bytes replaced (a key "vocab_size" with a stray byte would silently become another key).
func validUTF8(raw []byte, source string) error {
	if utf8.Valid(raw) {
		return nil
	}
	at := 0
	for at < len(raw) {
		r, n := utf8.DecodeRune(raw[at:])
		if r == utf8.RuneError && n <= 1 {
			break
		}
		at += n
	}
	return fmt.Errorf("%s is not valid UTF-8 (byte %d is 0x%02x): JSON is UTF-8; the file is damaged or not JSON", source, at, raw[at])
}

// architectures that hold exactly the Llama's tensors, by model_type.
var causalLM = map[string]string{"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM"}

// refused explains model types with a Llama-like shape whose tensors or math differ.
var refused = map[string]string{
	"qwen2":   "Qwen2 has biases on q_proj, k_proj and v_proj, which models.Llama does not hold",
	"qwen3":   "Qwen3 normalizes queries and keys per head (q_norm, k_norm), which models.Llama does not",
	"gemma":   "Gemma scales embeddings, adds 1 to its norm weights and uses GELU",
	"gemma2":  "Gemma 2 soft-caps logits and alternates sliding-window layers",
	"phi3":    "Phi-3 fuses q/k/v and gate/up into single tensors",
	"mixtral": "Mixtral's MLP is a mixture of experts",
}

// ParseConfig parses a Hugging Face config.json (source names it in errors) into a
// models.LlamaConfig, and refuses what models.Llama cannot compute exactly:
//   - model_type must be "llama", or "mistral" without a sliding window shorter than its
//     positions (the tensors are the same); anything else, Qwen2 included (q/k/v biases), is an
//     error naming it; architectures, when given, must be the type's ForCausalLM class;
//   - hidden_act must be "silu", attention_bias and mlp_bias false, attention_dropout 0;
//   - rotary embeddings: rope_theta and rope_scaling (transformers 4's fields) or rope_parameters
//     (transformers 5's), of rope_type "default" (none) or "llama3"; other types are errors naming
//     them.
//
// vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads and
// max_position_embeddings are required; num_key_value_heads defaults to the heads, head_dim to
// hidden_size / num_attention_heads, rope_theta to 10000, rms_norm_eps to 1e-6 and
// tie_word_embeddings to false, as in transformers' LlamaConfig. SeqLen is DefaultSeqLen, capped at
// max_position_embeddings; fields that do not change the math (token ids, dtype, use_cache, ...)
// are ignored. The result is validated (models.LlamaConfig.Validate).
func ParseConfig(raw []byte, source string) (models.LlamaConfig, error) {
	if err := validUTF8(raw, source); err != nil {
		return models.LlamaConfig{}, err
	}
	p := configParser{source: source}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&p.fields); err != nil {
		return models.LlamaConfig{}, fmt.Errorf("%s: not a JSON object: %w", source, err)
	}
	c, err := p.parse()
	if err != nil {
		return models.LlamaConfig{}, err
	}
	if err := c.Validate(); err != nil {
		return models.LlamaConfig{}, fmt.Errorf("%s: %w", source, err)
	}
	return c, nil
}

type configParser struct {
	source string
	fields map[string]any
}

func (p *configParser) errorf(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %s", p.source, field, fmt.Sprintf(format, args...))
}

func (p *configParser) parse() (c models.LlamaConfig, err error) {
	modelType, isString := p.fields["model_type"].(string)
	if !isString {
		return c, p.errorf("model_type", "%v: missing or not a string (onegpu reads \"llama\" and \"mistral\")", p.fields["model_type"])
	}
	class, ok := causalLM[modelType]
	if !ok {
		why := refused[modelType]
		if why == "" {
			why = "models.Llama reads model_type \"llama\" (and \"mistral\" without a sliding window)"
		}
		return c, p.errorf("model_type", "%q is not supported: %s", modelType, why)
	}
	if archs, present := p.fields["architectures"]; present && archs != nil {
		list, ok := archs.([]any)
		if !ok || len(list) != 1 || list[0] != class {
			return c, p.errorf("architectures", "%v: onegpu reads [%q], a causal language model's tensors", archs, class)
		}
	}
	if modelType == "mistral" {
		if err := p.checkSlidingWindow(); err != nil {
			return c, err
		}
	}
	if act, present := p.fields["hidden_act"]; present && act != "silu" {
		return c, p.errorf("hidden_act", "%v: models.Llama's MLP is SwiGLU, with silu", act)
	}
	for _, field := range []string{"attention_bias", "mlp_bias"} {
		if b, err := p.boolOr(field, false); err != nil || b {
			if err != nil {
				return c, err
			}
			return c, p.errorf(field, "true: models.Llama's projections have no biases")
		}
	}
	if d, err := p.floatOr("attention_dropout", 0); err != nil || d != 0 {
		if err != nil {
			return c, err
		}
		return c, p.errorf("attention_dropout", "%g: models.Llama has no attention dropout", d)
	}
	ints := []struct {
		field string
		to    *int
	}{{"vocab_size", &c.Vocab}, {"hidden_size", &c.Hidden}, {"intermediate_size", &c.Intermediate},
		{"num_hidden_layers", &c.Layers}, {"num_attention_heads", &c.Heads}, {"max_position_embeddings", &c.MaxPositions}}
	for _, f := range ints {
		if *f.to, err = p.requiredInt(f.field); err != nil {
			return c, err
		}
	}
	if c.KVHeads, err = p.intOr("num_key_value_heads", c.Heads); err != nil {
		return c, err
	}
	defaultHeadDim := 0
	if c.Heads > 0 {
		defaultHeadDim = c.Hidden / c.Heads
	}
	if c.HeadDim, err = p.intOr("head_dim", defaultHeadDim); err != nil {
		return c, err
	}
	if c.NormEpsilon, err = p.floatOr("rms_norm_eps", 1e-6); err != nil {
		return c, err
	}
	if c.TiedEmbeddings, err = p.boolOr("tie_word_embeddings", false); err != nil {
		return c, err
	}
	if c.RopeTheta, c.RopeScaling, err = p.rope(); err != nil {
		return c, err
	}
	c.SeqLen = min(DefaultSeqLen, c.MaxPositions)
	c.Description = fmt.Sprintf("%s from %s", class, p.source)
	return c, nil
}

// checkSlidingWindow accepts a Mistral config whose sliding window never applies.
func (p *configParser) checkSlidingWindow() error {
	v, present := p.fields["sliding_window"]
	if !present || v == nil {
		return nil
	}
	window, err := p.requiredInt("sliding_window")
	if err != nil {
		return err
	}
	positions, err := p.requiredInt("max_position_embeddings")
	if err != nil {
		return err
	}
	if window < positions {
		return p.errorf("sliding_window", "%d is shorter than max_position_embeddings %d: models.Llama attends to every earlier position", window, positions)
	}
	return nil
}

// rope reads the rotary embeddings' theta and scaling from rope_parameters (transformers 5) or
// rope_theta and rope_scaling (transformers 4).
func (p *configParser) rope() (theta float64, scaling *models.RopeScaling, err error) {
	field := "rope_scaling"
	params, _ := p.fields[field].(map[string]any)
	if p.fields[field] != nil && params == nil {
		return 0, nil, p.errorf(field, "%v is not an object", p.fields[field])
	}
	theta, err = p.floatOr("rope_theta", 10000)
	if err != nil {
		return 0, nil, err
	}
	if v, present := p.fields["rope_parameters"]; present && v != nil {
		field = "rope_parameters"
		if params, _ = v.(map[string]any); params == nil {
			return 0, nil, p.errorf(field, "%v is not an object", v)
		}
		if t, present := params["rope_theta"]; present {
			if theta, err = number(t); err != nil {
				return 0, nil, p.errorf(field+".rope_theta", "%v", err)
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
		return 0, nil, p.errorf(field, "rope_type %q is not supported: models.Llama implements Llama 3's frequency scaling (\"llama3\") or none", ropeType)
	}
	scaling = &models.RopeScaling{}
	floats := []struct {
		key string
		to  *float64
	}{{"factor", &scaling.Factor}, {"low_freq_factor", &scaling.LowFreqFactor}, {"high_freq_factor", &scaling.HighFreqFactor}}
	for _, f := range floats {
		if *f.to, err = number(params[f.key]); err != nil {
			return 0, nil, p.errorf(field+"."+f.key, "%v (Llama 3's scaling needs it)", err)
		}
	}
	orig, err := number(params["original_max_position_embeddings"])
	if err != nil || orig != math.Trunc(orig) || orig < 1 || orig > math.MaxInt32 {
		return 0, nil, p.errorf(field+".original_max_position_embeddings", "%v: a positive integer (Llama 3's scaling needs it)", params["original_max_position_embeddings"])
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
		return 0, nil, p.errorf(field, "unknown keys %s for rope_type \"llama3\"", strings.Join(unknown, ", "))
	}
	return theta, scaling, nil
}

// number reads a JSON number (or reports what else it found).
func number(v any) (float64, error) {
	n, ok := v.(json.Number)
	if !ok {
		if v == nil {
			return 0, fmt.Errorf("missing")
		}
		return 0, fmt.Errorf("%v is not a number", v)
	}
	f, err := n.Float64()
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("%s is not a finite number", n)
	}
	return f, nil
}

func (p *configParser) floatOr(field string, def float64) (float64, error) {
	v, present := p.fields[field]
	if !present || v == nil {
		return def, nil
	}
	f, err := number(v)
	if err != nil {
		return 0, p.errorf(field, "%v", err)
	}
	return f, nil
}

func (p *configParser) requiredInt(field string) (int, error) {
	if v, present := p.fields[field]; !present || v == nil {
		return 0, p.errorf(field, "missing (onegpu does not guess a model's shape)")
	}
	return p.intOr(field, 0)
}

func (p *configParser) intOr(field string, def int) (int, error) {
	v, present := p.fields[field]
	if !present || v == nil {
		return def, nil
	}
	f, err := number(v)
	if err != nil || f != math.Trunc(f) || f < 0 || f > math.MaxInt32 {
		return 0, p.errorf(field, "%v is not a non-negative integer", v)
	}
	return int(f), nil
}

func (p *configParser) boolOr(field string, def bool) (bool, error) {
	v, present := p.fields[field]
	if !present || v == nil {
		return def, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, p.errorf(field, "%v is not true or false", v)
	}
	return b, nil
}
