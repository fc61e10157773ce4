// Package models holds the tutorial's models — its MLP classifier and its GPT — and Llama-class
// decoders (Llama 2 and 3, TinyLlama), built from onegpu's policy-aware layers (package layers):
// the layers read the precision policy set on the context (mixed.SetPolicy), so parameters are
// created in the policy's param dtype and computed with in its compute dtype, and matmul outputs
// are tagged for remat policies. The tutorial's models name their parameters as its Flax code
// does, so weights move between onegpu and the JAX reference unchanged; the Llama names them as
// Hugging Face does ("model/layers/0/self_attn/q_proj/weight"), with presets of published shapes
// (LlamaPresets). A config holds a model's shape only; how a run trains it (batch, policy, remat,
// optimizer) is train.Config's. The GPT and the classifier are train.Models (input shapes, a loss
// as sums and counts, metric names), like a model of your own, and mark their blocks with
// remat.Block so that a run chooses what is rematerialized:
//
//	config, _ := models.Preset("tutorial") // 155,877,376 parameters
//	gpt, _ := models.NewGPT(config)
//	mixed.SetPolicy(ctx, must(mixed.ParsePolicy("params=float32,compute=bfloat16,output=float32")))
//	remat.SetBlocks(ctx, remat.With(remat.NothingSaveable), "mlp", "attn")
//	logits := gpt.Logits(ctx, tokens) // [batch, length, vocab] float32
//
//	llama, _ := models.NewLlama(models.LlamaPresets["llama-3.2-1b"]) // 1,235,814,400 parameters
//	remat.SetBlocks(ctx, remat.With(remat.NothingSaveable), "block")         // rematerialize each layer
//	sum, count := llama.CrossEntropy(ctx, tokens, labels, nil)                        // summed cross-entropy
//
// Adding a model is one file here (its config, presets and a type with the three methods of
// train.Model) and one registration (recipes.Register) for `onegpu --model` and train.Load.
package models
