// Package models holds the tutorial's models — its MLP classifier and its GPT — built from onegpu's
// policy-aware layers (package layers): each model sets its precision policy on its context scope,
// so parameters are created in the policy's param dtype and computed with in its compute dtype,
// and matmul outputs are tagged for remat policies. Parameter names follow the tutorial's Flax
// code, so weights move between onegpu and the JAX reference unchanged. Both take part in
// training through train.Model (train.GPT, train.Classifier), like a model of your own.
//
//	config, _ := models.Preset("tutorial") // 155,877,376 parameters
//	policy, _ := mixed.ParsePolicy("params=float32,compute=bfloat16,output=float32")
//	gpt, _ := models.NewGPT(config, policy)
//	gpt.Remat = remat.Spec{MLP: true, Attention: true}
//	logits := gpt.Logits(ctx, tokens) // [batch, length, vocab] float32
package models
