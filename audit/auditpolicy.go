package audit

import (
	"fmt"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
)

// ComputeDType is a matmul that multiplies a trainable variable as it is stored, in a dtype other
// than the compute dtype its scope's precision policy asks for: the layer ignores the policy.
// GoMLX's own layers (its layers.Dense, ...) compute in their input's dtype, so a float32 input
// under a bfloat16 policy is multiplied in float32, silently.
const ComputeDType FindingKind = "compute dtype"

// ComputeDTypes reports the matmuls of g (those outputs depend on) that multiply a context
// variable in its stored dtype when want(scope), the compute dtype the precision policy gives the
// variable's scope, differs (onegpu's mixed.Audit passes it). A layer that follows the policy casts
// the variable to the compute dtype first, so its matmul never reads the variable directly in
// another dtype. The finding's Scope is the variable's.
func ComputeDTypes(g *graph.Graph, outputs []*graph.Node, want func(scope string) dtypes.DType) []Finding {
	needed := analysis.NeededNodes(g, outputs)
	var findings []Finding
	for _, n := range g.Nodes() {
		if !needed[n.Id()] || !isMatmul(n.Type()) {
			continue
		}
		for _, in := range n.Inputs() {
			if !isVariable(in) || !in.DType().IsFloat() {
				continue
			}
			scope, name := variableScope(in)
			w := want(scope)
			if w == dtypes.InvalidDType || in.DType() == w || n.DType() == w {
				continue
			}
			findings = append(findings, Finding{Kind: ComputeDType, Node: n, Scope: scope, Message: fmt.Sprintf(
				"%s multiplies variable %s/%s as stored, in %s, where the policy computes in %s: the layer ignores the "+
					"policy (GoMLX's own layers compute in their input's dtype); use onegpu's layers, or cast the variable "+
					"and the input to %s", n.Type(), scope, name, lower(in.DType()), lower(w), lower(w))})
		}
	}
	return findings
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
