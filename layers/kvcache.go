package layers

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// KVCache is one attention layer's keys and values of the tokens a generation has read so far (a
// KV cache): Keys and Values [batch, length, kvHeads, headDim] in the compute dtype, entry p of a
// row holding the key and value of the row's token at position p. Its length is fixed (a bucket
// the caller chooses, at least the longest sequence it generates): GoMLX v0.26 has no While loop
// and the embedded backend no DynamicUpdateSlice, so a step writes its tokens' entries with a
// gather and a select (Write), and each query reads the entries up to its own position
// (CachedAttention), which leaves out the entries not yet written.
type KVCache struct {
	Keys, Values *graph.Node
}

// check panics unless c is a cache for keys and values k [batch, steps, kvHeads, headDim].
func (c KVCache) check(fn string, k *graph.Node) {
	if c.Keys == nil || c.Values == nil || !c.Keys.Shape().Equal(c.Values.Shape()) || c.Keys.Rank() != 4 {
		panic(fmt.Sprintf("%s: the cache needs Keys and Values of one shape [batch, length, kvHeads, headDim], got %v and %v",
			fn, shapeOrNil(c.Keys), shapeOrNil(c.Values)))
	}
	cd, kd := c.Keys.Shape().Dimensions, k.Shape().Dimensions
	if cd[0] != kd[0] || cd[2] != kd[2] || cd[3] != kd[3] || c.Keys.DType() != k.DType() {
		panic(fmt.Sprintf("%s: the cache %s does not hold keys %s (batch, key/value heads, head width and dtype must match)",
			fn, c.Keys.Shape(), k.Shape()))
	}
}

func shapeOrNil(n *graph.Node) any {
	if n == nil {
		return "nil"
	}
	return n.Shape()
}

// Write returns c with the keys and values k, v [batch, steps, kvHeads, headDim] of a step's
// tokens written at their positions [batch, steps] (integers, distinct within a row); a position
// outside [0, length) writes nothing (padding). The other entries are c's, unchanged: the new
// entries are gathered from k and v and selected where a position points, exact on every backend
// (no arithmetic touches a value).
func (c KVCache) Write(k, v, positions *graph.Node) KVCache {
	c.check("layers.KVCache.Write", k)
	if !k.Shape().Equal(v.Shape()) {
		panic(fmt.Sprintf("layers.KVCache.Write: keys %s and values %s must have one shape", k.Shape(), v.Shape()))
	}
	Documents{Positions: positions}.check("layers.KVCache.Write", k)
	g := k.Graph()
	batch, steps, length := k.Shape().Dim(0), k.Shape().Dim(1), c.Keys.Shape().Dim(1)
	positions = graph.ConvertDType(positions, dtypes.Int32)
	// hit[b, t, j]: step t of row b writes entry j.
	entries := graph.Iota(g, shapes.Make(dtypes.Int32, 1, 1, length), 2)
	hit := graph.Equal(graph.InsertAxes(positions, -1), entries)
	// The step that writes entry j (0 where none does), and whether one does: integer sums of at
	// most one term, exact.
	steps32 := graph.Iota(g, shapes.Make(dtypes.Int32, batch, steps, length), 1)
	zero := graph.ZerosLike(steps32)
	step := graph.ReduceSum(graph.Where(hit, steps32, zero), 1)                                                               // [b, length]
	written := graph.GreaterThan(graph.ReduceSum(graph.ConvertDType(hit, dtypes.Int32), 1), graph.Scalar(g, dtypes.Int32, 0)) // [b, length]
	rows := graph.Iota(g, shapes.Make(dtypes.Int32, batch, length), 0)
	at := graph.Stack([]*graph.Node{rows, step}, -1) // [b, length, 2]: (row, step) of each entry
	where := graph.BroadcastToDims(graph.Reshape(written, batch, length, 1, 1), c.Keys.Shape().Dimensions...)
	return KVCache{
		Keys:   graph.Where(where, graph.Gather(k, at), c.Keys),
		Values: graph.Where(where, graph.Gather(v, at), c.Values),
	}
}

// CachedAttention is PlainAttention of a step's queries q [batch, steps, heads, headDim] at
// positions [batch, steps] against a cache's keys and values k, v [batch, length, kvHeads,
// headDim]: query t of row b reads the entries 0..positions[b, t], so that with the step's own keys
// and values written (KVCache.Write) it computes what PlainAttention over the whole sequence so
// far computes for those queries, in the same dtypes. It returns [batch, steps, heads, headDim] in
// v's dtype.
func CachedAttention(q, k, v, positions *graph.Node, softmaxDType dtypes.DType) *graph.Node {
	const fn = "layers.CachedAttention"
	if q.Rank() != 4 || k.Rank() != 4 || !k.Shape().Equal(v.Shape()) {
		panic(fmt.Sprintf("%s: needs q [batch, steps, heads, headDim] and a cache's k, v [batch, length, kvHeads, headDim], got %s, %s, %s",
			fn, q.Shape(), k.Shape(), v.Shape()))
	}
	qd, kd := q.Shape().Dimensions, k.Shape().Dimensions
	if qd[0] != kd[0] || qd[3] != kd[3] || kd[2] < 1 || qd[2]%kd[2] != 0 {
		panic(fmt.Sprintf("%s: q %v and k, v %v must share batch and head width, and the key/value heads (%d) must divide the query heads (%d)",
			fn, qd, kd, kd[2], qd[2]))
	}
	if !q.DType().IsFloat() || q.DType() != k.DType() || k.DType() != v.DType() {
		panic(fmt.Sprintf("%s: q, k and v must share one floating-point (compute) dtype, got %s, %s, %s", fn, q.DType(), k.DType(), v.DType()))
	}
	Documents{Positions: positions}.check(fn, q)
	entries := graph.Iota(q.Graph(), shapes.Make(dtypes.Int32, 1, 1, kd[1]), 2)
	visible := graph.LessOrEqual(entries, graph.InsertAxes(graph.ConvertDType(positions, dtypes.Int32), -1)) // [b, steps, length]
	return attend(fn, q, k, v, softmaxDType, visible)
}
