// Package accum trains with batches larger than fit in memory by accumulating gradients over
// micro-batches, exactly: the result equals the whole batch's gradient for any split, including
// micro-batches with different numbers of tokens that count. It is onegpu's counterpart of the JAX
// tutorial's accumulate_gradients.
//
// Within one step, Gradients splits every input along axis 0 into k micro-batches, unrolls them in
// the graph (GoMLX v0.26.0 has no loops) and serializes them, so that only one micro-batch's
// activations are alive at a time; losses and metrics travel as a Mean (sum and count), so the
// whole batch's mean is ΣSum/ΣCount rather than a mean of means; gradients are summed in float32
// whatever the compute dtype.
//
//	lossFn := accum.MaskedLoss(func(ctx *context.Context, batch []*graph.Node) (losses, mask *graph.Node) {
//		return perTokenLoss(ctx, batch[0], batch[1]), batch[2] // tokens, targets, padding mask
//	})
//	if err := accum.CheckSplit(4, inputShapes...); err != nil { ... } // "a batch of 30 examples does not split into 4 ..."
//	r := accum.Gradients(ctx, 4, inputs, lossFn) // r.Loss, r.Metrics, r.Gradients of the whole batch
//
// It takes part in a gradient chain through onegpu's optim package, whose MicroBatches link calls
// Gradients (ScaledGradients with a loss scale) and hands the result to the other links; across
// steps, optim.MultiSteps accumulates the same way in context variables:
//
//	chain, err := optim.NewChain(optim.MicroBatches(4), optim.LossScale(mixed.NewDynamicLossScale()),
//		optim.MultiSteps(2), optim.Apply(optimizers.Adam().Done()))
//	exec, err := context.NewExec(backend, ctx, chain.StepFn(lossFn)) // outputs: loss, metrics...
//
// Memory: on the embedded backend (sequential mode), an Adam step of a 6-layer MLP at batch 16384
// holds 0.28 of the activations with 4 micro-batches as with 1, and 0.26 of the peak above its
// inputs (measured on the heap: 0.29), in about the same time; see BenchmarkMicroBatches.
package accum
