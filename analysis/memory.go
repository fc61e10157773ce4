package analysis

import (
	"fmt"
	"sort"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/onegpu/onegpu/internal/gomlxcompat"
)

// MaxTensorElements bounds the values of any one tensor onegpu counts — a model config may ask
// for, a data file may hold — and of a model's parameter count: 2^46 (about 7·10^13, 256 TiB in
// float32). Memory estimates add up thousands of tensors' bytes in int64, which stays exact below
// it; a size past it is a typo, not a model.
const MaxTensorElements = 1 << 46

// Kind says what a buffer holds, for the breakdown of memory at the peak.
type Kind int

const (
	// Parameters: trainable variables, their casts (e.g. bfloat16 copies) and their updated values.
	Parameters Kind = iota
	// FrozenWeights: frozen weights (FreezeVariable: an adapter's base, quantized codes) and what
	// is computed from them alone (casts, dequantized copies).
	FrozenWeights
	// OptimizerState: other variables (Adam moments, step counters, loss scales) and values
	// computed from them.
	OptimizerState
	// Gradients: weight-shaped values of the backward pass that depend on the data.
	Gradients
	// Activations: the batch and everything computed from it that is not a gradient: forward
	// activations, their cotangents, recomputed activations.
	Activations
	// Other: constants, small values (under 1 KiB: scalars, schedules, counters) and the scratch
	// space of the op running at the peak.
	Other
	numKinds
)

var kindNames = [numKinds]string{"parameters", "frozen_weights", "optimizer_state", "gradients", "activations", "other"}

// String returns the kind's name as used in JSON output ("optimizer_state", ...).
func (k Kind) String() string { return kindNames[k] }

// Kinds lists all kinds in display order.
func Kinds() []Kind {
	return []Kind{Parameters, FrozenWeights, OptimizerState, Gradients, Activations, Other}
}

// Tensor describes one buffer alive at the peak.
type Tensor struct {
	Node  *graph.Node
	Bytes int64
	Kind  Kind
	// Scratch marks the temporary space Node's op uses while it runs (blocked matmul copies).
	Scratch bool
}

// Label names the tensor for people: its alias or parameter name when it has one, else its op.
func (t Tensor) Label() string {
	if t.Scratch {
		return t.Node.Type().String() + " scratch"
	}
	if alias := t.Node.GetAlias(); alias != "" {
		return alias
	}
	if t.Node.Type() == graph.NodeTypeParameter {
		return t.Node.GetParameterName()
	}
	return t.Node.Type().String()
}

// Memory is the result of Analyze. Byte counts are exact sizes of the buffers involved.
type Memory struct {
	// ArgumentBytes are the parameters' buffers (variables and data), held before the step starts.
	ArgumentBytes int64
	// ConstantBytes are the graph's constants, held by the compiled program.
	ConstantBytes int64
	// PeakBytes is the most memory held at once while the program runs: arguments not yet
	// released plus live intermediate values (outputs included).
	PeakBytes int64
	// PeakTempBytes is PeakBytes - ArgumentBytes: what the step allocates on top of its inputs.
	// This is what a heap measurement above the pre-step baseline sees.
	PeakTempBytes int64
	// PeakAt is the node whose execution reaches the peak.
	PeakAt *graph.Node
	// AtPeak lists the largest buffers alive at the peak, largest first (at most TopTensors).
	AtPeak []Tensor
	// Live lists every buffer alive at the peak, largest first (AtPeak is its head): what a
	// breakdown finer than Kind reads (e.g. the attention scores among the activations).
	Live []Tensor
	// Breakdown splits PeakBytes by kind.
	Breakdown [numKinds]int64
	// Timeline holds the live bytes while each executed node runs (its inputs, its output, the
	// other buffers alive and its scratch space), in execution order, for plots: its largest value
	// is PeakBytes.
	Timeline []int64
	// Steps describe the executed nodes in execution order (Timeline's order): which node, and
	// the sections (Section) it belongs to.
	Steps []Step
	// ExecutedNodes counts the nodes the program runs (those its outputs depend on).
	ExecutedNodes int
	// AllocatedBytes is what the embedded backend allocates while running the step from empty
	// buffer pools, when nothing is collected meanwhile: it takes a freed buffer of the same dtype
	// and size from its pool when there is one (simplego keeps one pool per dtype and size) and
	// allocates otherwise. It is what a step's buffers add to the Go heap before the next
	// collection (freed buffers of many sizes wait in the pools until then), and, unlike a sampled
	// heap peak, it can be measured exactly (internal/heapmeter.Allocated). At least PeakTempBytes
	// less the buffers reused from donated arguments.
	AllocatedBytes int64
	// FLOPs counts floating-point operations (matmuls exactly, elementwise ops as one per output
	// element, reductions as one per input element); MatmulFLOPs is the matmul part.
	FLOPs, MatmulFLOPs int64
}

// Step is one executed node of Analyze's simulation.
type Step struct {
	Node graph.NodeId
	// Block is the outermost section the node was created in (Section: a remat block, its
	// recomputation "... backward", a model's "loss", the "optimizer"'s update); for a node in
	// none, "forward" when the loss depends on it, "backward" otherwise (gradients).
	Block string
	// Section is the innermost section the node was created in ("attention", "loss", a nested
	// remat block), or Block when it is in no other.
	Section string
}

// TopTensors is the number of buffers Memory.AtPeak lists.
const TopTensors = 10

// Analyze simulates the program in sequential mode (GoMLX's go:ops_sequential, onegpu's default
// on the embedded backend): nodes run in creation order, a buffer is released right after its
// last use, and an elementwise op writes over an input it is the last user of. It returns the
// peak of live bytes, where it happens, what is alive there, and the FLOP count.
//
// It models the backend the program is built for: on the embedded backend each matmul's scratch
// buffers count while it runs (its blocked copies of the operands and the accumulator: at
// Llama 3's head, a 1.2 GiB copy of the [128256, 4096] weight for every chunk of the loss); XLA
// allocates none of them, so a program built for XLA counts its values alone. Peaks under a
// parallel executor or XLA differ otherwise too (XLA reorders, fuses and rematerializes); on XLA
// the compiled memory statistics are XLA's own account.
func Analyze(p *Program) *Memory {
	nodes := p.Graph.Nodes()
	needed := NeededNodes(p.Graph, p.Outputs)
	kinds := classify(p, needed)
	m := &Memory{}
	embedded := gomlxcompat.IsSimpleGo(p.Graph.Backend()) // its matmuls' scratch counts
	outer, inner := nodeSections(p.Graph)
	var forward []bool
	if p.Loss != nil {
		forward = NeededNodes(p.Graph, []*graph.Node{p.Loss})
	}

	uses := make([]int, len(nodes))
	isOutput := make([]bool, len(nodes))
	for _, n := range nodes {
		if needed[n.Id()] {
			for _, in := range n.Inputs() {
				uses[in.Id()]++
			}
		}
	}
	for _, o := range p.Outputs {
		uses[o.Id()]++
		isOutput[o.Id()] = true
	}

	live := map[graph.NodeId]int64{} // buffers alive now: id -> bytes
	owned := make([]bool, len(nodes))
	var liveBytes int64
	for _, n := range nodes {
		if !needed[n.Id()] {
			continue
		}
		switch n.Type() {
		case graph.NodeTypeParameter:
			bytes := bufferBytes(n)
			m.ArgumentBytes += bytes
			live[n.Id()] = bytes
			liveBytes += bytes
			owned[n.Id()] = p.Donated[n.Id()]
		case graph.NodeTypeConstant:
			m.ConstantBytes += bufferBytes(n)
		}
	}
	peakLive := map[graph.NodeId]int64{}
	var peakScratch int64
	m.PeakBytes = liveBytes
	var pool bufferPool

	used := make([]int, len(nodes))
	for _, n := range nodes {
		if !needed[n.Id()] || n.Type() == graph.NodeTypeParameter || n.Type() == graph.NodeTypeConstant {
			continue
		}
		m.ExecutedNodes++
		flops, matmul := nodeFLOPs(n)
		m.FLOPs += flops
		m.MatmulFLOPs += matmul

		// An input is owned by this op when the executor owns its buffer and this is its last use.
		inputs := n.Inputs()
		lastUse := make([]bool, len(inputs))
		for i, in := range inputs {
			lastUse[i] = owned[in.Id()] && !isOutput[in.Id()] && uses[in.Id()]-used[in.Id()] == 1
		}
		reused := reusedInput(n, lastUse)
		if reused >= 0 {
			// The output takes over the input's buffer: same bytes, new owner.
			in := inputs[reused]
			liveBytes -= live[in.Id()]
			delete(live, in.Id())
		}
		bytes := bufferBytes(n)
		live[n.Id()] = bytes
		liveBytes += bytes
		owned[n.Id()] = true
		if reused < 0 && bytes > 0 {
			pool.take(n.DType(), n.Shape().Size())
		}
		var scratch int64
		if embedded {
			scratch = matmulScratchBytes(n)
			for _, b := range matmulScratch(n) {
				pool.take(b.dtype, b.elements)
			}
			for _, b := range matmulScratch(n) {
				if !b.kept {
					pool.give(b.dtype, b.elements)
				}
			}
		}
		if liveBytes+scratch > m.PeakBytes {
			m.PeakBytes, m.PeakAt, peakScratch = liveBytes+scratch, n, scratch
			clear(peakLive)
			for id, b := range live {
				peakLive[id] = b
			}
		}
		m.Timeline = append(m.Timeline, liveBytes+scratch)
		m.Steps = append(m.Steps, stepOf(n, outer, inner, forward))
		for i, in := range inputs {
			used[in.Id()]++
			if i == reused {
				continue
			}
			if owned[in.Id()] && !isOutput[in.Id()] && used[in.Id()] == uses[in.Id()] {
				if b, ok := live[in.Id()]; ok {
					liveBytes -= b
					delete(live, in.Id())
					if b > 0 {
						pool.give(in.DType(), in.Shape().Size())
					}
				}
			}
		}
	}
	m.PeakTempBytes = m.PeakBytes - m.ArgumentBytes
	m.AllocatedBytes = pool.allocated
	if m.PeakAt == nil { // the peak is before the first op: only the arguments
		for id, b := range live {
			peakLive[id] = b
		}
	}
	for id, b := range peakLive {
		k := kinds[id]
		m.Breakdown[k] += b
		m.AtPeak = append(m.AtPeak, Tensor{Node: nodes[id], Bytes: b, Kind: k})
	}
	if peakScratch > 0 {
		m.Breakdown[Other] += peakScratch
		m.AtPeak = append(m.AtPeak, Tensor{Node: m.PeakAt, Bytes: peakScratch, Kind: Other, Scratch: true})
	}
	sort.Slice(m.AtPeak, func(i, j int) bool {
		if m.AtPeak[i].Bytes != m.AtPeak[j].Bytes {
			return m.AtPeak[i].Bytes > m.AtPeak[j].Bytes
		}
		return m.AtPeak[i].Node.Id() < m.AtPeak[j].Node.Id()
	})
	m.Live = m.AtPeak
	m.AtPeak = m.AtPeak[:min(len(m.AtPeak), TopTensors)]
	return m
}

// stepOf describes executed node n by its sections, or by its role when it is in none.
func stepOf(n *graph.Node, outer, inner []string, forward []bool) Step {
	id := n.Id()
	s := Step{Node: id, Block: outer[id], Section: inner[id]}
	if s.Block == "" {
		s.Block = "backward"
		if forward != nil && forward[id] {
			s.Block = "forward"
		}
	}
	if s.Section == "" {
		s.Section = s.Block
	}
	return s
}

// bufferPool follows the embedded backend's buffer pools through a step: freed buffers by dtype
// and number of elements, and the bytes allocated when none was free.
type bufferPool struct {
	free      map[poolKey]int
	allocated int64
}

type poolKey struct {
	dtype    dtypes.DType
	elements int
}

func (p *bufferPool) take(dtype dtypes.DType, elements int) {
	k := poolKey{dtype, elements}
	if p.free[k] > 0 {
		p.free[k]--
		return
	}
	p.allocated += int64(elements) * int64(dtype.Size())
}

func (p *bufferPool) give(dtype dtypes.DType, elements int) {
	if p.free == nil {
		p.free = map[poolKey]int{}
	}
	p.free[poolKey{dtype, elements}]++
}

// bufferBytes is the size of a node's output buffer (0 for multi-output nodes, whose outputs are
// accounted by their split nodes).
func bufferBytes(n *graph.Node) int64 {
	if n.NumOutputs() != 1 {
		return 0
	}
	return int64(n.Shape().Memory())
}

// reusedInput returns the index of the input whose buffer the embedded backend writes the output
// into, or -1. It mirrors simplego v0.26.0: unary elementwise ops, Identity and Reshape reuse an
// owned input; binary elementwise ops reuse the right then the left operand when it has the output's
// shape; Where reuses its true then false operand; scatters reuse their operand.
func reusedInput(n *graph.Node, owned []bool) int {
	inputs := n.Inputs()
	same := func(i int) bool { return owned[i] && inputs[i].Shape().Equal(n.Shape()) }
	switch {
	case unaryInPlace[n.Type()], n.Type() == graph.NodeTypeIdentity:
		if owned[0] {
			return 0
		}
	case n.Type() == graph.NodeTypeReshape:
		if owned[0] && inputs[0].DType() == n.DType() {
			return 0
		}
	case binaryInPlace[n.Type()]:
		if same(1) {
			return 1
		}
		if same(0) {
			return 0
		}
	case n.Type() == graph.NodeTypeWhere:
		if same(1) {
			return 1
		}
		if same(2) {
			return 2
		}
	case n.Type() == graph.NodeTypeScatterSum || n.Type() == graph.NodeTypeScatterMax || n.Type() == graph.NodeTypeScatterMin:
		if same(0) {
			return 0
		}
	}
	return -1
}

var unaryInPlace = nodeTypeSet(graph.NodeTypeAbs, graph.NodeTypeBitCount, graph.NodeTypeBitwiseNot, graph.NodeTypeCeil,
	graph.NodeTypeClz, graph.NodeTypeCos, graph.NodeTypeErf, graph.NodeTypeExp, graph.NodeTypeExpm1, graph.NodeTypeFloor,
	graph.NodeTypeLog, graph.NodeTypeLog1p, graph.NodeTypeLogicalNot, graph.NodeTypeLogistic, graph.NodeTypeNeg,
	graph.NodeTypeRound, graph.NodeTypeRsqrt, graph.NodeTypeSign, graph.NodeTypeSin, graph.NodeTypeSqrt, graph.NodeTypeTanh)

var binaryInPlace = nodeTypeSet(graph.NodeTypeAdd, graph.NodeTypeBitwiseAnd, graph.NodeTypeBitwiseOr,
	graph.NodeTypeBitwiseXor, graph.NodeTypeDiv, graph.NodeTypeLogicalAnd, graph.NodeTypeLogicalOr,
	graph.NodeTypeLogicalXor, graph.NodeTypeMax, graph.NodeTypeMin, graph.NodeTypeMul, graph.NodeTypePow,
	graph.NodeTypeRem, graph.NodeTypeSub)

func nodeTypeSet(types ...graph.NodeType) map[graph.NodeType]bool {
	set := make(map[graph.NodeType]bool, len(types))
	for _, t := range types {
		set[t] = true
	}
	return set
}

// smallBytes is the size under which a buffer counts as Other (scalars, counters, schedules).
const smallBytes = 1024

// classify assigns a Kind to every needed node from its role and ancestry (see Kind).
func classify(p *Program, needed []bool) []Kind {
	nodes := p.Graph.Nodes()
	kinds := make([]Kind, len(nodes))
	dependsOnData := make([]bool, len(nodes))
	dependsOnState := make([]bool, len(nodes))
	dependsOnWeights := make([]bool, len(nodes))
	dependsOnFrozen := make([]bool, len(nodes))
	forward := make([]bool, len(nodes))
	if p.Loss != nil {
		for id, isAncestor := range NeededNodes(p.Graph, []*graph.Node{p.Loss}) {
			forward[id] = isAncestor
		}
	}
	weightShapes := map[string]bool{}
	for _, n := range nodes {
		if p.Trainable[n.Id()] {
			weightShapes[dimsKey(n.Shape())] = true
		}
	}
	for _, n := range nodes {
		id := n.Id()
		if !needed[id] {
			continue
		}
		switch n.Type() {
		case graph.NodeTypeParameter:
			switch {
			case p.Trainable[id]:
				kinds[id], dependsOnWeights[id] = Parameters, true
			case p.Frozen[id]:
				kinds[id], dependsOnFrozen[id] = FrozenWeights, true
			case p.State[id] && !n.DType().IsFloat():
				// Integer state is a random-number generator's or a counter: what it feeds (dropout
				// masks) is per-batch, like the data.
				kinds[id], dependsOnData[id] = OptimizerState, !n.IsScalar()
			case p.State[id]:
				// Only float tensor state (optimizer moments) marks what it feeds as optimizer
				// work: every gradient depends on a loss scale or a learning rate.
				kinds[id], dependsOnState[id] = OptimizerState, !n.IsScalar()
			default:
				kinds[id], dependsOnData[id] = Activations, true
			}
			continue
		case graph.NodeTypeConstant:
			kinds[id] = Other
			continue
		}
		for _, in := range n.Inputs() {
			dependsOnData[id] = dependsOnData[id] || dependsOnData[in.Id()]
			dependsOnState[id] = dependsOnState[id] || dependsOnState[in.Id()]
			dependsOnWeights[id] = dependsOnWeights[id] || dependsOnWeights[in.Id()]
			dependsOnFrozen[id] = dependsOnFrozen[id] || dependsOnFrozen[in.Id()]
		}
		weightShaped := weightShapes[dimsKey(n.Shape())]
		switch {
		case bufferBytes(n) < smallBytes:
			kinds[id] = Other
		case p.NewParams[id]:
			kinds[id] = Parameters
		case !dependsOnData[id] && dependsOnState[id]:
			kinds[id] = OptimizerState
		case !dependsOnData[id] && dependsOnWeights[id]:
			kinds[id] = Parameters // casts and copies of the weights
		case !dependsOnData[id] && dependsOnFrozen[id]:
			kinds[id] = FrozenWeights // casts and dequantized copies of the frozen weights
		case p.Loss != nil && !forward[id] && dependsOnState[id]:
			kinds[id] = OptimizerState // the update: moments and their temporaries
		case p.Loss != nil && weightShaped && dependsOnData[id]:
			// Not only outside the forward pass: with micro-batches the loss depends on the
			// gradients accumulated over the previous ones.
			kinds[id] = Gradients
		default:
			kinds[id] = Activations
		}
	}
	return kinds
}

// dimsKey identifies a shape's dimensions, whatever its dtype (a bfloat16 gradient of a float32
// weight is still weight-shaped).
func dimsKey(s shapes.Shape) string { return fmt.Sprint(s.Dimensions) }
