// Package hf moves models between onegpu and Hugging Face checkpoints: a folder with config.json
// and safetensors weights (model.safetensors, or shards listed by model.safetensors.index.json),
// as transformers' save_pretrained writes and from_pretrained reads.
//
// A Family describes how the models of one model_type are kept in a folder: how config.json reads
// into an onegpu model and back, and the model's tensors (a Layout). The Llama's ("llama", and
// "mistral", on sequences within its sliding window: models.Llama) and Qwen2's ("qwen2": models.Llama with q/k/v
// biases) are registered; a family of one's own is a RegisterFamily call. ReadConfig turns
// config.json into its family's model and refuses what the model cannot compute exactly (another
// activation, a rope_type other than Llama 3's, sequences longer than a sliding window, ...), naming the field and the
// file.
//
// Open is the one way a folder is loaded (onegpu eval, train --init-hf and library code all call
// it): config.json, then the weights, in float32, bfloat16, float16 or float64, into a GoMLX
// context's variables by Hugging Face's tensor names, "." becoming a scope
// ("model.layers.0.self_attn.q_proj.weight" is the variable "weight" in scope
// /model/layers/0/self_attn/q_proj, the layout models.Llama uses), converted to the param dtype
// tensor by tensor from memory-mapped files; a missing, extra or misshapen tensor is an error
// naming it, before any variable changes. Export writes a model back in float32 or bfloat16,
// sharded above 5 GB, which transformers loads unchanged.
//
//	p, err := hf.Open(context.New(), "Qwen2.5-0.5B", dtypes.Float32, 512)
//	llama := p.Model.(models.Llama)
//	logits := llama.Logits(p.Ctx, tokens) // p.Ctx in Reuse mode: every weight comes from the folder
//	...
//	err = hf.Export(ctx, "out", llama, hf.ExportOptions{DType: dtypes.BFloat16, From: "Qwen2.5-0.5B"})
//
// The safetensors format itself is in the subpackage safetensors. reference/hf/make_fixture.py
// makes the test fixtures with transformers and checks an exported folder against them.
package hf
