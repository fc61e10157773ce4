package audit

import (
	"fmt"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/exact"
)

// FindingKind names a class of dtype problem found by Audit.
type FindingKind string

const (
	// Reduction16 is a sum or product accumulated in a 16-bit float. The embedded backend
	// accumulates it in 16 bits: a bfloat16 sum of 1024 ones is 256. Sum in float32 instead
	// (SumInFloat32).
	Reduction16 FindingKind = "16-bit reduction"
	// UncastParameter is a float32 parameter combined with a value converted up from 16 bits: the
	// op runs in float32 because the parameter was not cast to the compute dtype.
	UncastParameter FindingKind = "uncast float32 parameter"
	// Float32Detour is a 16-bit value converted to float32 and back without any reduction in
	// between: float32 work (and memory traffic) that a 16-bit region did not ask for, typically
	// a float32 constant or parameter leaking into it. Islands that reduce (softmax, LayerNorm
	// statistics, losses) are not reported.
	Float32Detour FindingKind = "float32 detour"
)

// Finding is one dtype problem of a graph.
type Finding struct {
	Kind FindingKind
	Node *graph.Node // where it happens
	// Message says what is wrong and the fix; it names no node, so that repeated findings read
	// alike (String adds the node).
	Message string
	// Scope is the scope of the variables nearest to Node ("/block_3/mlp"): where in the model
	// it happens, for people; "" when no variable is near. GroupFindings groups by it.
	Scope string
}

// String is one line: the kind, the message and where: the node, or the scope of a finding that
// is about a variable, not an op (Variables').
func (f Finding) String() string {
	switch {
	case f.Node != nil:
		return fmt.Sprintf("%s: %s (node #%d)", f.Kind, f.Message, f.Node.Id())
	case f.Scope != "":
		return fmt.Sprintf("%s: %s (in %s)", f.Kind, f.Message, f.Scope)
	default:
		return fmt.Sprintf("%s: %s", f.Kind, f.Message)
	}
}

// Graph inspects the nodes of g that outputs depend on and reports 16-bit reductions, uncast
// float32 parameters in 16-bit regions and float32 detours (see FindingKind). Later packages assert
// on its findings; `onegpu memory` prints them grouped (GroupFindings).
func Graph(g *graph.Graph, outputs []*graph.Node) []Finding {
	needed := analysis.NeededNodes(g, outputs)
	weight := weightTest(g)
	users := consumers(g, needed)
	var findings []Finding
	for _, n := range g.Nodes() {
		if !needed[n.Id()] {
			continue
		}
		switch {
		case isSumLike(n.Type()) && exact.Is16Bit(n.DType()):
			in := n.Inputs()[0]
			findings = append(findings, Finding{Kind: Reduction16, Node: n, Message: fmt.Sprintf(
				"%s of %s reduces %d values to %d in %s: accumulate in float32 (exact.SumInFloat32)",
				n.Type(), in.Shape(), in.Shape().Size(), max(n.Shape().Size(), 1), n.DType())})
		case isUpcastMeetingParameter(n, weight):
			findings = append(findings, Finding{Kind: UncastParameter, Node: n, Message: fmt.Sprintf(
				"%s computes in float32 because a float32 parameter meets a value converted from 16 bits: "+
					"cast the parameter to the compute dtype", n.Type())})
		case isDowncast(n) && !n.IsScalar(): // a scalar costs nothing: remat's and accum's ties convert float32 zeros
			if segment, ok := float32Detour(n, users); ok {
				findings = append(findings, Finding{Kind: Float32Detour, Node: n, Message: fmt.Sprintf(
					"a 16-bit value goes through %d float32 ops without a reduction before it is converted back to %s",
					segment, n.DType())})
			}
		}
	}
	for i := range findings {
		findings[i].Scope = nearestScope(findings[i].Node)
	}
	return findings
}

// CountFindings returns how many findings have the given kind.
func CountFindings(findings []Finding, kind FindingKind) int {
	n := 0
	for _, f := range findings {
		if f.Kind == kind {
			n++
		}
	}
	return n
}

func isSumLike(t graph.NodeType) bool {
	return t == graph.NodeTypeReduceSum || t == graph.NodeTypeReduceProduct
}

// isUpcast reports whether n converts a 16-bit float to float32.
func isUpcast(n *graph.Node) bool {
	return n.Type() == graph.NodeTypeConvertDType && n.DType() == dtypes.Float32 && exact.Is16Bit(n.Inputs()[0].DType())
}

// isDowncast reports whether n converts float32 to a 16-bit float.
func isDowncast(n *graph.Node) bool {
	return n.Type() == graph.NodeTypeConvertDType && exact.Is16Bit(n.DType()) && n.Inputs()[0].DType() == dtypes.Float32
}

// weightTest returns how Audit tells a weight among g's parameters: in a graph with context
// variables (parameters named "var:/scope/name"), the variables are the weights and the other
// parameters are data, such as the targets a float32 loss compares the model's output with; in a
// graph without any, every parameter may be a weight.
func weightTest(g *graph.Graph) func(*graph.Node) bool {
	for _, n := range g.Nodes() {
		if isVariable(n) {
			return isVariable
		}
	}
	return func(n *graph.Node) bool { return n.Type() == graph.NodeTypeParameter }
}

// isVariable reports whether n is the parameter of a context variable.
func isVariable(n *graph.Node) bool {
	return n.Type() == graph.NodeTypeParameter && strings.HasPrefix(n.GetParameterName(), context.VariableParameterPrefix)
}

func isUpcastMeetingParameter(n *graph.Node, weight func(*graph.Node) bool) bool {
	if n.Type() == graph.NodeTypeConvertDType || n.DType() != dtypes.Float32 {
		return false
	}
	param, upcast := false, false
	for _, in := range n.Inputs() {
		// Scalars (a loss scale, a learning rate) are meant to be float32: no finding.
		param = param || (weight(in) && in.DType() == dtypes.Float32 && !in.IsScalar())
		upcast = upcast || isUpcast(in)
	}
	return param && upcast
}

// float32Detour walks back from a downcast through float32 ops to the conversions that feed them.
// It reports the number of float32 ops in between when they include no reduction and are fed by at
// least one upcast from 16 bits that does not open a reducing island: an upcast whose float32
// value goes on to a reduction (a float32 loss of a 16-bit model's output, statistics) is
// deliberate, and the region is then that island's gradient on its way back into 16 bits.
func float32Detour(downcast *graph.Node, users [][]*graph.Node) (int, bool) {
	const limit = 64 // a detour is a few elementwise ops; longer float32 regions are deliberate
	seen := map[graph.NodeId]bool{}
	stack := []*graph.Node{downcast.Inputs()[0]}
	ops, fedByUpcast := 0, false
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[n.Id()] {
			continue
		}
		seen[n.Id()] = true
		switch {
		case isUpcast(n):
			fedByUpcast = fedByUpcast || !opensReducingIsland(n, users)
			continue
		case n.Type() == graph.NodeTypeParameter || n.Type() == graph.NodeTypeConstant || n.Type() == graph.NodeTypeConvertDType:
			continue
		case analysis.IsReduction(n.Type()) || n.DType() != dtypes.Float32:
			return 0, false
		}
		ops++
		if ops > limit {
			return 0, false
		}
		stack = append(stack, n.Inputs()...)
	}
	return ops, fedByUpcast && ops > 0
}

// opensReducingIsland reports whether the float32 value of upcast reaches a reduction through
// float32 ops (a few dozen at most).
func opensReducingIsland(upcast *graph.Node, users [][]*graph.Node) bool {
	const limit = 64
	seen := map[graph.NodeId]bool{}
	stack := []*graph.Node{upcast}
	for visited := 0; len(stack) > 0 && visited < limit; visited++ {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, u := range users[n.Id()] {
			switch {
			case seen[u.Id()] || u.DType() != dtypes.Float32 || u.Type() == graph.NodeTypeConvertDType:
			case analysis.IsReduction(u.Type()):
				return true
			default:
				seen[u.Id()] = true
				stack = append(stack, u)
			}
		}
	}
	return false
}

// consumers lists, for each needed node, the needed nodes that take it as an input.
func consumers(g *graph.Graph, needed []bool) [][]*graph.Node {
	users := make([][]*graph.Node, len(g.Nodes()))
	for _, n := range g.Nodes() {
		if !needed[n.Id()] {
			continue
		}
		for _, in := range n.Inputs() {
			users[in.Id()] = append(users[in.Id()], n)
		}
	}
	return users
}
