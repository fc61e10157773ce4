package analysis

import (
	"github.com/gomlx/gomlx/pkg/core/graph"
)

// NeededNodes marks, by node id, the nodes of g that outputs depend on.
func NeededNodes(g *graph.Graph, outputs []*graph.Node) []bool {
	needed := make([]bool, len(g.Nodes()))
	stack := append([]*graph.Node(nil), outputs...)
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if needed[n.Id()] {
			continue
		}
		needed[n.Id()] = true
		stack = append(stack, n.Inputs()...)
	}
	return needed
}

// IsReduction reports whether nodes of type t sum or reduce over axes (dot products included).
func IsReduction(t graph.NodeType) bool {
	switch t {
	case graph.NodeTypeReduceSum, graph.NodeTypeReduceProduct, graph.NodeTypeReduceMax, graph.NodeTypeReduceMin,
		graph.NodeTypeDot, graph.NodeTypeDotGeneral, graph.NodeTypeReduceWindow:
		return true
	}
	return false
}
