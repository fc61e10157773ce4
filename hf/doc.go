// Package hf moves Llama-class models between onegpu and Hugging Face checkpoints: a folder with
// config.json and safetensors weights (model.safetensors, or shards listed by
// model.safetensors.index.json), as transformers' save_pretrained writes and from_pretrained reads.
//
// ReadConfig turns config.json into a models.LlamaConfig and refuses what models.Llama cannot
// compute exactly (another model_type, biases, another activation, a rope_type other than Llama
// 3's), naming the field and the file. Load (ReadConfig, then LoadWeights) reads the weights, in
// float32, bfloat16, float16 or float64, into a GoMLX context's variables by Hugging Face's tensor
// names, "." becoming a scope ("model.layers.0.self_attn.q_proj.weight" is the variable "weight"
// in scope /model/layers/0/self_attn/q_proj, the layout models.Llama uses), converting to the
// param dtype tensor by tensor from memory-mapped files; a missing, extra or misshapen tensor is an
// error naming it, before any variable changes. Export writes config.json and the weights back in
// float32 or bfloat16, sharded above 5 GB, which transformers loads unchanged.
//
//	config, err := hf.Load(ctx, "TinyLlama-1.1B", dtypes.Float32)
//	llama, err := models.NewLlama(config)
//	// ctx.Reuse(): every variable the model reads must be one the checkpoint gave.
//	logits := llama.Logits(ctx.Reuse(), tokens)
//	...
//	err = hf.Export(ctx, "out", config, hf.ExportOptions{DType: dtypes.BFloat16, From: "TinyLlama-1.1B"})
//
// The safetensors format itself is in the subpackage safetensors. reference/hf/make_fixture.py
// makes the test fixtures with transformers and checks an exported folder against them.
package hf
