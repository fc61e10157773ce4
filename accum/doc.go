// Package accum trains with batches larger than fit in memory by accumulating gradients over
// micro-batches, exactly: the result equals the whole batch's gradient for any split, including
// micro-batches with different numbers of tokens that count. It is onegpu's counterpart of the JAX
// tutorial's accumulate_gradients and of optax.MultiSteps.
//
// Within one step, Gradients splits every input along axis 0 into k micro-batches, unrolls them in
// the graph (GoMLX v0.26.0 has no loops) and serializes them, so that only one micro-batch's
// activations are alive at a time; losses and metrics travel as a Mean (sum and count), so the
// whole batch's mean is ΣSum/ΣCount rather than a mean of means; gradients are summed in float32
// whatever the compute dtype. TrainStep wraps it, with an optimizer, into a step for
// context.NewExec and graph.ContextProgram:
//
//	lossFn := accum.MaskedLoss(func(ctx *context.Context, batch []*graph.Node) (losses, mask *graph.Node) {
//		return perTokenLoss(ctx, batch[0], batch[1]), batch[2] // tokens, targets, padding mask
//	})
//	if err := accum.CheckSplit(4, inputShapes...); err != nil { ... } // "a batch of 30 examples does not split into 4 ..."
//	step, err := accum.TrainStep(optimizers.Adam().Done(), 4, lossFn)
//	exec, err := context.NewExec(backend, ctx, step) // outputs: loss, metrics...
//
// Or, to compose it with other gradient processing, call Gradients in a step and apply
// Result.Gradients with any optimizer's UpdateGraphWithGradients. With a loss scale (onegpu's mixed
// package), differentiate the scaled loss with ScaledGradients and let the loss-scaled optimizer
// unscale, check and apply once per step:
//
//	opt := mixed.WithLossScale(optimizers.Adam().Done(), mixed.NewDynamicLossScale())
//	step, err := accum.ScaledTrainStep(opt, opt.LossScale(), 4, lossFn)
//
// Across steps, MultiSteps is an optimizer that accumulates float32 gradients in context variables
// and applies its inner optimizer once every k calls; the global step and learning-rate schedules
// advance only then. With a loss scale (MultiSteps.WithLossScale), the window's sum is unscaled and
// checked once, and a non-finite call spoils the whole window: nothing is applied and the scale is
// lowered. Given to TrainStep, a MultiSteps accumulates k micro-batches per call over several calls.
//
//	opt, err := accum.NewMultiSteps(optimizers.Adam().Done(), 8)
//	trainer := train.NewTrainer(backend, ctx, model, loss, opt, nil, nil) // an update every 8 batches
//
// Memory: on the embedded backend (sequential mode), an Adam step of a 6-layer MLP at batch 16384
// holds 0.28 of the activations with 4 micro-batches as with 1, and 0.26 of the peak above its
// inputs (measured on the heap: 0.29), in about the same time; see BenchmarkMicroBatches.
package accum
