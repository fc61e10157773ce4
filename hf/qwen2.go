package hf

import "github.com/onegpu/onegpu/models"

// Qwen2's family (model_type "qwen2": Qwen2 and Qwen2.5), read and written as Qwen2ForCausalLM: the
// Llama's layout and config.json fields with biases on q_proj, k_proj and v_proj (a models.Llama
// with QKVBias), when no sliding window applies.

// qwen2Class is the class transformers builds for "qwen2".
const qwen2Class = "Qwen2ForCausalLM"

// qwen2Fields are Qwen2's config.json fields beyond the Llama's: every layer attends to every
// earlier position.
var qwen2Fields = map[string]any{"use_sliding_window": false}

func init() {
	RegisterFamily(Family{ModelType: "qwen2", Architecture: qwen2Class, Read: readQwen2, Describe: func(model any) (Layout, bool) {
		l, ok := model.(models.Llama)
		return llamaLayout{llama: l, modelType: "qwen2", class: qwen2Class, fields: qwen2Fields}, ok && l.Config.QKVBias && l.Config.SlidingWindow == 0
	}})
}

// readQwen2 reads a "qwen2" config.json whose sliding window never applies: use_sliding_window
// false, or a window at least as long as the positions, or no layer at or past max_window_layers
// (transformers' rule); with transformers 5's layer_types, every layer "full_attention".
func readQwen2(r *ConfigReader) (Layout, error) {
	if types, ok := r.Value("layer_types").([]any); ok {
		for i, t := range types {
			if t != "full_attention" {
				return nil, r.Errorf("layer_types", "layer %d is %v: the Llama's layers attend to every earlier position (\"full_attention\")", i, t)
			}
		}
	}
	sliding, err := r.BoolOr("use_sliding_window", false)
	if err != nil {
		return nil, err
	}
	if sliding {
		positions, err := r.Int("max_position_embeddings")
		if err != nil {
			return nil, err
		}
		window, err := r.IntOr("sliding_window", positions) // null: no window
		if err != nil {
			return nil, err
		}
		layers, err := r.Int("num_hidden_layers")
		if err != nil {
			return nil, err
		}
		from, err := r.IntOr("max_window_layers", 28) // transformers' default
		if err != nil {
			return nil, err
		}
		if window < positions && from < layers {
			return nil, r.Errorf("use_sliding_window", "true with sliding_window %d shorter than max_position_embeddings %d from layer %d (max_window_layers) of %d: the Llama attends to every earlier position",
				window, positions, from, layers)
		}
	}
	return readLlamaLayout(r, "qwen2", qwen2Class, qwen2Fields, true)
}
