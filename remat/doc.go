// Package remat trades compute for memory in training, the way jax.checkpoint (jax.remat) does:
// a checkpointed function's intermediate values are not kept for the backward pass but recomputed
// from its inputs when the gradients need them.
//
//	y := remat.Checkpoint(func(in []*graph.Node) []*graph.Node {
//		h := graph.Tanh(remat.NameDot(graph.Dot(in[0], in[1]), "hidden"))
//		return []*graph.Node{graph.Dot(h, in[2])}
//	}, x, w1, w2)[0]
//
// Checkpoint keeps the function's signature (inputs in, outputs out) and its gradients, bit for bit
// on the embedded backend; CheckpointCtx does the same for functions that use context variables
// (GoMLX layers), including dropout, whose masks the recomputation draws again identically.
// Checkpoints nest, share parameters, and treat values the function closes over as extra inputs.
//
// # Policies and names
//
// A Policy chooses values to save from the forward pass instead of recomputing them, as
// jax.checkpoint_policies do: NothingSaveable (the default), EverythingSaveable, DotsSaveable,
// DotsWithNoBatchDimsSaveable, SaveOnlyTheseNames, SaveAnyNamesButThese, combined with
// SaveFromBoth and read from text with ParsePolicy. A policy sees only tagged values: Name tags a
// value like jax.ad_checkpoint.checkpoint_name; since GoMLX v0.26.0 cannot intercept op creation,
// the dot policies see only products that layers tag with NameDot or NameBatchedDot. A Config
// carries the policy, the CSE setting and a block name:
//
//	ys := remat.With(remat.DotsWithNoBatchDimsSaveable).CheckpointCtx(ctx.In("mlp"), mlp, x)
//
// Saving pays off for values whose producers' gradients do not read them back: a product (the
// gradient of x·W reads x and W, not the product) saves its recomputation; an elementwise op whose
// gradient reads its own output (Tanh, Exp) is still recomputed for that gradient.
//
// # What the backward pass keeps
//
// A model that leaves the choice of what to rematerialize to the run marks its blocks with Block
// (by kind, e.g. "block"; the GPT of package models marks "mlp", "attn" and "block"); SetBlocks on a
// context scope, or train.Config.Remat, selects the kinds that are checkpointed, and BlockKinds
// says which kinds a graph built (a kind asked for and not built is a trainer's error):
//
//	remat.SetBlocks(ctx, remat.With(remat.NothingSaveable), "block")
//	x = graph.Add(x, remat.Block(ctx.In("block_0"), "block", branch, x)[0])
//
// Residuals reports, for each checkpointed block of a built program, the values the backward pass
// reads from the forward pass (name, kind, op, shape, dtype, bytes), with totals per block, per
// policy and outside the blocks. ParseKinds reads the kinds a command line names ("none", "mlp",
// "attn", "mlp,attn", "block"); internal/blocks.Spec, the same choice for a transformer as a value,
// is what onegpu's design measurements and tests apply to a small model.
//
// # How it works, and what it costs
//
// GoMLX v0.26.0 has one public custom-gradient hook, graph.IdentityWithCustomGradient. A
// checkpoint runs fn, lets its outputs leave through StopGradient, and wraps each output in an
// identity whose gradient rule records the output's cotangent. Every float input, variable and
// captured value gets an identity with a custom gradient ("entry point") that the outputs read
// through a "tie": an exact -0.0 that graph.Gradient sees as a path and XLA folds away. The first
// entry point the backward pass reaches runs fn again on fresh leaves and takes a nested
// graph.Gradient; each entry point returns its share.
//
// Without an optimization barrier in GoMLX v0.26.0, the recomputation gets a data dependency on
// the cotangent that is an exact -0.0 (Where(IsFinite(v), v, 0) scaled by -0.0; XLA does not fold a
// float x*0), so that XLA neither merges it back into the forward pass (CSE) nor schedules it
// early. Config.PreventCSE(false) removes it, like jax.checkpoint's prevent_cse=False.
//
// A graph that asks for no gradient (inference) computes the same values. On XLA the extra nodes
// fold away. The embedded backend runs them: per float input or variable of a block, a copy
// (when the value is still used elsewhere) and a sum of it; per output, one addition of a scalar,
// in place. A train step recomputes each checkpointed function once (about 1.2x the FLOPs for
// "mlp,attn" on internal/blocks), and sequential mode (onegpu's default on the embedded backend)
// runs the recomputation block by block, right where its gradients are needed.
package remat
