// Package mixed trains models in mixed precision: parameters kept in float32, arithmetic in
// bfloat16 (or float16 on XLA), reductions in float32 islands, and loss scaling whose non-finite
// steps are skipped atomically. It is onegpu's counterpart of jmp (policies, casts, loss scales)
// with optax's habit of wrapping an optimizer rather than reimplementing it.
//
// A precision Policy names three dtypes and is parsed from jmp's grammar:
//
//	policy, err := mixed.ParsePolicy("params=float32,compute=bfloat16,output=float32") // or "p=f32,c=bf16,o=f32"
//	if err := policy.Validate(backend); err != nil { ... } // e.g. float16 on the embedded backend
//
// A model reads its float32 variables, casts them to the compute dtype where it uses them (their
// gradients come back in float32), keeps sums, softmax, cross-entropy and LayerNorm statistics in
// float32 with the island functions (Sum, Mean, Softmax, LogSoftmax, LogSumExp,
// SoftmaxCrossEntropy*, LayerNormStats, Normalize), and casts its outputs to the output dtype:
//
//	w := ctx.VariableWithValue("w", init).ValueGraph(g)          // float32
//	y := graph.Dot(policy.CastToCompute(x), policy.CastToCompute(w)) // bfloat16
//	loss := mixed.SoftmaxCrossEntropyMean(logits, labels, mask, policy.Output)
//
// A loss scale takes part in a gradient chain (onegpu's optim package), which scales the loss,
// unscales the gradients in float32, checks them and skips a non-finite step atomically:
//
//	chain, err := optim.NewChain(optim.LossScale(mixed.NewDynamicLossScale()), optim.Apply(optimizers.Adam().Done()))
//	chain.UpdateGraph(ctx, g, loss) // or chain.StepFn(lossFn) with micro-batches
//
// The loss scale's state lives in context variables, so checkpoints carry it.
//
// The islands that would otherwise keep float32 copies of activations for the backward pass
// (Softmax, LogSoftmax, LogSumExp, the cross-entropies, Normalize) have closed-form gradients
// computed in float32 from what is kept anyway, so 16-bit compute halves the activations even on
// a backend that does not fuse (GoMLX's embedded one).
//
// Gradients of broadcasts (bias and LayerNorm gain gradients) are summed in float32 by the gradient
// rules that package vjp installs when it is imported; this package imports it and relies on them.
package mixed

import _ "github.com/onegpu/onegpu/vjp" // onegpu's gradient rules, installed at import
