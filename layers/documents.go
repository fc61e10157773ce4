package layers

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
)

// Documents says where the documents packed into a batch of sequences lie (data.Packed), so that
// no document reads another: Segments [batch, seq] (integers: a token attends only to the earlier
// tokens of its own segment) and Positions [batch, seq] (integers: each token's position within
// its document, which rotary embeddings rotate by). The zero Documents is one document a
// sequence, at positions 0, 1, ...
type Documents struct {
	Segments, Positions *graph.Node
}

// Packed reports whether d describes packed documents (its Segments are set).
func (d Documents) Packed() bool { return d.Segments != nil }

// check panics unless d's nodes are integers [batch, seq] (nil allowed) for x [batch, seq, ...].
func (d Documents) check(fn string, x *graph.Node) {
	for _, n := range []struct {
		name string
		node *graph.Node
	}{{"segments", d.Segments}, {"positions", d.Positions}} {
		if n.node == nil {
			continue
		}
		if s := n.node.Shape(); s.Rank() != 2 || !s.DType.IsInt() || s.Dim(0) != x.Shape().Dim(0) || s.Dim(1) != x.Shape().Dim(1) {
			panic(fmt.Sprintf("%s: the documents' %s must be integers [batch, seq] = [%d, %d], got %s", fn, n.name,
				x.Shape().Dim(0), x.Shape().Dim(1), s))
		}
	}
}

// sameSegment is true where query i and key j of a sequence lie in the same segment: [batch,
// queries, keys] for segments of the queries [batch, queries] and of the keys [batch, keys].
func sameSegment(queries, keys *graph.Node) *graph.Node {
	return graph.Equal(graph.InsertAxes(queries, -1), graph.InsertAxes(keys, 1))
}
