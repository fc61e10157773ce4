// Package layers holds policy-aware layers any model can use: Dense, DenseGeneral, LayerNorm,
// Embed, Dropout, GELU, SiLU and causal self-attention with its softmax in float32 (the tutorial's
// GPT), and the layers of Llama-class models in Hugging Face's layout: Linear (the one place a
// projection is made: weights [out, in], a bias when asked), RMSNorm, rotary position embeddings
// (Rotary, with Llama 3's frequency scaling), the SwiGLU MLP and grouped-query attention (with
// q/k/v biases for Qwen2). Both attentions share one core on projected heads, PlainAttention.
// Each reads the precision policy set on its context scope (mixed.SetPolicy, jmp's set_policy), creates its
// parameters in the policy's param dtype and casts them to the compute dtype where it uses them,
// so their gradients come back in the param dtype; statistics and reductions stay in float32
// (mixed's islands). GoMLX's own layers create parameters in their input's dtype instead:
// mixed.AuditVariables reports the ones that ended up in the wrong dtype.
//
//	mixed.SetPolicy(ctx, mixed.Policy{Param: dtypes.Float32, Compute: dtypes.BFloat16, Output: dtypes.Float32})
//	h := layers.LayerNorm(ctx.In("norm"), x)        // float32 scale and bias, bfloat16 output
//	h = layers.GELU(layers.Dense(ctx.In("up"), h, 4*width))
//	findings := mixed.AuditVariables(ctx)           // none: every parameter is float32
//
// Summarize lists the layers a forward pass calls with their outputs and parameters, like Flax's
// tabulate; a layer of your own appears in it by calling Note.
package layers
