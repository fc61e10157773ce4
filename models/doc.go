// Package models holds the tutorial's models — its MLP classifier and its GPT — and Llama-class
// decoders (Llama 2 and 3, TinyLlama), built from onegpu's policy-aware layers (package layers):
// each model sets its precision policy on its context scope, so parameters are created in the
// policy's param dtype and computed with in its compute dtype, and matmul outputs are tagged for
// remat policies. The tutorial's models name their parameters as its Flax code does, so weights
// move between onegpu and the JAX reference unchanged; the Llama names them as Hugging Face does
// ("model/layers/0/self_attn/q_proj/weight"), with presets of published shapes (LlamaPresets). They
// take part in training through train.Model, like a model of your own.
//
//	config, _ := models.Preset("tutorial") // 155,877,376 parameters
//	policy, _ := mixed.ParsePolicy("params=float32,compute=bfloat16,output=float32")
//	gpt, _ := models.NewGPT(config, policy)
//	gpt.Remat = remat.Spec{MLP: true, Attention: true}
//	logits := gpt.Logits(ctx, tokens) // [batch, length, vocab] float32
//
//	llama, _ := models.NewLlama(models.LlamaPresets["llama-3.2-1b"], policy) // 1,235,814,400 parameters
//	remat.SetBlocks(ctx, remat.With(remat.NothingSaveable), "block")         // rematerialize each layer
//	sum, count := llama.Loss(ctx, tokens, labels, nil)                        // summed cross-entropy
package models
