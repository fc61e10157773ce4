package hf_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/hf"
	"github.com/onegpu/onegpu/models"
)

// The fixtures' configs, as reference/hf/make_fixture.py builds them (transformers 5 writes
// rope_parameters with rope_theta inside).
var (
	untiedConfig = models.LlamaConfig{Vocab: 256, Hidden: 64, Intermediate: 128, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16,
		SeqLen: 128, MaxPositions: 128, RopeTheta: 50000, NormEpsilon: 1e-6,
		RopeScaling: &models.RopeScaling{Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 32}}
	tiedConfig = models.LlamaConfig{Vocab: 128, Hidden: 32, Intermediate: 64, Layers: 2, Heads: 4, KVHeads: 1, HeadDim: 8,
		SeqLen: 64, MaxPositions: 64, RopeTheta: 10000, NormEpsilon: 1e-5, TiedEmbeddings: true}
)

const (
	untiedDir = "testdata/llama3_untied"
	tiedDir   = "testdata/tied_bf16_sharded"
)

// configOf is the config of the models.Llama a layout holds.
func configOf(t *testing.T, l hf.Layout) models.LlamaConfig {
	t.Helper()
	m, ok := l.Model().(models.Llama)
	if !ok {
		t.Fatalf("the layout holds a %T, not a models.Llama", l.Model())
	}
	return m.Config
}

// withoutDescription drops the one field that depends on where the config was read.
func withoutDescription(c models.LlamaConfig) models.LlamaConfig {
	c.Description = ""
	return c
}

func TestReadConfigFixtures(t *testing.T) {
	for _, tc := range []struct {
		dir  string
		want models.LlamaConfig
	}{{untiedDir, untiedConfig}, {tiedDir, tiedConfig}} {
		l, err := hf.ReadConfig(tc.dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := configOf(t, l)
		if !reflect.DeepEqual(withoutDescription(got), tc.want) {
			t.Errorf("%s:\n got %+v %+v\nwant %+v %+v", tc.dir, got, got.RopeScaling, tc.want, tc.want.RopeScaling)
		}
		if !strings.Contains(got.Description, filepath.Join(tc.dir, "config.json")) {
			t.Errorf("description %q does not name the file", got.Description)
		}
	}
}

// Published config.json files (transformers 4's fields: rope_theta and rope_scaling, torch_dtype;
// TinyLlama's has no head_dim) parse into shapes whose parameter counts are the published ones.
func TestParsePublishedConfigs(t *testing.T) {
	llama32 := `{"architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
	  "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
	  "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false,
	  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
	  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
	  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
	  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.45.0.dev0",
	  "use_cache": true, "vocab_size": 128256}`
	llama31 := strings.NewReplacer(`"hidden_size": 2048`, `"hidden_size": 4096`, `"head_dim": 64`, `"head_dim": 128`,
		`"intermediate_size": 8192`, `"intermediate_size": 14336`, `"num_hidden_layers": 16`, `"num_hidden_layers": 32`,
		`"factor": 32.0`, `"factor": 8.0`, `"tie_word_embeddings": true`, `"tie_word_embeddings": false`).Replace(llama32)
	tinyLlama := `{"architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 1, "eos_token_id": 2,
	  "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 5632,
	  "max_position_embeddings": 2048, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 22,
	  "num_key_value_heads": 4, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 10000.0,
	  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.35.0", "use_cache": true, "vocab_size": 32000}`
	mistral := `{"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_act": "silu", "hidden_size": 4096,
	  "intermediate_size": 14336, "max_position_embeddings": 32768, "num_attention_heads": 32, "num_hidden_layers": 32,
	  "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": null, "head_dim": null,
	  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 32768}`
	for _, tc := range []struct {
		name   string
		json   string
		params int64
		check  func(models.LlamaConfig) bool
	}{
		{"Llama-3.2-1B", llama32, 1_235_814_400, func(c models.LlamaConfig) bool {
			return c.TiedEmbeddings && c.RopeTheta == 500000 && *c.RopeScaling == models.RopeScaling{Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192} &&
				c.SeqLen == hf.DefaultSeqLen && c.MaxPositions == 131072
		}},
		{"Llama-3.1-8B", llama31, 8_030_261_248, func(c models.LlamaConfig) bool { return !c.TiedEmbeddings && c.RopeScaling.Factor == 8 }},
		{"TinyLlama-1.1B", tinyLlama, 1_100_048_384, func(c models.LlamaConfig) bool {
			return c.HeadDim == 64 && c.RopeScaling == nil && c.SeqLen == 2048 && c.KVHeads == 4
		}},
		// Mistral-7B-v0.3 without a sliding window: the Llama's tensors and math.
		{"Mistral-7B-v0.3", mistral, 7_248_023_552, func(c models.LlamaConfig) bool {
			return c.HeadDim == 128 && c.RopeTheta == 1e6 && strings.Contains(c.Description, "MistralForCausalLM")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := hf.ParseConfig([]byte(tc.json), tc.name+"/config.json", 0)
			if err != nil {
				t.Fatal(err)
			}
			c := configOf(t, l)
			if c.Params() != tc.params || !tc.check(c) {
				t.Errorf("%+v (%d parameters, want %d)", c, c.Params(), tc.params)
			}
		})
	}
}

// edit returns the untied fixture's config.json with fields set (a nil value deletes the field).
func edit(t *testing.T, fields map[string]any) []byte {
	t.Helper()
	var m map[string]any
	raw, err := os.ReadFile(filepath.Join(untiedDir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range fields {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	out, _ := json.Marshal(m)
	return out
}

// TestParseConfigRefuses: what models.Llama cannot compute exactly is an error naming the file,
// the field and the value.
func TestParseConfigRefuses(t *testing.T) {
	rope := func(kind string) map[string]any {
		return map[string]any{"rope_type": kind, "factor": 2.0, "rope_theta": 10000.0}
	}
	for _, tc := range []struct {
		name   string
		fields map[string]any
		want   string
	}{
		{"unknown model_type", map[string]any{"model_type": "gpt2"}, `model_type: "gpt2" is not supported`},
		{"no model_type", map[string]any{"model_type": nil}, "model_type: <nil>: missing"},
		{"qwen3", map[string]any{"model_type": "qwen3", "architectures": []string{"Qwen3ForCausalLM"}}, "q_norm"},
		{"sequence classification", map[string]any{"architectures": []string{"LlamaForSequenceClassification"}}, `architectures: [LlamaForSequenceClassification]`},
		{"attention bias", map[string]any{"attention_bias": true}, "attention_bias: true"},
		{"mlp bias", map[string]any{"mlp_bias": true}, "mlp_bias: true"},
		{"gelu", map[string]any{"hidden_act": "gelu"}, "hidden_act: gelu"},
		{"attention dropout", map[string]any{"attention_dropout": 0.1}, "attention_dropout: 0.1"},
		{"linear rope", map[string]any{"rope_parameters": rope("linear")}, `rope_parameters: rope_type "linear" is not supported`},
		{"yarn rope (transformers 4)", map[string]any{"rope_parameters": nil, "rope_scaling": rope("yarn")}, `rope_scaling: rope_type "yarn" is not supported`},
		{"dynamic rope (old spelling)", map[string]any{"rope_parameters": nil, "rope_scaling": map[string]any{"type": "dynamic", "factor": 2.0}}, `rope_type "dynamic"`},
		{"llama3 without factor", map[string]any{"rope_parameters": map[string]any{"rope_type": "llama3", "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 32}}, "rope_parameters.factor: missing"},
		{"llama3 with an unknown key", map[string]any{"rope_parameters": map[string]any{"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 32, "beta": 1}}, "unknown keys beta"},
		{"no hidden_size", map[string]any{"hidden_size": nil}, "hidden_size: missing"},
		{"fractional heads", map[string]any{"num_attention_heads": 4.5}, "num_attention_heads: 4.5 is not a non-negative integer"},
		{"string layers", map[string]any{"num_hidden_layers": "2"}, "num_hidden_layers: 2 is not"},
		{"negative hidden size", map[string]any{"hidden_size": -64}, "hidden_size: -64 is not a non-negative integer"},
		{"a vocabulary of 10^12", map[string]any{"vocab_size": int64(1_000_000_000_000)}, "vocab_size: 1000000000000 is more than 2147483647, the most onegpu reads"},
		{"10^300 layers", map[string]any{"num_hidden_layers": 1e300}, "num_hidden_layers: 1e+300 is more than 2147483647"},
		{"tie not a bool", map[string]any{"tie_word_embeddings": "yes"}, "tie_word_embeddings: yes is not true or false"},
		{"kv heads do not divide", map[string]any{"num_key_value_heads": 3}, "KVHeads"},
		{"mistral window 0", map[string]any{"model_type": "mistral", "architectures": []string{"MistralForCausalLM"}, "sliding_window": 0}, "sliding_window: 0 is a window of no position"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := hf.ParseConfig(edit(t, tc.fields), "some/config.json", 0)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "some/config.json") {
				t.Fatalf("error %v, want one naming some/config.json and containing %q", err, tc.want)
			}
		})
	}
	if _, err := hf.ParseConfig([]byte("[1, 2]"), "x/config.json", 0); err == nil || !strings.Contains(err.Error(), "not a JSON object") {
		t.Errorf("an array: %v", err)
	}
}

// TestParseConfigMistralWindow: a Mistral whose sliding window (64) is shorter than its positions
// (128) computes exactly on sequences within the window: its default sequence is capped at the
// window, a sequence of 64 is accepted, one of 65 refused naming sliding_window, and the model
// keeps the window (models.LlamaConfig.SlidingWindow), whose Validate refuses a longer SeqLen
// (before: every such config was refused, "64 is shorter than max_position_embeddings 128").
func TestParseConfigMistralWindow(t *testing.T) {
	raw := edit(t, map[string]any{"model_type": "mistral", "architectures": []string{"MistralForCausalLM"}, "sliding_window": 64})
	for _, seq := range []int{0, 64, 10} {
		l, err := hf.ParseConfig(raw, "m/config.json", seq)
		if err != nil {
			t.Fatalf("sequence %d: %v", seq, err)
		}
		c := configOf(t, l)
		if want := map[int]int{0: 64, 64: 64, 10: 10}[seq]; c.SeqLen != want || c.SlidingWindow != 64 {
			t.Errorf("sequence %d: SeqLen %d, SlidingWindow %d; want %d, 64", seq, c.SeqLen, c.SlidingWindow, want)
		}
		if seq == 64 {
			c.SeqLen = 65
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "SeqLen = 65 exceeds SlidingWindow = 64") {
				t.Errorf("Validate with SeqLen 65: %v", err)
			}
		}
	}
	if _, err := hf.ParseConfig(raw, "m/config.json", 65); err == nil ||
		!strings.Contains(err.Error(), "m/config.json: sliding_window: 64 is shorter than the sequences of 65 tokens asked for") {
		t.Errorf("sequence 65: %v", err)
	}
}

// TestParseConfigDefaults: missing optional fields take transformers' LlamaConfig defaults.
func TestParseConfigDefaults(t *testing.T) {
	l, err := hf.ParseConfig(edit(t, map[string]any{"num_key_value_heads": nil, "head_dim": nil, "rms_norm_eps": nil,
		"tie_word_embeddings": nil, "rope_parameters": nil, "architectures": nil, "hidden_act": nil}), "x", 0)
	if err != nil {
		t.Fatal(err)
	}
	if c := configOf(t, l); c.KVHeads != 4 || c.HeadDim != 16 || c.NormEpsilon != 1e-6 || c.TiedEmbeddings || c.RopeTheta != 10000 || c.RopeScaling != nil {
		t.Errorf("%+v", c)
	}
	// A "default" rope_type is no scaling, with the theta it gives.
	l, err = hf.ParseConfig(edit(t, map[string]any{"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1234.0}}), "x", 0)
	if err != nil {
		t.Fatal(err)
	}
	if c := configOf(t, l); c.RopeScaling != nil || c.RopeTheta != 1234 {
		t.Errorf("%+v", c)
	}
}
