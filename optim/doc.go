// Package optim processes gradients through a chain of transformations that ends in a GoMLX
// optimizer, the way optax.chain does: loss scaling with an atomic skip of non-finite steps,
// micro-batch accumulation within a step (accum.Gradients) and across steps (MultiSteps), clipping,
// and the optimizer (GoMLX's Adam, SGD, RMSProp, unchanged). Each is a value; the chain is checked
// when it is built, and an order that cannot work is an error naming both links, never a panic.
//
//	chain, err := optim.NewChain(
//		optim.MicroBatches(4),                            // the batch's gradients over 4 micro-batches
//		optim.LossScale(mixed.NewDynamicLossScale()),     // scale, unscale, skip a non-finite step
//		optim.ClipByGlobalNorm(1),                        // after LossScale: it sees true gradients
//		optim.MultiSteps(8),                              // one update every 8 steps
//		optim.Apply(optimizers.Adam().Done()))            // the optimizer comes last
//	exec, err := context.NewExec(backend, ctx, chain.StepFn(lossFn)) // outputs: loss, metrics...
//
// A Chain is also an optimizers.Interface, so GoMLX's train.Trainer takes it as its optimizer (then
// without MicroBatches, which needs the loss function). On a skipped step the Trainer's
// moving-average losses see the last finite loss instead of NaN, and Finite(ctx, g) gives the
// step's finite flag to the rest of the graph, so your own state can ignore the step too.
//
// The links keep their state in context variables (the loss scale under /mixed/loss_scale, the
// skip counter and MultiSteps' accumulators under /optim), so checkpoints carry it. A Transform of
// your own is one method, Apply(update, next); one that gates the rest of the chain uses Rollback.
//
// Adam8bit is Adam whose moments are stored in 8 bits per value (block-wise, one float32 scale per
// block), a quarter of Adam's state; it goes where GoMLX's Adam goes, Apply(optim.Adam8bit().Done()).
// Adafactor is optax.adafactor with the schedule's learning rate: factored second moments for
// matrices and no first moment, about 0.04x Adam's state on the small GPT; Apply(optim.Adafactor().Done()).
package optim
