package remat

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// Config says how functions are checkpointed: which values the backward pass saves (a Policy),
// whether recomputations are protected from common-subexpression elimination, and the name
// reports give the block. Its zero value is jax.checkpoint's default: policy NothingSaveable, CSE
// prevented. Config is a small value; its methods return modified copies:
//
//	ys := remat.With(remat.DotsWithNoBatchDimsSaveable).Named("mlp").Checkpoint(fn, x)
type Config struct {
	policy   Policy
	allowCSE bool
	name     string
}

// With returns the default Config with policy p.
func With(p Policy) Config { return Config{policy: p} }

// Policy returns c with policy p.
func (c Config) Policy(p Policy) Config {
	c.policy = p
	return c
}

// PreventCSE returns c with the protection of recomputations against common-subexpression
// elimination switched on (the default) or off, like jax.checkpoint's prevent_cse.
//
// GoMLX v0.26.0 has no optimization barrier, so the protection is a data dependency: the
// recomputation's inputs (and the saved values and RNG state it reads) get an exact -0.0 added,
// computed from the block's output cotangent. This keeps XLA from merging the recomputation back
// into the forward pass (which would keep the activations alive after all) and from scheduling it
// before its cotangent exists. It costs one elementwise addition per input in the backward pass.
// Values fn closes over cannot get the dependency (fn reads them directly); pass values as inputs
// where that matters. The embedded backend never merges nor reorders (in sequential mode), so
// switching it off there only saves those additions.
func (c Config) PreventCSE(prevent bool) Config {
	c.allowCSE = !prevent
	return c
}

// Named returns c with the name residual reports give the checkpointed block. The default is the
// context's scope for CheckpointCtx and "checkpoint N" (N counting the graph's checkpoints) for
// Checkpoint.
func (c Config) Named(name string) Config {
	c.name = name
	return c
}

// Checkpoint returns fn(inputs) and arranges for the backward pass to recompute fn instead of
// keeping its intermediate values, like jax.checkpoint (jax.remat) with the default Config: the
// gradients are the same (bit for bit on the embedded backend), the memory the backward pass keeps
// from fn is its inputs, and the price is a second forward pass of fn.
//
// fn must be a pure graph function of inputs: it may close over other nodes (constants, or values
// computed before; those are treated as extra inputs and receive their gradients), but it must
// build the same graph each time it runs. Non-float inputs and outputs are passed through; outputs
// that are inputs (or other values from before the call) are returned as they are. Use
// CheckpointCtx for functions that use context variables (GoMLX layers).
//
// Checkpoints nest, and several checkpoints may share inputs (parameters shared between blocks).
// A graph that never asks for gradients (inference) computes the same values; see the package
// documentation for the few nodes that remain.
//
// Checkpoint panics, with a message that says what to do instead, when fn returns a nil node,
// builds a different graph when it runs again, draws random numbers from a state it does not take
// as an input (dropout through a context it closes over: use CheckpointCtx), or closes over two
// values one of which is computed from the other (pass them as inputs).
func Checkpoint(fn func(inputs []*graph.Node) []*graph.Node, inputs ...*graph.Node) []*graph.Node {
	return Config{}.Checkpoint(fn, inputs...)
}

// CheckpointCtx is Checkpoint for a function that uses context variables, such as GoMLX layers:
// the gradients of the variables fn reads are the same as without checkpointing (variables shared
// with other blocks receive the sum, as usual). Variables fn changes, such as the random number
// generator's state read by dropout, are reset to their values before fn during the recomputation
// (so dropout draws the same mask) and restored afterwards; so are the graph parameters fn sets
// (such as regularization terms added with train.AddLoss). The recomputation calls fn with
// ctx.Reuse(), since its variables exist by then.
//
// fn may also read variables through another context or close over nodes: such values are
// treated as extra inputs, as in Checkpoint.
func CheckpointCtx(ctx *context.Context, fn func(ctx *context.Context, inputs []*graph.Node) []*graph.Node,
	inputs ...*graph.Node) []*graph.Node {
	return Config{}.CheckpointCtx(ctx, fn, inputs...)
}

// Checkpoint is the package function Checkpoint with settings c.
func (c Config) Checkpoint(fn func(inputs []*graph.Node) []*graph.Node, inputs ...*graph.Node) []*graph.Node {
	if fn == nil {
		panic(fmt.Errorf("remat.Checkpoint: fn is nil"))
	}
	b := newBlock(c, "Checkpoint", inputs)
	b.forward(func() []*graph.Node { return fn(slices.Clone(inputs)) })
	b.rerun = func(inputs []*graph.Node, _ []*graph.Node) []*graph.Node { return fn(inputs) }
	return b.finish(nil)
}

// CheckpointCtx is the package function CheckpointCtx with settings c.
func (c Config) CheckpointCtx(ctx *context.Context, fn func(ctx *context.Context, inputs []*graph.Node) []*graph.Node,
	inputs ...*graph.Node) []*graph.Node {
	if fn == nil || ctx == nil {
		panic(fmt.Errorf("remat.CheckpointCtx: fn and ctx must not be nil"))
	}
	if c.name == "" {
		c.name = ctx.Scope()
	}
	b := newBlock(c, "CheckpointCtx", inputs)
	state := newContextState(ctx, b.g)
	b.forward(func() []*graph.Node { return fn(ctx, slices.Clone(inputs)) })
	state.examine(b)
	// Graph parameters fn set to values it computed (train.AddLoss) leave the block as extra
	// outputs, so that the backward pass reaches fn's values only through the recomputation.
	visible := len(b.ys)
	b.ys = append(b.ys, state.escapingValues()...)
	b.rerun = func(inputs []*graph.Node, varLeaves []*graph.Node) []*graph.Node {
		var barrier *graph.Node
		if !b.cfg.allowCSE {
			barrier = b.pass.barrier
		}
		var ys []*graph.Node
		escaping := state.during(varLeaves, barrier, func() { ys = fn(ctx.Reuse(), inputs) })
		return append(ys, escaping...)
	}
	outs := b.finish(state)
	state.publish(outs[visible:])
	return outs[:visible]
}
