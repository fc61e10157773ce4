package hf_test

import (
	"strings"
	"testing"

	"github.com/onegpu/onegpu/hf"
	"github.com/onegpu/onegpu/models"
)

// qwen25 is Qwen2.5-0.5B's published config.json (transformers 4's fields).
const qwen25 = `{"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151643,
  "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02, "intermediate_size": 4864, "max_position_embeddings": 32768,
  "max_window_layers": 24, "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.40.1", "use_cache": true, "use_mrope": false, "use_sliding_window": false, "vocab_size": 151936}`

// TestQwen2Configs: the published Qwen2.5 configs read into the models.Llama of the qwen2
// presets (q/k/v biases, tied or untied), whose parameter counts are the published ones; a sliding
// window that applies, in transformers 4's fields or 5's layer_types, and a rope_type the Llama
// does not implement are refused, naming the field; a Qwen2 exports as Qwen2ForCausalLM, without
// the Llama's attention_bias.
func TestQwen2Configs(t *testing.T) {
	to := func(old ...string) string { return strings.NewReplacer(old...).Replace(qwen25) }
	for _, tc := range []struct {
		preset, json string
		params       int64
	}{
		{"qwen2.5-0.5b", qwen25, 494_032_768},
		{"qwen2.5-1.5b", to(`"hidden_size": 896`, `"hidden_size": 1536`, `"intermediate_size": 4864`, `"intermediate_size": 8960`,
			`"num_attention_heads": 14`, `"num_attention_heads": 12`, `"num_hidden_layers": 24`, `"num_hidden_layers": 28`,
			`"max_position_embeddings": 32768`, `"max_position_embeddings": 131072`), 1_543_714_304},
		{"qwen2.5-7b", to(`"hidden_size": 896`, `"hidden_size": 3584`, `"intermediate_size": 4864`, `"intermediate_size": 18944`,
			`"num_attention_heads": 14`, `"num_attention_heads": 28`, `"num_hidden_layers": 24`, `"num_hidden_layers": 28`,
			`"num_key_value_heads": 2`, `"num_key_value_heads": 4`, `"max_position_embeddings": 32768`, `"max_position_embeddings": 131072`,
			`"tie_word_embeddings": true`, `"tie_word_embeddings": false`, `"vocab_size": 151936`, `"vocab_size": 152064`), 7_615_616_512},
	} {
		l, err := hf.ParseConfig([]byte(tc.json), tc.preset+"/config.json", 0)
		if err != nil {
			t.Fatal(err)
		}
		c := configOf(t, l)
		preset, _ := models.Qwen2Presets[tc.preset]
		if !c.QKVBias || !c.SameModel(preset) || c.Params() != tc.params || l.Params() != tc.params {
			t.Errorf("%s: %+v (%d parameters, want %d), preset %+v", tc.preset, c, c.Params(), tc.params, preset)
		}
		fields := l.Config()
		if fields["model_type"] != "qwen2" || fields["architectures"].([]string)[0] != "Qwen2ForCausalLM" || fields["use_sliding_window"] != false || fields["attention_bias"] != nil {
			t.Errorf("%s: config.json fields %v", tc.preset, fields)
		}
	}
	for _, tc := range []struct{ name, json, want string }{
		{"sliding window", to(`"use_sliding_window": false`, `"use_sliding_window": true`, `"sliding_window": 32768`, `"sliding_window": 4096`, `"max_window_layers": 24`, `"max_window_layers": 20`),
			"use_sliding_window: true with sliding_window 4096 shorter than max_position_embeddings 32768 from layer 20 (max_window_layers) of 24"},
		{"layer_types", to(`"use_cache": true`, `"use_cache": true, "layer_types": ["full_attention", "sliding_attention"]`), `layer_types: layer 1 is sliding_attention`},
		{"yarn", to(`"rope_theta": 1000000.0`, `"rope_theta": 1000000.0, "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}`), `rope_type "yarn" is not supported`},
		{"another class", to(`["Qwen2ForCausalLM"]`, `["Qwen2ForSequenceClassification"]`), `architectures: [Qwen2ForSequenceClassification]`},
	} {
		if _, err := hf.ParseConfig([]byte(tc.json), "q/config.json", 0); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "q/config.json") {
			t.Errorf("%s: %v, want an error naming q/config.json and containing %q", tc.name, err, tc.want)
		}
	}
	// A window that never applies: sliding, but no layer at or past max_window_layers.
	if _, err := hf.ParseConfig([]byte(to(`"use_sliding_window": false`, `"use_sliding_window": true`, `"sliding_window": 32768`, `"sliding_window": 4096`)), "q/config.json", 0); err != nil {
		t.Errorf("max_window_layers = layers: %v", err)
	}
}
