package audit

import (
	"fmt"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
)

// ComputeDType is an op that computes with a context variable as stored, in a dtype other than
// the compute dtype its scope's precision policy asks for: the layer ignores the policy. GoMLX's
// own layers (layers.Dense and DenseWithBias, LayerNormalization, ...) compute in their input's
// dtype, so a float32 input under a bfloat16 policy is multiplied, biased and scaled in float32,
// silently.
const ComputeDType FindingKind = "compute dtype"

// ComputeDTypes reports the ops of g that compute with a context variable in its stored
// dtype when want(scope), the compute dtype the precision policy gives the variable's scope,
// differs (onegpu's mixed.Audit passes it), where the variable meets the data: a matmul anywhere
// outputs depend on, and in the forward pass (what outputs[0], the loss, depends on) any other op
// (an add of a bias, a product with a norm's gain). A variable is followed through ops that only
// move values (reshapes, transposes, broadcasts, slices, gathers), add an exact zero (the ties
// of exact.NegativeZeroFrom and exact.ZeroTiedTo) or compute with other variables only (a dequantization); a cast
// (ConvertDType) ends the path: a layer that follows the policy casts the variable to the compute
// dtype first. The optimizer's update of a float32 parameter, outside the forward pass, is not
// reported. The finding's Scope is the variable's.
func ComputeDTypes(g *graph.Graph, outputs []*graph.Node, want func(scope string) dtypes.DType) []Finding {
	needed := analysis.NeededNodes(g, outputs)
	forward := needed
	if len(outputs) > 1 {
		forward = analysis.NeededNodes(g, outputs[:1])
	}
	users := consumers(g, needed)
	fromData := dataDependent(g)
	reported := map[graph.NodeId]bool{}
	var findings []Finding
	for _, v := range g.Nodes() {
		if !needed[v.Id()] || !isVariable(v) || !v.DType().IsFloat() {
			continue
		}
		scope, name := variableScope(v)
		w := want(scope)
		if w == dtypes.InvalidDType || v.DType() == w {
			continue
		}
		stack := []*graph.Node{v}
		for len(stack) > 0 {
			n := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for _, u := range users[n.Id()] {
				switch {
				case u.Type() == graph.NodeTypeConvertDType || reported[u.Id()]:
				case movesValues(u.Type()) || addsZeroTie(u) || !fromData[u.Id()]:
					stack = append(stack, u) // the value moved, tied, or computed with other variables only
				case u.DType() != w && (isMatmul(u.Type()) || forward[u.Id()]):
					reported[u.Id()] = true
					findings = append(findings, Finding{Kind: ComputeDType, Node: u, Scope: scope, Message: fmt.Sprintf(
						"%s computes with variable %s/%s as stored, in %s, where the policy computes in %s: the layer ignores the "+
							"policy (GoMLX's own layers compute in their input's dtype); use onegpu's layers, or cast the variable "+
							"and the input to %s", u.Type(), scope, name, lower(v.DType()), lower(w), lower(w))})
				}
			}
		}
	}
	return findings
}

// dataDependent marks the nodes of g that depend on a parameter that is not a context variable
// (the data) other than through a tie's exact zero (isZeroTie). An op that computes with variables alone (a dequantization of a quantized weight, a
// weight's preparation) is where the policy does not yet apply; where the result meets the data,
// it does.
func dataDependent(g *graph.Graph) []bool {
	marks := make([]bool, len(g.Nodes()))
	for _, n := range g.Nodes() { // in creation order: inputs first
		if n.Type() == graph.NodeTypeParameter {
			marks[n.Id()] = !isVariable(n)
			continue
		}
		if isZeroTie(n) {
			continue // a tie's zero carries an order, not the data's values
		}
		for _, in := range n.Inputs() {
			marks[n.Id()] = marks[n.Id()] || marks[in.Id()]
		}
	}
	return marks
}

// addsZeroTie reports whether n adds an exact zero tie (see isZeroTie) to its other operand: an
// order between values that changes no bit of the value.
func addsZeroTie(n *graph.Node) bool {
	if n.Type() != graph.NodeTypeAdd {
		return false
	}
	ins := n.Inputs()
	return isZeroTie(ins[0]) || isZeroTie(ins[1])
}

// isZeroTie reports whether n is an exact zero that only carries a data dependency, as the ties of
// package exact builds them: a product with a constant zero (NegativeZeroFrom's -0.0, the exact
// zero from a cotangent), a Where that always selects a constant zero (ZeroTiedTo), or a sum, cast,
// reshape or broadcast of such values.
func isZeroTie(n *graph.Node) bool {
	switch n.Type() {
	case graph.NodeTypeMul:
		return isConstantZero(n.Inputs()[0]) || isConstantZero(n.Inputs()[1])
	case graph.NodeTypeWhere:
		cond := n.Inputs()[0].ConstantValue()
		if cond == nil || !cond.Shape().IsScalar() {
			return false
		}
		always, ok := cond.Value().(bool)
		return ok && (!always && isConstantZero(n.Inputs()[2]) || always && isConstantZero(n.Inputs()[1]))
	case graph.NodeTypeAdd:
		return isZeroTie(n.Inputs()[0]) && isZeroTie(n.Inputs()[1])
	case graph.NodeTypeConvertDType, graph.NodeTypeReshape, graph.NodeTypeBroadcastInDim:
		return isZeroTie(n.Inputs()[0])
	}
	return false
}

// isConstantZero reports whether n is a constant scalar float zero (either sign).
func isConstantZero(n *graph.Node) bool {
	if n.Type() != graph.NodeTypeConstant {
		return false
	}
	c := n.ConstantValue()
	if c == nil || !c.Shape().IsScalar() || !c.Shape().DType.IsFloat() {
		return false
	}
	switch v := c.Value().(type) {
	case float32:
		return v == 0
	case float64:
		return v == 0
	}
	return false
}

// movesValues reports whether an op of type t only moves or repeats its input's values, computing
// nothing with them.
func movesValues(t graph.NodeType) bool {
	switch t {
	case graph.NodeTypeReshape, graph.NodeTypeTranspose, graph.NodeTypeBroadcastInDim, graph.NodeTypeIdentity, graph.NodeTypeDynamicSlice,
		graph.NodeTypeSlice, graph.NodeTypeGather, graph.NodeTypeConcatenate, graph.NodeTypeReverse, graph.NodeTypePad:
		return true
	}
	return false
}

func isMatmul(t graph.NodeType) bool {
	return t == graph.NodeTypeDot || t == graph.NodeTypeDotGeneral || t == graph.NodeTypeConvGeneral
}

// variableScope splits a variable parameter's name ("var:/block_0/mlp/weights") into its scope
// ("/block_0/mlp", "/" at the root) and its name.
func variableScope(n *graph.Node) (scope, name string) {
	path := strings.TrimPrefix(n.GetParameterName(), context.VariableParameterPrefix)
	i := strings.LastIndex(path, context.ScopeSeparator)
	if i <= 0 {
		return context.RootScope, strings.TrimPrefix(path, context.ScopeSeparator)
	}
	return path[:i], path[i+1:]
}
