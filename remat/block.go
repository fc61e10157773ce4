package remat

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/onegpu/onegpu/analysis"
)

// How a checkpoint works (GoMLX v0.26.0 has one custom-gradient hook, IdentityWithCustomGradient,
// with a single input and output; graph.Gradient calls gradient rules in reverse creation order
// and lets them build new nodes, even a nested graph.Gradient):
//
// Forward. fn runs as usual. Each float output leaves the block as
// Identity(StopGradient(y) + tie): StopGradient keeps the backward pass out of the block's
// internal values; the identity's gradient rule records the output's cotangent and passes it on to
// the tie. The tie is an exact -0.0 scalar that reads every entry point (an identity with a custom
// gradient on each float input, variable and captured value) through Where(false, ...): XLA folds
// it away, but for graph.Gradient it is a path from the outputs to the entry points.
//
// Backward. Output wrappers are newer than the entry points, so their rules run first. The first
// entry point reached runs fn again on "leaves" (identities whose gradient stops there), each
// input plus an exact -0.0 computed from a cotangent (see Config.PreventCSE), and takes
// graph.Gradient of sum_i <fn(leaves)_i, cotangent_i> with respect to the leaves. Every entry
// point returns its leaf's gradient.
//
// Saved values. In the recomputation, a value the policy saves is replaced by its forward value
// (plus the barrier), wrapped so that its cotangent is handed to the recomputed value it replaces:
// the ops that produce it run in the backward pass only as far as their gradients need.

// entryKind says where a value that the block differentiates comes from.
type entryKind int

const (
	inputEntry    entryKind = iota // a float input
	variableEntry                  // a context variable's value before the block (CheckpointCtx)
	capturedEntry                  // a float node fn closes over
)

// entry is a value whose gradient the block computes by recomputation.
type entry struct {
	kind  entryKind
	node  *graph.Node
	index int // position in inputs, for inputEntry
}

// block is one call of Checkpoint or CheckpointCtx.
type block struct {
	cfg    Config
	caller string
	g      *graph.Graph
	inputs []*graph.Node

	// The forward pass of fn: nodes [start, end) of g, its outputs and what it tagged.
	start, end int
	ys         []*graph.Node
	tagged     []taggedValue
	saved      map[tagKey]*graph.Node

	// rerun runs fn again with inputs (float ones replaced by leaves) and the variables' leaves.
	rerun func(inputs, variableLeaves []*graph.Node) []*graph.Node

	entries    []entry
	wrapped    []bool        // outputs wrapped to receive a cotangent
	cotangents []*graph.Node // latest cotangent received by each wrapped output

	pass   *pass     // the recomputation being built
	result passGrads // gradients of the entries for the latest backward pass
}

// pass is the state of a recomputation while fn runs again.
type pass struct {
	barrier    *graph.Node   // exact -0.0 (float32) selected in the nested gradient
	extraTerms []*graph.Node // zero terms that connect replaced values to the nested gradient's root
}

// passGrads caches the entries' gradients for one backward pass, identified by the cotangent
// nodes it used.
type passGrads struct {
	key   string
	grads []*graph.Node
}

func newBlock(cfg Config, caller string, inputs []*graph.Node) *block {
	if len(inputs) == 0 {
		panic(fmt.Errorf("remat.%s needs at least one input node (it tells the graph); pass the function's input", caller))
	}
	for i, x := range inputs {
		if x == nil {
			panic(fmt.Errorf("remat.%s: input #%d is nil", caller, i))
		}
		if x.Graph() != inputs[0].Graph() {
			panic(fmt.Errorf("remat.%s: input #%d belongs to graph %q, input #0 to graph %q", caller, i,
				x.Graph().Name(), inputs[0].Graph().Name()))
		}
	}
	return &block{cfg: cfg, caller: caller, g: inputs[0].Graph(), inputs: slices.Clone(inputs), saved: map[tagKey]*graph.Node{}}
}

// sectionLabel names a block's section of the memory timeline (analysis.Section): its name, the
// context scope without the leading "/" for a block of a context ("block_0/mlp"), "checkpoint"
// for one without a name.
func sectionLabel(name string) string {
	if name = strings.TrimPrefix(name, "/"); name == "" {
		return "checkpoint"
	}
	return name
}

// rematerialized reports whether the block recomputes anything (every policy but one that saves
// everything).
func (b *block) rematerialized() bool { return !b.cfg.policy.SavesEverything() }

func (b *block) forward(fn func() []*graph.Node) {
	defer analysis.Section(b.g, sectionLabel(b.cfg.name))()
	b.start = len(b.g.Nodes())
	within(b.g, &frame{b: b, counts: map[Tag]int{}}, func() { b.ys = fn() })
	b.end = len(b.g.Nodes())
	for i, y := range b.ys {
		if y == nil {
			panic(fmt.Errorf("remat.%s: the function returned a nil output #%d", b.caller, i))
		}
		if y.Graph() != b.g {
			panic(fmt.Errorf("remat.%s: the function's output #%d belongs to another graph (%q)", b.caller, i, y.Graph().Name()))
		}
	}
}

// finish finds the entry points and wires the block's outputs. vars is nil for Checkpoint.
func (b *block) finish(vars *contextState) []*graph.Node {
	rec := b.newRecord()
	if !b.rematerialized() {
		b.register(rec)
		return slices.Clone(b.ys)
	}
	allowed := map[*graph.Node]bool{}
	for i, x := range b.inputs {
		allowed[x] = true
		if differentiable(x) {
			b.entries = append(b.entries, entry{kind: inputEntry, node: x, index: i})
		}
	}
	if vars != nil {
		for _, n := range vars.before {
			allowed[n] = true
		}
		for _, v := range vars.differentiable {
			b.entries = append(b.entries, entry{kind: variableEntry, node: vars.before[v]})
		}
	}
	for _, c := range b.captured(allowed) {
		b.entries = append(b.entries, entry{kind: capturedEntry, node: c})
		rec.inputs[c.Id()] = "captured"
	}
	b.register(rec)
	if len(b.entries) == 0 {
		return slices.Clone(b.ys) // nothing to differentiate
	}
	return b.wire()
}

// wire builds the entry points and the tie, and wraps the outputs (see the comment at the top).
func (b *block) wire() []*graph.Node {
	never := graph.Const(b.g, false)
	var tie *graph.Node
	for j, e := range b.entries {
		point := graph.IdentityWithCustomGradient(e.node, func(_, v *graph.Node) *graph.Node { return b.gradient(j, v) })
		tie = sum(tie, graph.Where(never, graph.ConvertDType(firstElement(point), dtypes.Float32), negativeZero(b.g)))
	}
	outs := make([]*graph.Node, len(b.ys))
	b.wrapped = make([]bool, len(b.ys))
	b.cotangents = make([]*graph.Node, len(b.ys))
	for i, y := range b.ys {
		if !differentiable(y) || int(y.Id()) < b.start {
			outs[i] = y // passed through: non-float, or a value from before the block
			continue
		}
		b.wrapped[i] = true
		tied := graph.Add(graph.StopGradient(y), graph.ConvertDType(tie, y.DType()))
		outs[i] = graph.IdentityWithCustomGradient(tied, func(_, v *graph.Node) *graph.Node {
			b.cotangents[i] = v
			return v // on to the tie, hence to the entry points
		})
	}
	return outs
}

// gradient returns the gradient of entry j for the backward pass whose cotangent reached the entry
// as v, recomputing fn once per backward pass.
func (b *block) gradient(j int, v *graph.Node) *graph.Node {
	fresh := b.cotangentsBehind(v)
	if len(fresh) == 0 {
		return nil
	}
	key := ""
	for _, i := range fresh {
		key += fmt.Sprintf("%d:%d ", i, b.cotangents[i].Id())
	}
	if key != b.result.key {
		b.result = passGrads{key: key, grads: b.recompute(fresh)}
	}
	return b.result.grads[j]
}

// cotangentsBehind returns the outputs whose latest cotangent v derives from: those received in
// the backward pass that reached the entry point with v. (A graph may be differentiated several
// times; a cotangent left from another pass is not behind v.)
func (b *block) cotangentsBehind(v *graph.Node) []int {
	output := map[*graph.Node]int{}
	oldest := math.MaxInt
	for i, c := range b.cotangents {
		if c != nil {
			output[c] = i
			oldest = min(oldest, int(c.Id()))
		}
	}
	var fresh []int
	seen := map[*graph.Node]bool{}
	stack := []*graph.Node{v}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[n] || int(n.Id()) < oldest {
			continue
		}
		seen[n] = true
		if i, ok := output[n]; ok {
			fresh = append(fresh, i)
			continue
		}
		stack = append(stack, n.Inputs()...)
	}
	slices.Sort(fresh)
	return fresh
}

// recompute runs fn again for the outputs in fresh and returns the entries' gradients.
func (b *block) recompute(fresh []int) []*graph.Node {
	defer analysis.Section(b.g, sectionLabel(b.cfg.name)+" backward")()
	b.pass = &pass{barrier: b.barrier(b.cotangents[fresh[0]])}
	defer func() { b.pass = nil }()
	leaves := make([]*graph.Node, len(b.entries))
	inputs := slices.Clone(b.inputs)
	var variableLeaves []*graph.Node
	for j, e := range b.entries {
		if e.kind == capturedEntry {
			leaves[j] = e.node // cannot be replaced in fn's closure: differentiate at the node itself
			continue
		}
		x := e.node
		if !b.cfg.allowCSE {
			x = graph.Add(x, graph.ConvertDType(b.pass.barrier, x.DType()))
		}
		leaves[j] = graph.IdentityWithCustomGradient(x, stopHere)
		if e.kind == inputEntry {
			inputs[e.index] = leaves[j]
		} else {
			variableLeaves = append(variableLeaves, leaves[j])
		}
	}
	var ys []*graph.Node
	within(b.g, &frame{b: b, recompute: true, counts: map[Tag]int{}}, func() { ys = b.rerun(inputs, variableLeaves) })
	if len(ys) != len(b.ys) {
		panic(fmt.Errorf("remat.%s: the function returned %d outputs when recomputed, %d the first time: "+
			"a checkpointed function must build the same graph each time it runs", b.caller, len(ys), len(b.ys)))
	}
	terms := b.pass.extraTerms
	for _, i := range fresh {
		if !b.wrapped[i] {
			continue
		}
		if !ys[i].Shape().Equal(b.ys[i].Shape()) {
			panic(fmt.Errorf("remat.%s: output #%d is %s when recomputed, %s the first time: "+
				"a checkpointed function must build the same graph each time it runs", b.caller, i, ys[i].Shape(), b.ys[i].Shape()))
		}
		cotangent := b.cotangents[i]
		y := graph.IdentityWithCustomGradient(ys[i], func(_, _ *graph.Node) *graph.Node { return cotangent })
		terms = append(terms, graph.ConvertDType(graph.ReduceAllSum(y), dtypes.Float32))
	}
	var root *graph.Node
	for _, t := range terms {
		root = sum(root, t)
	}
	grads := graph.Gradient(root, append(slices.Clone(leaves), b.pass.barrier)...)
	return grads[:len(leaves)]
}

// barrier returns the recomputation's data dependency: an exact -0.0 computed from cotangent when
// CSE is prevented, a constant -0.0 otherwise. Either way it is an identity whose gradient stops
// there, selected in the nested gradient so that values that read it are differentiated.
func (b *block) barrier(cotangent *graph.Node) *graph.Node {
	zero := negativeZero(b.g)
	if !b.cfg.allowCSE {
		first := graph.StopGradient(cotangent)
		if first.Rank() > 0 {
			first = graph.Slice(first, zeroIndices(first.Rank())...)
		}
		first = graph.ConvertDType(graph.Reshape(first), dtypes.Float32)
		finite := graph.Where(graph.IsFinite(first), first, graph.ScalarZero(b.g, dtypes.Float32))
		zero = graph.Mul(graph.Abs(finite), zero) // |finite| * -0.0 == -0.0; XLA does not fold a float x*0
	}
	return graph.IdentityWithCustomGradient(zero, stopHere)
}

// useSaved returns the value to use in a recomputation in place of recomputed, whose forward
// value the policy saves: the forward value, with recomputed's gradient delivered to recomputed.
func (b *block) useSaved(forward, recomputed *graph.Node) *graph.Node {
	if !differentiable(recomputed) {
		return forward
	}
	var cotangent *graph.Node
	point := graph.IdentityWithCustomGradient(recomputed, func(_, _ *graph.Node) *graph.Node { return cotangent })
	// The term is zero and never computed; it only makes the nested gradient visit point, after
	// the wrapper below (which is newer) has received its cotangent.
	b.pass.extraTerms = append(b.pass.extraTerms,
		graph.Where(graph.Const(b.g, false), graph.ConvertDType(firstElement(point), dtypes.Float32), negativeZero(b.g)))
	value := graph.Add(graph.StopGradient(forward), graph.ConvertDType(b.pass.barrier, forward.DType()))
	return graph.IdentityWithCustomGradient(value, func(_, v *graph.Node) *graph.Node {
		cotangent = v
		return nil
	})
}

// differentiable reports whether gradients flow through x: a non-empty float value.
func differentiable(x *graph.Node) bool {
	return x.DType().IsFloat() && x.Shape().Size() > 0 && x.NumOutputs() == 1
}

// stopHere is the gradient rule of leaves and barriers: nothing flows further.
func stopHere(_, _ *graph.Node) *graph.Node { return nil }

// negativeZero is a float32 -0.0 constant: adding it leaves every value bit for bit as it is
// (adding +0.0 would turn -0.0 into +0.0). A fresh constant: GoMLX's scalar cache does not tell
// -0.0 from 0.0.
func negativeZero(g *graph.Graph) *graph.Node {
	return graph.Const(g, float32(math.Copysign(0, -1)))
}

func zeroIndices(rank int) []graph.SliceAxisSpec {
	specs := make([]graph.SliceAxisSpec, rank)
	for i := range specs {
		specs[i] = graph.AxisElem(0)
	}
	return specs
}

func sum(acc, x *graph.Node) *graph.Node {
	if acc == nil {
		return x
	}
	return graph.Add(acc, x)
}

// firstElement returns x[0, ..., 0] as a scalar: the cheapest value that still makes x an input of
// the tie. (A sum of x would be a full pass over it that the embedded backend really runs, since
// only XLA folds the tie away.)
func firstElement(x *graph.Node) *graph.Node {
	if x.Rank() == 0 {
		return x
	}
	specs := make([]graph.SliceAxisSpec, x.Rank())
	for i := range specs {
		specs[i] = graph.AxisElem(0)
	}
	return graph.Reshape(graph.Slice(x, specs...))
}
