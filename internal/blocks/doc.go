// Package blocks builds a small pre-norm transformer-like model from GoMLX ops and context
// variables, with rematerialization applied to its blocks as a Spec says: the stack the design's
// measurements and remat's tests and benchmarks use.
//
// Each block is x += Attention(LayerNorm(x)); x += MLP(LayerNorm(x)): causal multi-head
// self-attention (separate q, k, v and output projections, softmax in float32) and a 4x MLP with
// GELU. Parameters are float32; the arithmetic runs in Config.Compute, with explicit casts, and
// LayerNorm statistics and the softmax in float32. Every matrix product is tagged for remat's
// policies: NameDot for products with weights ("attn_q", "attn_k", "attn_v", "attn_out",
// "mlp_in", "mlp_out"), NameBatchedDot for attention's scores and weighted values ("attn_scores",
// "attn_values").
//
// For a memory report of a given spec and policy:
//
//	spec, _ := blocks.ParseSpec("mlp,attn")
//	policy, _ := remat.ParsePolicy("dots_with_no_batch_dims_saveable")
//	a, err := blocks.Analyze(backend, blocks.Default(), spec, remat.With(policy))
//	// a.Memory.Breakdown[analysis.Activations], a.Residuals.WriteTable(os.Stdout)
package blocks
