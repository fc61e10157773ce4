package remat

import (
	"fmt"
	"math"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/graph"
)

// captured returns the float nodes fn's forward pass reads that are neither allowed (inputs,
// variables) nor constant expressions: values fn closes over, and parameters created inside fn
// (variables read through another context). They become entry points of their own.
func (b *block) captured(allowed map[*graph.Node]bool) []*graph.Node {
	var found []*graph.Node
	seen := map[*graph.Node]bool{}
	constant := map[*graph.Node]bool{}
	for _, n := range b.g.Nodes()[b.start:b.end] {
		if state := n.Inputs(); n.Type() == graph.NodeTypeRNGBitGenerator && !allowed[state[0]] &&
			(int(state[0].Id()) < b.start || state[0].Type() == graph.NodeTypeParameter) {
			panic(fmt.Errorf("remat.%s: the function draws random numbers from a state it does not take as an input "+
				"(dropout through a context it closes over?): the recomputation would draw different ones; "+
				"use CheckpointCtx, which replays them", b.caller))
		}
		for _, in := range n.Inputs() {
			if allowed[in] || seen[in] {
				continue
			}
			seen[in] = true
			inside := int(in.Id()) >= b.start
			if inside && in.Type() != graph.NodeTypeParameter || !differentiable(in) || isConstantExpression(in, constant) {
				continue
			}
			found = append(found, in)
		}
	}
	b.checkCapturedIndependent(found)
	return found
}

// checkCapturedIndependent panics when a captured value is computed from another one: the nested
// gradient would count the path between them twice.
func (b *block) checkCapturedIndependent(captured []*graph.Node) {
	if len(captured) < 2 {
		return
	}
	isCaptured := map[*graph.Node]bool{}
	oldest := math.MaxInt
	for _, c := range captured {
		isCaptured[c] = true
		oldest = min(oldest, int(c.Id()))
	}
	for _, c := range captured {
		seen := map[*graph.Node]bool{}
		stack := slices.Clone(c.Inputs())
		for len(stack) > 0 {
			n := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if seen[n] || int(n.Id()) < oldest || n.StopGradient() {
				continue
			}
			seen[n] = true
			if isCaptured[n] {
				panic(fmt.Errorf("remat.%s: the function closes over %s and over %s, which is computed from it; "+
					"pass them as inputs instead", b.caller, describeNode(n), describeNode(c)))
			}
			stack = append(stack, n.Inputs()...)
		}
	}
}

// isConstantExpression reports whether n depends on no parameter, memoizing in memo.
func isConstantExpression(n *graph.Node, memo map[*graph.Node]bool) bool {
	if v, ok := memo[n]; ok {
		return v
	}
	constant := n.Type() != graph.NodeTypeParameter
	for _, in := range n.Inputs() {
		if !constant {
			break
		}
		constant = isConstantExpression(in, memo)
	}
	memo[n] = constant
	return constant
}

func describeNode(n *graph.Node) string {
	if n.Type() == graph.NodeTypeParameter {
		return fmt.Sprintf("parameter %q", n.GetParameterName())
	}
	return fmt.Sprintf("node #%d (%s %s)", n.Id(), n.Type(), n.Shape())
}
